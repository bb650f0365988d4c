"""Apply DMS events to SQL: content fetch, version ingest, ACL mirror, memberships, graph.

Stage functions, no Celery: `apply_event` makes SQL reflect one event and
returns the ids the next stages need (`Followups`); the task hands them on.
SQL is the truth and visibility is decided there, so an ACL change is in force
as soon as its transaction commits; the index projection follows.

Every handler is idempotent (running an event twice is harmless), and events
may arrive out of order: a per-subject watermark (`source_watermarks`) skips
an event older than the one already applied to the same object, group,
project or decision, so a late grant cannot undo a revocation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote, urljoin, urlsplit

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential, wait_random

from ki_core.audit import Actor, AuditAction, Surface, audit_log, record, record_membership
from ki_core.config import DmsSettings, DmsSourceSettings
from ki_core.grants import AclEntry as GrantAclEntry
from ki_core.grants import (
    GrantTarget,
    InvalidPrincipal,
    grant,
    mirrored_object_grants,
    replace_group_members,
    replace_object_acl,
    revoke,
    stored_principal,
)
from ki_core.models import (
    DecisionEvidence,
    DecisionRecord,
    Document,
    DocumentVersion,
    Grant,
    GrantEffect,
    GrantScope,
    ObservationState,
    ProcessingState,
    Project,
    Relation,
    Source,
    SourceObject,
    SourceObservation,
    SourceWatermark,
)
from ki_workers.context import WorkerContext
from ki_workers.sources.dms_events import (
    Acl,
    AclChanged,
    DecisionRecorded,
    DmsEvent,
    DocumentDeleted,
    DocumentUpserted,
    GroupChanged,
    ProjectChanged,
    RelationUpserted,
    SourceListing,
)
from ki_workers.sources.local_fs import ManifestEntry
from ki_workers.stages.ingest import ingest_bytes, refresh_latest_final, retire_object
from ki_workers.stages.rows import get_or_create_matter, get_or_create_project


class PermanentEventError(Exception):
    """Retrying cannot help (bad content, a self-referencing relation): the event is parked with the reason."""


class ContentRejected(PermanentEventError):
    """The content is too large, its sha256 does not match, or the DMS says it is gone."""


class ContentUnavailable(Exception):
    """The content server failed or timed out after our retries: the task retries later."""


class ObjectNotYetKnown(Exception):
    """A relation names an object whose document has not arrived yet: retried, it usually has by then."""


@dataclass
class Followups:
    """What the next stages must do after the event's transaction committed."""

    extract: list[str] = field(default_factory=list)
    embed: list[str] = field(default_factory=list)
    access: list[str] = field(default_factory=list)
    # Shown with the event (a superseded event, a version that failed conversion).
    note: str | None = None


SUPERSEDED = "superseded: a newer event was already applied to {subject}"


def apply_event(ctx: WorkerContext, source: Source, event: DmsEvent) -> Followups:
    """Make SQL reflect `event`; returns what the pipeline must do next."""
    return _HANDLERS[event.type](ctx, source, event)


# ---------------------------------------------------------------- watermarks


def advance_watermark(session: Session, source_id: str, subject: str, event: DmsEvent) -> bool:
    """Lock the subject's watermark and move it to `event`, unless a newer event was applied already.

    Ties apply: replaying the same event is harmless and two events of the same
    instant are applied in processing order.
    """
    row = session.scalar(
        select(SourceWatermark)
        .where(SourceWatermark.source_id == source_id, SourceWatermark.subject == subject)
        .with_for_update()
    )
    if row is None:
        session.add(SourceWatermark(source_id=source_id, subject=subject, occurred_at=event.occurred_at, event_id=event.event_id))
        session.flush()
        return True
    if _trusted(_aware(row.occurred_at)) > event.occurred_at:
        return False
    row.occurred_at, row.event_id = event.occurred_at, event.event_id
    return True


def applied_after(session: Session, source_id: str, subject: str, moment: datetime) -> bool:
    """Whether an event newer than `moment` was applied to the subject (a read, no lock)."""
    seen = session.scalar(
        select(SourceWatermark.occurred_at).where(SourceWatermark.source_id == source_id, SourceWatermark.subject == subject)
    )
    return seen is not None and _trusted(_aware(seen)) > moment


# The ingress refuses events dated past its signature window (minutes); a watermark further ahead
# of the clock than this was left by such an event before that check and blocks nothing.
MAX_WATERMARK_LEAD = timedelta(hours=1)


def _trusted(watermark: datetime) -> datetime:
    """The watermark, or the distant past if it lies impossibly far in the future."""
    return watermark if watermark <= datetime.now(UTC) + MAX_WATERMARK_LEAD else datetime.min.replace(tzinfo=UTC)


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; they were written as UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


# ------------------------------------------------------------------ content


def fetch_content(event: DocumentUpserted, source: DmsSourceSettings | None, dms: DmsSettings) -> bytes:
    """The version's bytes, size-capped and checked against the announced sha256."""
    content = event.content
    if content.base64 is not None:
        data = content.inline_bytes()
        _check_size(len(data), dms.max_content_bytes)
    else:
        url = content_url(content.url or "", source)
        headers = {}
        if source is not None and source.content_token is not None:
            headers["Authorization"] = f"Bearer {source.content_token.get_secret_value()}"
        data = _download(url, headers, dms)
    if content.sha256 is not None and hashlib.sha256(data).hexdigest() != content.sha256:
        raise ContentRejected(f"content sha256 {hashlib.sha256(data).hexdigest()} does not match {content.sha256}")
    return data


# Percent-decoding rounds before a path counts as stable: "%252e" is two rounds from ".".
MAX_DECODING_ROUNDS = 5


def content_url(url: str, source: DmsSourceSettings | None) -> str:
    """The URL joined to the source's content base; anything outside the base is refused (no SSRF).

    The path is judged as a server that decodes before resolving would see it: percent-decoded
    until stable ("%2e%2e/", "..%2f", "%252e%252e/"), backslashes read as slashes; then no ".."
    segment may remain and it must lie under the base's path, on the base's scheme and host."""
    base = source.content_base_url if source is not None else None
    if not base:
        raise ContentRejected("content by url needs dms.sources.<name>.content_base_url")
    resolved = urljoin(base if base.endswith("/") else base + "/", url)
    want, got = urlsplit(base), urlsplit(resolved)
    path = _decoded_path(got.path, url).replace("\\", "/")
    inside = (got.scheme, got.netloc) == (want.scheme, want.netloc) and path.startswith(want.path.rstrip("/") + "/")
    if not inside or ".." in path.split("/") or any(ord(ch) < 32 for ch in path):
        raise ContentRejected(f"content url {url!r} is outside {base}")
    return resolved


def _decoded_path(path: str, url: str) -> str:
    for _ in range(MAX_DECODING_ROUNDS):
        decoded = unquote(path)
        if decoded == path:
            return decoded
        path = decoded
    raise ContentRejected(f"content url {url!r} is percent-encoded more than {MAX_DECODING_ROUNDS} times")


def _download(url: str, headers: dict[str, str], dms: DmsSettings) -> bytes:
    fetch = retry(
        retry=retry_if_exception_type((ContentUnavailable, httpx.TransportError)),
        stop=stop_after_attempt(dms.fetch_attempts),
        wait=wait_exponential(multiplier=0.5, max=8) + wait_random(0, 0.5),
        reraise=True,
    )(_download_once)
    try:
        return fetch(url, headers, dms)
    except httpx.TransportError as exc:
        raise ContentUnavailable(f"content fetch failed: {type(exc).__name__}: {exc}") from exc


def _download_once(url: str, headers: dict[str, str], dms: DmsSettings) -> bytes:
    with httpx.Client(timeout=dms.fetch_timeout_seconds, follow_redirects=False) as client:
        with client.stream("GET", url, headers=headers) as response:
            if response.status_code >= 500 or response.status_code == 429:
                raise ContentUnavailable(f"content server answered {response.status_code} for {url}")
            if response.status_code != 200:
                raise ContentRejected(f"content server answered {response.status_code} for {url}")
            declared = response.headers.get("content-length")
            if declared and declared.isdigit():
                _check_size(int(declared), dms.max_content_bytes)
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                _check_size(size, dms.max_content_bytes)
                chunks.append(chunk)
            return b"".join(chunks)


def _check_size(size: int, limit: int) -> None:
    if size > limit:
        raise ContentRejected(f"content is larger than dms.max_content_bytes ({limit} bytes)")


# ---------------------------------------------------------------- ACL mirror


def mirror_acl(session: Session, obj: SourceObject, acl: Acl, origin: str) -> list[str]:
    """Make the object's mirrored ACL what the source says; what changed (`+allow anna`), empty if nothing.

    A list, even an empty one, is a known ACL; "unknown" leaves the object
    invisible to everyone but admins (fail closed for external sources).
    """
    try:
        wanted = None if acl == "unknown" else {(stored_principal(e.principal), e.effect) for e in acl}
    except InvalidPrincipal as exc:
        raise PermanentEventError(str(exc)) from exc
    current = {(g.principal, g.effect) for g in _object_grants(session, obj.id)} if obj.acl_known else None
    if wanted == current:
        return []
    entries = None if wanted is None else [GrantAclEntry(principal=p, effect=e) for p, e in sorted(wanted)]
    replace_object_acl(session, obj.id, entries, origin=origin)
    return ["unknown"] if wanted is None else _changes(current or set(), wanted)


def _changes(current: set[tuple[str, GrantEffect]], wanted: set[tuple[str, GrantEffect]]) -> list[str]:
    """`-deny bob`, `+allow anna`: the entries removed, then those added, as the audit trail states them."""
    return ([f"-{effect.value} {principal}" for principal, effect in sorted(current - wanted)]
            + [f"+{effect.value} {principal}" for principal, effect in sorted(wanted - current)])


def record_access_change(ctx: WorkerContext, source: Source, event: DmsEvent, where: str, changes: list[str]) -> None:
    """A sync's change of who may see what, in the audit trail before it commits (ki_core.audit)."""
    if changes:
        record(audit_log(ctx.settings), Actor.named(f"source:{source.name}"), Surface.SYNC, AuditAction.ACCESS_CHANGE,
               event_id=event.event_id, detail=f"{where}: {', '.join(changes)}")


def _object_grants(session: Session, object_id: str) -> list[Grant]:
    """The object's mirrored ACL: an operator's local rules on it are not the source's to compare or replace."""
    return list(session.scalars(select(Grant).where(mirrored_object_grants(object_id))))


# ------------------------------------------------------------------ objects


def find_object(session: Session, source: Source, external_id: str) -> SourceObject | None:
    return session.scalar(
        select(SourceObject).where(SourceObject.source_id == source.id, SourceObject.external_id == external_id)
    )


def known_object(session: Session, source: Source, external_id: str) -> SourceObject:
    """The object, created without an ACL (invisible) when an ACL or decision names it first."""
    obj = find_object(session, source, external_id)
    if obj is None:
        obj = SourceObject(source_id=source.id, external_id=external_id, title=external_id, acl_known=False)
        session.add(obj)
        session.flush()
    return obj


def observing_versions(session: Session, object_id: str, *, active_only: bool = False) -> list[str]:
    stmt = select(SourceObservation.version_id).where(SourceObservation.source_object_id == object_id)
    if active_only:
        stmt = stmt.where(SourceObservation.state == ObservationState.ACTIVE)
    return sorted(set(session.scalars(stmt)))


# ------------------------------------------------------------------ handlers


def _upsert_document(ctx: WorkerContext, source: Source, event: DocumentUpserted) -> Followups:
    subject = f"content:{event.object_id}"
    with ctx.sessions() as session:
        if applied_after(session, source.id, subject, event.occurred_at):
            return Followups(note=SUPERSEDED.format(subject=subject))
    # Slow I/O outside any transaction; the watermark is checked again under its lock.
    data = fetch_content(event, ctx.settings.dms.sources.get(source.name), ctx.settings.dms)
    with ctx.sessions() as session, session.begin():
        source = session.get(Source, source.id)
        if not advance_watermark(session, source.id, subject, event):
            return Followups(note=SUPERSEDED.format(subject=subject))
        result = ingest_bytes(
            session, source=source, project=get_or_create_project(session, event.project),
            external_id=event.object_id, data=data, entry=_manifest_entry(event),
            filename=event.filename, media_type=event.media_type,
        )
        version = session.get(DocumentVersion, result.version_id)
        metadata_changed = _apply_metadata(session, version, event)
        obj = find_object(session, source, event.object_id)
        obj.title = event.title or obj.title
        if advance_watermark(session, source.id, f"acl:{event.object_id}", event):
            changed = mirror_acl(session, obj, event.acl, origin=source.name)
            record_access_change(ctx, source, event, f"acl of {event.object_id}", changed)
        # The ACL mirror bumps access_version in SQL, behind the ORM's back.
        session.refresh(version, ["access_version", "indexed_access_version", "processing_state"])
        followups = _next_stages(version, metadata_changed)
        followups.access.extend(result.retired_version_ids)
        if result.outcome == "failed":
            followups.note = f"version {version.id} failed: {result.reason}"
    return followups


def _manifest_entry(event: DocumentUpserted) -> ManifestEntry:
    return ManifestEntry(
        path=event.filename or event.object_id,
        document=event.document or event.object_id,
        version=event.version_label,
        status=event.status,
        matter=event.matter,
        title=event.title,
        doc_date=event.doc_date,
        language=event.language,
    )


def _apply_metadata(session: Session, version: DocumentVersion, event: DocumentUpserted) -> bool:
    """Same bytes, new metadata (a draft declared final, a new title): True when the index fields change."""
    document = session.get(Document, version.document_id)
    if event.title:
        document.title = event.title
    changed = False
    wanted = {"status": event.status, "version_label": event.version_label}
    # Like title and language, a date the event does not carry leaves the version's date alone:
    # it may have come from the text (record_metadata), and the same bytes are not re-extracted.
    if event.doc_date:
        wanted["doc_date"] = event.doc_date
    if event.language:
        wanted["language"] = event.language
    for name, value in wanted.items():
        if getattr(version, name) != value:
            setattr(version, name, value)
            changed = True
    if event.matter:
        matter = get_or_create_matter(session, session.get(Project, document.project_id), event.matter)
        if document.matter_id != matter.id:
            document.matter_id = matter.id
            changed = True
    if changed:
        refresh_latest_final(session, document)
    session.flush()
    return changed and version.processing_state != ProcessingState.PENDING


def _next_stages(version: DocumentVersion, metadata_changed: bool) -> Followups:
    """Derived from the version's state, not from what this run did: a re-run after a crash redoes what is missing."""
    state = version.processing_state
    if state in (ProcessingState.PENDING, ProcessingState.CONVERTED):
        return Followups(extract=[version.id])
    if state == ProcessingState.EXTRACTED or (state == ProcessingState.INDEXED and metadata_changed):
        return Followups(embed=[version.id])
    if state == ProcessingState.INDEXED and version.indexed_access_version != version.access_version:
        return Followups(access=[version.id])
    return Followups()


def _delete_document(ctx: WorkerContext, source: Source, event: DocumentDeleted) -> Followups:
    subject = f"content:{event.object_id}"
    with ctx.sessions() as session, session.begin():
        if not advance_watermark(session, source.id, subject, event):
            return Followups(note=SUPERSEDED.format(subject=subject))
        obj = find_object(session, session.get(Source, source.id), event.object_id)
        if obj is None:
            # The watermark now stops a late, older upsert from bringing it back.
            return Followups(note="object was never ingested")
        return Followups(access=retire_object(session, obj))


def _change_acl(ctx: WorkerContext, source: Source, event: AclChanged) -> Followups:
    subject = f"acl:{event.object_id}"
    with ctx.sessions() as session, session.begin():
        if not advance_watermark(session, source.id, subject, event):
            return Followups(note=SUPERSEDED.format(subject=subject))
        obj = known_object(session, session.get(Source, source.id), event.object_id)
        changed = mirror_acl(session, obj, event.acl, origin=source.name)
        if not changed:
            return Followups(note="ACL unchanged")
        record_access_change(ctx, source, event, f"acl of {event.object_id}", changed)
        return Followups(access=observing_versions(session, obj.id))


def _change_group(ctx: WorkerContext, source: Source, event: GroupChanged) -> Followups:
    """Memberships are expanded at query time and are not part of the index projection.

    So a membership change needs no index write: it bumps the access
    generation, and the next scope compilation (and re-verification) sees it.
    Each member added or removed is in the audit trail before the change commits.
    """
    subject = f"group:{stored_principal(event.group)}"
    with ctx.sessions() as session, session.begin():
        if not advance_watermark(session, source.id, subject, event):
            return Followups(note=SUPERSEDED.format(subject=subject))
        diff = replace_group_members(session, source.id, event.group, event.members)
        record_membership(audit_log(ctx.settings), Actor.named(f"source:{source.name}"), Surface.SYNC, diff,
                          event_id=event.event_id, detail=f"event occurred {event.occurred_at.isoformat()}")
    return Followups()


def _change_project(ctx: WorkerContext, source: Source, event: ProjectChanged) -> Followups:
    subject = f"project:{event.project}"
    with ctx.sessions() as session, session.begin():
        project = get_or_create_project(session, event.project)
        if event.title:
            project.title = event.title
        if not advance_watermark(session, source.id, subject, event):
            return Followups(note=SUPERSEDED.format(subject=subject))
        changed = _replace_project_grants(session, project.id, event, origin=source.name)
        if not changed:
            return Followups(note="project grants unchanged")
        record_access_change(ctx, source, event, f"grants of project {event.project}", changed)
        return Followups(access=_indexed_versions_of_project(session, project.id))


def _replace_project_grants(session: Session, project_id: str, event: ProjectChanged, origin: str) -> list[str]:
    """The project grants this source made become exactly `event.grants`; local grants stay. What changed."""
    try:
        wanted = {(stored_principal(e.principal), e.effect) for e in event.grants}
    except InvalidPrincipal as exc:
        raise PermanentEventError(str(exc)) from exc
    mirrored = session.scalars(
        select(Grant).where(Grant.scope == GrantScope.PROJECT, Grant.project_id == project_id, Grant.origin == origin)
    )
    current = {(g.principal, g.effect) for g in mirrored}
    target = GrantTarget.project(project_id)
    for principal, effect in sorted(current - wanted):
        revoke(session, target, principal, effect=effect, origin=origin)
    for principal, effect in sorted(wanted - current):
        grant(session, target, principal, effect=effect, origin=origin)
    return _changes(current, wanted)


def _indexed_versions_of_project(session: Session, project_id: str) -> list[str]:
    return list(
        session.scalars(
            select(DocumentVersion.id)
            .join(Document, Document.id == DocumentVersion.document_id)
            .where(Document.project_id == project_id, DocumentVersion.processing_state == ProcessingState.INDEXED)
            .order_by(DocumentVersion.id)
        )
    )


def _upsert_relation(ctx: WorkerContext, source: Source, event: RelationUpserted) -> Followups:
    with ctx.sessions() as session, session.begin():
        source = session.get(Source, source.id)
        from_document = _document_of(session, source, event.from_object)
        to_document = _document_of(session, source, event.to_object)
        if from_document == to_document:
            raise PermanentEventError(f"relation {event.kind} from a document to itself ({event.from_object})")
        relation = session.scalar(
            select(Relation).where(
                Relation.kind == event.relation_kind,
                Relation.from_document_id == from_document,
                Relation.to_document_id == to_document,
                Relation.from_version_id.is_(None),
                Relation.to_version_id.is_(None),
            )
        )
        if relation is None:
            relation = Relation(kind=event.relation_kind, from_document_id=from_document, to_document_id=to_document)
            session.add(relation)
        relation.origin = f"dms:{source.name}"
        relation.attributes = dict(event.attributes)
    return Followups()


def _document_of(session: Session, source: Source, external_id: str) -> str:
    """The document an object shows (its newest observation), or ObjectNotYetKnown."""
    document_id = session.scalar(
        select(DocumentVersion.document_id)
        .join(SourceObservation, SourceObservation.version_id == DocumentVersion.id)
        .join(SourceObject, SourceObject.id == SourceObservation.source_object_id)
        .where(SourceObject.source_id == source.id, SourceObject.external_id == external_id)
        .order_by(SourceObservation.observed_at.desc())
        .limit(1)
    )
    if document_id is None:
        raise ObjectNotYetKnown(f"no document for object {external_id!r} of source {source.name!r} yet")
    return document_id


def _record_decision(ctx: WorkerContext, source: Source, event: DecisionRecorded) -> Followups:
    external_id = f"{source.name}:{event.decision_id or event.event_id}"
    with ctx.sessions() as session, session.begin():
        source = session.get(Source, source.id)
        if not advance_watermark(session, source.id, f"decision:{external_id}", event):
            return Followups(note=SUPERSEDED.format(subject=f"decision {external_id}"))
        project = get_or_create_project(session, event.project)
        matter = get_or_create_matter(session, project, event.matter)
        record = session.scalar(select(DecisionRecord).where(DecisionRecord.external_id == external_id))
        if record is None:
            record = DecisionRecord(external_id=external_id, project_id=project.id, locus=event.locus,
                                    change_summary=event.change_summary, rationale=event.rationale)
            session.add(record)
        record.project_id, record.matter_id = project.id, matter.id if matter else None
        record.locus, record.change_summary, record.rationale = event.locus, event.change_summary, event.rationale
        record.decided_by, record.decided_at = event.decided_by, event.decided_at or event.occurred_at
        record.evidence = [_evidence(session, source, e.object_id, e.version_label) for e in event.evidence]
    return Followups()


def _evidence(session: Session, source: Source, external_id: str, version_label: str | None) -> DecisionEvidence:
    """Evidence names the object (its visibility decides the decision's); a version label pins a version."""
    obj = known_object(session, source, external_id)
    version_id = None
    if version_label is not None:
        version_id = session.scalar(
            select(DocumentVersion.id)
            .join(SourceObservation, SourceObservation.version_id == DocumentVersion.id)
            .where(SourceObservation.source_object_id == obj.id, DocumentVersion.version_label == version_label)
            .limit(1)
        )
    return DecisionEvidence(source_object_id=obj.id, version_id=version_id)


def _apply_listing(ctx: WorkerContext, source: Source, event: SourceListing) -> Followups:
    """Prune: objects the complete listing lacks are deleted, unless upserted after the listing was taken."""
    listed = set(event.object_ids)
    retired: list[str] = []
    pruned = 0
    with ctx.sessions() as session, session.begin():
        source = session.get(Source, source.id)
        candidates = session.scalars(
            select(SourceObject).where(SourceObject.source_id == source.id, SourceObject.deleted_at.is_(None))
        )
        for obj in [o for o in candidates if o.external_id not in listed]:
            if advance_watermark(session, source.id, f"content:{obj.external_id}", event):
                retired.extend(retire_object(session, obj))
                pruned += 1
    return Followups(access=sorted(set(retired)), note=f"pruned {pruned} object(s)")


_HANDLERS: dict[str, Callable[[WorkerContext, Source, DmsEvent], Followups]] = {
    "document.upserted": _upsert_document,
    "document.deleted": _delete_document,
    "acl.changed": _change_acl,
    "group.changed": _change_group,
    "project.changed": _change_project,
    "relation.upserted": _upsert_relation,
    "decision.recorded": _record_decision,
    "source.listing": _apply_listing,
}


def batched(ids: Iterable[str], size: int = 500) -> list[list[str]]:
    """Access reindex tasks of bounded size: a project change can touch thousands of versions."""
    ordered = sorted(set(ids))
    return [ordered[start : start + size] for start in range(0, len(ordered), size)]

