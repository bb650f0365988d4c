"""The published contract of the DMS webhook: event schema (version 1) and signing rules.

Everything a DMS integrator needs is here and in docs/dms-events.md: the
envelope (`schema_version`, `event_id`, `type`, `occurred_at`), one model per
event type as a union discriminated on `type`, and how a request is signed.
The models are strict (`extra="forbid"`): an unknown field is a schema error
(400 naming the field), not something silently ignored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import time
from collections.abc import Iterable
from datetime import date
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError, field_validator, model_validator

from ki_core.models import GrantEffect, RelationKind, VersionStatus

SCHEMA_VERSION = 1
SIGNATURE_HEADER = "X-KI-Signature"
TIMESTAMP_HEADER = "X-KI-Timestamp"
SIGNATURE_SCHEME = "sha256"

NonEmpty = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
ObjectId = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1000)]
Sha256Hex = Annotated[str, StringConstraints(strip_whitespace=True, to_lower=True, pattern=r"^[0-9a-fA-F]{64}$")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AclEntry(_Model):
    """One entry of an object's ACL, as the DMS holds it (user, group or role name)."""

    principal: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=300)]
    effect: GrantEffect = GrantEffect.ALLOW


# A known ACL is a list (an empty list: nobody but admins); "unknown" keeps the object invisible.
Acl = list[AclEntry] | Literal["unknown"]


class Content(_Model):
    """The bytes of a version: inline as base64, or a URL under the source's content base with its sha256."""

    base64: str | None = None
    url: str | None = None
    sha256: Sha256Hex | None = None

    @model_validator(mode="after")
    def _one_way_to_get_the_bytes(self) -> Content:
        if (self.base64 is None) == (self.url is None):
            raise ValueError("give exactly one of base64 or url")
        if self.url is not None and self.sha256 is None:
            raise ValueError("content given by url needs its sha256")
        return self

    @field_validator("base64")
    @classmethod
    def _decodes(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("not valid base64") from None
        return value

    def inline_bytes(self) -> bytes:
        assert self.base64 is not None
        return base64.b64decode(self.base64, validate=True)


class Envelope(_Model):
    schema_version: Literal[1] = SCHEMA_VERSION
    # Unique per source; a repeated id is acknowledged as a duplicate and not processed again.
    event_id: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=300)]
    occurred_at: AwareDatetime


class DocumentUpserted(Envelope):
    """A document object was created or got new content, metadata or ACL."""

    type: Literal["document.upserted"]
    object_id: ObjectId
    project: NonEmpty
    matter: str | None = None
    # Groups several objects into one document; default: the object id.
    document: str | None = None
    title: str | None = None
    # File name with suffix: how the converter recognises the format when media_type is absent.
    filename: str | None = None
    media_type: str | None = None
    version_label: str | None = None
    status: VersionStatus = VersionStatus.UNKNOWN
    language: str | None = None
    doc_date: date | None = None
    content: Content
    acl: Acl


class DocumentDeleted(Envelope):
    type: Literal["document.deleted"]
    object_id: ObjectId


class AclChanged(Envelope):
    """The object's ACL is replaced as a whole."""

    type: Literal["acl.changed"]
    object_id: ObjectId
    acl: Acl


class GroupChanged(Envelope):
    """The group's membership is replaced as a whole."""

    type: Literal["group.changed"]
    group: NonEmpty
    members: list[str]


class ProjectChanged(Envelope):
    """The project's grants made by this source are replaced as a whole (local grants stay)."""

    type: Literal["project.changed"]
    project: NonEmpty
    title: str | None = None
    grants: list[AclEntry]


class RelationUpserted(Envelope):
    type: Literal["relation.upserted"]
    kind: Literal["annex_of", "responds_to", "thread", "references"]
    from_object: ObjectId
    to_object: ObjectId
    attributes: dict[str, Any] = Field(default_factory=dict)

    @property
    def relation_kind(self) -> RelationKind:
        return RelationKind(self.kind)


class Evidence(_Model):
    object_id: ObjectId
    # A version label of the object; default: the version the object shows now.
    version_label: str | None = None


class DecisionRecorded(Envelope):
    """Why something changed: the locus, what changed, why, and the documents it rests on."""

    type: Literal["decision.recorded"]
    # Stable id of the decision in the DMS; a later event with the same id updates it. Default: event_id.
    decision_id: str | None = None
    project: NonEmpty
    matter: str | None = None
    locus: NonEmpty
    change_summary: NonEmpty
    rationale: NonEmpty
    decided_by: str | None = None
    decided_at: AwareDatetime | None = None
    evidence: Annotated[list[Evidence], Field(min_length=1)]


class SourceListing(Envelope):
    """A complete listing of the source's document objects: objects missing from it are deleted."""

    type: Literal["source.listing"]
    object_ids: list[ObjectId]


DmsEvent = Annotated[
    DocumentUpserted
    | DocumentDeleted
    | AclChanged
    | GroupChanged
    | ProjectChanged
    | RelationUpserted
    | DecisionRecorded
    | SourceListing,
    Field(discriminator="type"),
]
EVENT_ADAPTER: TypeAdapter[DmsEvent] = TypeAdapter(DmsEvent)
EVENT_TYPES: tuple[str, ...] = (
    "document.upserted",
    "document.deleted",
    "acl.changed",
    "group.changed",
    "project.changed",
    "relation.upserted",
    "decision.recorded",
    "source.listing",
)
# Events that change who sees what: processed on the access queue, never behind a backlog of uploads.
ACCESS_EVENT_TYPES: tuple[str, ...] = ("acl.changed", "group.changed", "project.changed", "document.deleted")


# ------------------------------------------------------------ validation


class EventSchemaError(ValueError):
    """A payload that is not a valid event; `problems` are (field path, message) pairs."""

    def __init__(self, problems: list[tuple[str, str]]):
        # A path may hold a key with a lone surrogate: escaped, so the 400 can be written as UTF-8.
        self.problems = [(path.encode("utf-8", "backslashreplace").decode("utf-8"), message) for path, message in problems]
        super().__init__("; ".join(f"{path}: {message}" for path, message in self.problems))


def parse_event(data: Any) -> DmsEvent:
    """A typed event from decoded JSON, or EventSchemaError naming each bad field."""
    unstorable = unstorable_strings(data)
    if unstorable:
        raise EventSchemaError(unstorable)
    try:
        return EVENT_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise EventSchemaError(schema_problems(exc, data)) from None


def unstorable_strings(data: Any) -> list[tuple[str, str]]:
    """Strings no database column can hold: a NUL character or a lone surrogate (JSON's "\\ud800").
    Refused up front with their path, instead of a database error after the 202. Walked with a
    stack, not recursion: any depth json.loads accepted is fine here."""
    problems: list[tuple[str, str]] = []
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                problems.append((path or "(body)", "contains a NUL character"))
            elif not _encodable(value):
                problems.append((path or "(body)", "contains a lone surrogate (not valid Unicode text)"))
        elif isinstance(value, dict):
            for key, item in value.items():
                stack.append((path, key))
                stack.append((f"{path}.{key}" if path else str(key), item))
        elif isinstance(value, list):
            stack.extend((f"{path}.{n}" if path else str(n), item) for n, item in enumerate(value))
    return sorted(problems)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def schema_problems(exc: ValidationError, data: Any) -> list[tuple[str, str]]:
    """Field paths as the sender wrote them: without the union tags pydantic adds.

    Of an error at `acl` ("should be 'unknown'") and one at `acl.0.principal`,
    only the deeper one is kept: it is the one that says what to fix.
    """
    tag = data.get("type") if isinstance(data, dict) else None
    found: list[tuple[str, str]] = []
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"]]
        if loc and loc[0] == tag:
            loc = loc[1:]
        loc = [part for part in loc if not _UNION_BRANCH.match(part)]
        if error["type"].startswith("union_tag"):
            loc = ["type"]
        found.append((".".join(loc) or "(event)", error["msg"]))
    paths = {path for path, _ in found}
    kept = [(p, m) for p, m in found if not any(other.startswith(p + ".") for other in paths)]
    return list(dict.fromkeys(kept))


_UNION_BRANCH = re.compile(r"^[a-z]+\[.*\]$")


def event_json_schema(ref_template: str = "#/components/schemas/{model}") -> tuple[dict, dict]:
    """(schema of the union, its definitions) with references in OpenAPI form."""
    schema = EVENT_ADAPTER.json_schema(ref_template=ref_template, mode="validation")
    definitions = schema.pop("$defs", {})
    schema["title"] = "DmsEvent"
    return schema, definitions


# --------------------------------------------------------------- signing


class SignatureError(ValueError):
    """Missing, malformed, wrong or stale signature: answered with 401."""


def signed_message(timestamp: str, body: bytes) -> bytes:
    """What is signed: the timestamp header value, a dot, and the raw body bytes."""
    return timestamp.encode("ascii") + b"." + body


def sign(secret: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The two headers a sender adds (what the bench, the tests and the docs' example do)."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), signed_message(stamp, body), hashlib.sha256).hexdigest()
    return {TIMESTAMP_HEADER: stamp, SIGNATURE_HEADER: f"{SIGNATURE_SCHEME}={digest}"}


def verify_signature(
    secrets: Iterable[str],
    body: bytes,
    timestamp: str | None,
    signature: str | None,
    *,
    tolerance_seconds: int,
    now: float | None = None,
) -> None:
    """Raise SignatureError unless `signature` is an HMAC of `timestamp.body` under one of `secrets`."""
    if not timestamp or not signature:
        raise SignatureError(f"missing {TIMESTAMP_HEADER} or {SIGNATURE_HEADER} header")
    # ASCII digits only: int() also takes other Unicode digits and spaces (a leading no-break
    # space), which the ASCII-encoded signed message could not carry.
    if not (timestamp.isascii() and timestamp.isdigit()) or not signature.isascii():
        raise SignatureError(f"{TIMESTAMP_HEADER} must be integer Unix seconds in ASCII digits, {SIGNATURE_HEADER} ASCII")
    sent_at = int(timestamp)
    if abs((time.time() if now is None else now) - sent_at) > tolerance_seconds:
        raise SignatureError(f"{TIMESTAMP_HEADER} is outside the {tolerance_seconds} s window")
    offered = [part.strip() for part in signature.split(",")]
    digests = [p.split("=", 1)[1] for p in offered if p.startswith(f"{SIGNATURE_SCHEME}=")]
    message = signed_message(timestamp, body)
    for secret in secrets:
        expected = hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()
        # compare_digest on every candidate: no early exit that would time the match.
        if any(hmac.compare_digest(expected.encode(), digest.encode()) for digest in digests):
            return
    raise SignatureError("signature does not match")
