"""Reading what a search found: a visible version's text, page by page or section by section, and its file.

Both reads start with graph.get_document, the one access check of
GET /v1/documents/{id}: a document the caller may not see raises the same
DocumentNotFound as one that does not exist, and a version is served only when
it is one of the visible versions that check returns. Nothing is cached across
requests but the sections of a version's text (which never changes: a changed
file is a new version), so a revocation shows from the very next request.

The text is the converted text the store keeps per version (the one the index
was built from), never fetched again from the DMS. The original is read from
the local folder the version was observed in, and served only while its bytes
still hash to the version's content_hash.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import mimetypes
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ki_core.acl import Viewer
from ki_core.models import DocumentVersion, Source, SourceKind
from ki_core.text_structure import Section, sections_of
from ki_query import graph
from ki_query.citations import decision_citations, german_citation, is_decision
from ki_query.types import DocumentNotFound, DocumentView, RecordId, VersionView

# The most text one answer carries: a long contract in one piece, never a 50 MB text at once.
MAX_TEXT_CHARS = 100_000
# What a caller gets without asking for a limit: a few pages of a brief, and the whole of most letters.
DEFAULT_TEXT_CHARS = 20_000
# Versions whose sections are kept in memory (a version's text never changes).
SECTIONS_CACHED = 512


class VersionNotFound(DocumentNotFound):
    """A version that is not one of the document's visible versions (of another document, walled,
    or no version at all): one answer for all three."""

    def __init__(self, document_id: str, version_id: str) -> None:
        super().__init__(document_id)
        self.args = (f"no version {version_id!r} of document {document_id!r}",)


class TextRangeRefused(ValueError):
    """A limit above MAX_TEXT_CHARS, or a section the version's text does not have (HTTP 400)."""


class OriginalUnavailable(RuntimeError):
    """The store cannot hand out the version's file now: changed or gone from its folder, or kept
    only by a DMS (HTTP 409, naming the file)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextRequest(_Model):
    """Which part of which version: a range (offset, limit) or a section by its id ("§ 6", "page:3");
    with a section the range counts from the section's start and stops at its end."""

    version: RecordId | None = None
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=DEFAULT_TEXT_CHARS, gt=0)
    section: str | None = Field(default=None, min_length=1, max_length=200)


class TextSection(_Model):
    id: str
    kind: str
    title: str
    start: int
    end: int


class DocumentText(_Model):
    """A part of a version's text with where it is: offset and total in characters, and the sections."""

    document_id: str
    version_id: str
    offset: int
    total_chars: int
    text: str
    sections: tuple[TextSection, ...]
    # Where the next part starts; None at the end (or the section's end).
    next_offset: int | None = None
    section: str | None = None
    # The German citation of this version ("Titel, Version v3 (unterzeichnet), 03.05.2023, Ablage …").
    citation: str


@dataclass(frozen=True)
class OriginalFile:
    """The bytes of a version's file, as its source holds them, checked against the content hash."""

    document_id: str
    version_id: str
    filename: str
    media_type: str
    data: bytes


# ------------------------------------------------------------------ the access check


def visible_version(session: Session, viewer: Viewer, document_id: str, version_id: str | None) -> tuple[DocumentView, VersionView]:
    """The document as GET /v1/documents/{id} shows it and the version asked for (default: the one a
    citation names, DocumentView.cited_version), or DocumentNotFound / VersionNotFound."""
    view = graph.get_document(session, viewer, document_id)
    if version_id is None:
        return view, view.cited_version
    for item in view.versions:
        if item.version.id == version_id:
            return view, item
    raise VersionNotFound(document_id, version_id)


# ------------------------------------------------------------------ text


def read_text(session: Session, viewer: Viewer, document_id: str, request: TextRequest) -> DocumentText:
    """The requested part of a visible version's converted text; a range past the end is empty text."""
    if request.limit > MAX_TEXT_CHARS:
        raise TextRangeRefused(
            f"limit {request.limit:,} is above the cap of {MAX_TEXT_CHARS:,} characters per answer; "
            "read on with offset (next_offset) instead"
        )
    view, item = visible_version(session, viewer, document_id, request.version)
    version_id = item.version.id
    sections = version_sections(session, version_id)
    total = _total_chars(session, version_id)
    start, end = _bounds(sections, request, total, version_id)
    stop = min(end, start + request.limit)
    text = _slice(session, version_id, start, stop - start) if stop > start else ""
    decision = decision_citations(session, [version_id]).get(version_id) if is_decision(view.document.doc_type) else None
    return DocumentText(
        document_id=document_id, version_id=version_id, offset=start, total_chars=total, text=text,
        sections=tuple(TextSection(**vars(s)) for s in sections), next_offset=stop if stop < end else None,
        section=request.section, citation=german_citation(view.document, item.version, item.source_objects, decision),
    )


def _bounds(sections: list[Section], request: TextRequest, total: int, version_id: str) -> tuple[int, int]:
    """[start, end) in the whole text: the range, or the range within the named section."""
    if request.section is None:
        return min(request.offset, total), total
    chosen = next((s for s in sections if s.id == request.section), None)
    if chosen is None:
        known = ", ".join(s.id for s in sections[:30]) or "none"
        raise TextRangeRefused(f"version {version_id} has no section {request.section!r} (its sections: {known})")
    return min(chosen.start + request.offset, chosen.end), chosen.end


def _total_chars(session: Session, version_id: str) -> int:
    return session.scalar(select(func.coalesce(func.length(DocumentVersion.text), 0)).where(DocumentVersion.id == version_id)) or 0


def _slice(session: Session, version_id: str, start: int, length: int) -> str:
    """Only the asked-for characters leave the database (substr counts characters on both)."""
    statement = select(func.substr(DocumentVersion.text, start + 1, length)).where(DocumentVersion.id == version_id)
    return session.scalar(statement) or ""


_sections: OrderedDict[str, list[Section]] = OrderedDict()


def version_sections(session: Session, version_id: str) -> list[Section]:
    """The version's sections (headings, a decision's parts, PDF pages), computed once per process."""
    cached = _sections.get(version_id)
    if cached is None:
        text, page_starts = session.execute(
            select(DocumentVersion.text, DocumentVersion.page_starts).where(DocumentVersion.id == version_id)
        ).one()
        cached = sections_of(text or "", page_starts)
        _sections[version_id] = cached
        while len(_sections) > SECTIONS_CACHED:
            _sections.popitem(last=False)
    return cached


# ------------------------------------------------------------------ original


def read_original(session: Session, viewer: Viewer, document_id: str, version_id: str | None) -> OriginalFile:
    """The file of a visible version from a local folder it was observed in, when its bytes still
    hash to the version's content_hash; else OriginalUnavailable naming the file and why."""
    _view, item = visible_version(session, viewer, document_id, version_id)
    content_hash, stored_type = session.execute(
        select(DocumentVersion.content_hash, DocumentVersion.media_type).where(DocumentVersion.id == item.version.id)
    ).one()
    roots = _folder_roots(session)
    problems = []
    for source in item.source_objects:
        if source.source_kind != SourceKind.LOCAL_FS.value or source.source not in roots:
            problems.append(f"{source.source}:{source.external_id} is kept by its DMS; open it there"
                            + (f" ({source.uri})" if source.uri else ""))
            continue
        path = roots[source.source] / source.external_id
        try:
            data = path.read_bytes()
        except OSError as exc:
            problems.append(f"{path} cannot be read ({exc.strerror or type(exc).__name__})")
            continue
        found = _matching_bytes(data, content_hash, path.name)
        if found is None:
            problems.append(f"{path} has changed since it was indexed (its SHA-256 is no longer the version's)")
            continue
        filename, content = found
        return OriginalFile(document_id, item.version.id, filename, _media_type(stored_type, filename), content)
    raise OriginalUnavailable("; ".join(problems) or f"version {item.version.id} has no file the store can read")


def _folder_roots(session: Session) -> dict[str, Path]:
    rows = session.execute(select(Source.name, Source.config).where(Source.kind == SourceKind.LOCAL_FS))
    return {name: Path(config["root"]) for name, config in rows if (config or {}).get("root")}


def _matching_bytes(data: bytes, content_hash: str, filename: str) -> tuple[str, bytes] | None:
    """The file itself, or, for an attachment observed at its mail, the part of the mail with the
    version's bytes (an attachment's version is the attachment's content, not the mail's)."""
    if hashlib.sha256(data).hexdigest() == content_hash:
        return filename, data
    if PurePosixPath(filename).suffix.lower() != ".eml":
        return None
    message = email.message_from_bytes(data, policy=email.policy.default)
    for part in message.walk():
        if part.is_multipart():
            continue
        payload = part.get_payload(decode=True) or b""
        if hashlib.sha256(payload).hexdigest() == content_hash:
            return part.get_filename() or filename, payload
    return None


def _media_type(stored: str | None, filename: str) -> str:
    guessed = mimetypes.guess_type(filename)[0]
    return guessed or stored or "application/octet-stream"


def content_disposition(filename: str) -> str:
    """`attachment` with an ASCII fallback name (RFC 6266) and the UTF-8 one (RFC 5987): "Kündigung.pdf"
    arrives as such in every browser, and as "Kundigung.pdf" in a client that reads only `filename`."""
    fallback = unicodedata.normalize("NFKD", filename).encode("ascii", "ignore").decode("ascii")
    fallback = "".join(c if c.isprintable() and c not in '"\\' else "_" for c in fallback).strip() or "download"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"
