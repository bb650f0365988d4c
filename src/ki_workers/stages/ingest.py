"""Ingest: from source bytes to a DocumentVersion with its observation.

Identical bytes are the same version: no new rows, no conversion, no
re-embedding. A file that cannot be converted still gets a version row in
state `failed` with the reason, so the operator sees it and the batch goes on.
A mail's attachments go the same way, each a document of its own that is
`annex_of` the mail and observed where the mail is (stages/attachments.py).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from ki_core.models import (
    Document,
    DocumentVersion,
    ObservationState,
    ProcessingState,
    Project,
    Relation,
    RelationKind,
    Source,
    SourceObject,
    SourceObservation,
    VersionStatus,
)
from ki_core.models.base import new_id, utcnow
from ki_workers.sources.local_fs import ManifestEntry, document_key
from ki_workers.stages.record_metadata import declare_doc_type
from ki_workers.stages.rows import BatchRows, get_or_create_document, get_or_create_matter, get_or_create_object
from ki_workers.stages.attachments import (
    ATTACHMENT_ORIGIN,
    MAX_NESTING,
    attachment_key,
    inherit_mail_denies,
    known_attachments,
)

if TYPE_CHECKING:
    from ki_workers.stages.convert import Attachment, ConvertedText

FINAL_STATUSES = (VersionStatus.FINAL, VersionStatus.EXECUTED)


class Outcome(enum.StrEnum):
    NEW = "new"
    UNCHANGED = "unchanged"
    FAILED = "failed"


@dataclass(frozen=True)
class IngestResult:
    version_id: str
    document_id: str
    outcome: Outcome
    reason: str | None = None
    # Versions this object showed before: they lost an observation, so their access changed.
    retired_version_ids: tuple[str, ...] = ()
    # A mail's attachments (nested mails' too), each with its own version and outcome.
    attachments: tuple[IngestResult, ...] = ()


@dataclass(frozen=True)
class StoredVersion:
    """The version holding some bytes of a document: found by content hash, or new."""

    version: DocumentVersion
    outcome: Outcome
    # Set only when the bytes were converted just now (a new version that did not fail).
    converted: ConvertedText | None = None
    # Written in this transaction (converted or failed now): its row already counts its first observation.
    created: bool = False


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ingest_bytes(
    session: Session,
    *,
    source: Source,
    project: Project,
    external_id: str,
    data: bytes,
    entry: ManifestEntry,
    matter_name: str | None = None,
    filename: str | None = None,
    media_type: str | None = None,
    batch: BatchRows | None = None,
) -> IngestResult:
    """Create or reuse the version for `data` as seen at `external_id`; record the observation.

    `filename` and `media_type` tell the converter the format when `external_id`
    has no suffix (a DMS object id); by default the external id is the file name.
    A mail's attachments become versions of their own documents, observed at the same object.
    `batch`: the object and document rows of the transaction's files, read before them.
    Nothing is flushed here: a batch of files goes out in the flush before the commit.
    """
    # A first sighting (new object, new document: the bulk of an initial load) skips the
    # reads that can only come back empty.
    obj, new_object = get_or_create_object(session, source, external_id, batch)
    document, new_document = get_or_create_document(session, project, document_key(entry), batch)
    matter = get_or_create_matter(session, project, entry.matter or matter_name)
    if matter is not None and document.matter_id is None:
        document.matter_id = matter.id
    if entry.title and not document.title:
        document.title = entry.title
    if entry.doc_type:
        declare_doc_type(session, document, entry.doc_type)
    name = filename or external_id
    stored = store_version(session, document, data, entry, filename=name, media_type=media_type, first=new_document)
    annexes = store_attachments(session, project, document, stored, mail_name=name)
    touched, retired = observe(session, [s.version for s in (stored, *annexes)], obj, new_object=new_object,
                               created={s.version.id for s in (stored, *annexes) if s.created})
    if stored.converted is not None:
        refresh_latest_final(session, document, only=stored.version if new_document else None)
    stale = inherit_mail_denies(session, document.id, [s.version.document_id for s in annexes])
    if stale:
        retire_access_versions(session, [s.version.id for s in annexes if s.version.document_id in stale])
    return IngestResult(
        *_reported(stored, bool(touched or retired)), retired_version_ids=retired,
        attachments=tuple(IngestResult(*_reported(s, s.version.id in touched)) for s in annexes),
    )


def _reported(stored: StoredVersion, observed_anew: bool) -> tuple[str, str, Outcome, str | None]:
    """A reused version that changed what the object shows is news to the next stages."""
    outcome = Outcome.NEW if stored.outcome is Outcome.UNCHANGED and observed_anew else stored.outcome
    return stored.version.id, stored.version.document_id, outcome, stored.version.last_error


def store_version(
    session: Session,
    document: Document,
    data: bytes,
    entry: ManifestEntry,
    *,
    filename: str,
    media_type: str | None,
    first: bool,
    context: str | None = None,
    refused: str | None = None,
) -> StoredVersion:
    """The version of `document` with these bytes; a new one is converted (or failed) now, and its
    title fills the document's if that has none.

    `first`: the document has no versions yet. `context` prefixes a failure
    reason (which attachment of which mail); `refused` fails a new version
    with that reason without converting.
    """
    from ki_workers.stages.convert import ConversionError, convert

    digest = content_hash(data)
    existing = None if first else session.scalar(
        select(DocumentVersion).where(DocumentVersion.document_id == document.id, DocumentVersion.content_hash == digest)
    )
    if existing is not None:
        return _found(existing)
    try:
        if refused:
            raise ConversionError(refused)
        converted = convert(data, filename=filename, media_type=media_type)
    except ConversionError as exc:
        reason = f"conversion failed: {context}: {exc}" if context else f"conversion failed: {exc}"
        version = _new_version(session, document, digest, entry, first=first,
                               processing_state=ProcessingState.FAILED, last_error=reason)
        return StoredVersion(version, Outcome.FAILED, created=True)
    # Converted before the rows are written, so their INSERTs carry the text and title (no UPDATEs).
    document.title = document.title or converted.title
    version = _new_version(
        session, document, digest, entry, first=first, text=converted.text, media_type=converted.media_type,
        page_starts=list(converted.page_starts) or None,
        language=entry.language or converted.language, processing_state=ProcessingState.CONVERTED,
    )
    return StoredVersion(version, Outcome.NEW, converted, created=True)


def _found(version: DocumentVersion) -> StoredVersion:
    failed = version.processing_state == ProcessingState.FAILED
    return StoredVersion(version, Outcome.FAILED if failed else Outcome.UNCHANGED)


def store_attachments(
    session: Session, project: Project, document: Document, mail: StoredVersion, *, mail_name: str, depth: int = 1
) -> list[StoredVersion]:
    """The versions of the files `mail` carries, nested mails' files after their mail, in mail order.

    A mail converted now gives its attachments from its bytes; a mail stored
    before gives those it gave then (no re-parse: identical bytes, identical files).
    """
    if mail.converted is None:
        return [_found(version) for version in known_attachments(session, mail.version)]
    stored: list[StoredVersion] = []
    for index, attachment in enumerate(mail.converted.attachments, start=1):
        child_document, child = _store_attachment(session, project, document, mail, index, attachment, mail_name, depth)
        stored.append(child)
        stored.extend(
            store_attachments(session, project, child_document, child,
                              mail_name=f"{mail_name}#{attachment.filename}", depth=depth + 1)
        )
    return stored


def _store_attachment(
    session: Session, project: Project, mail_document: Document, mail: StoredVersion, index: int,
    attachment: Attachment, mail_name: str, depth: int,
) -> tuple[Document, StoredVersion]:
    key = attachment_key(mail_document.key, index, attachment.filename)
    document, new_document = get_or_create_document(session, project, key)
    document.matter_id = document.matter_id or mail_document.matter_id
    too_deep = f"nested in more than {MAX_NESTING} mails" if depth > MAX_NESTING else None
    stored = store_version(
        session, document, attachment.data, ManifestEntry(path=key, document=key, doc_date=mail.version.doc_date),
        filename=attachment.filename, media_type=attachment.media_type, first=new_document,
        context=f"attachment {attachment.filename!r} of mail {mail_name!r}", refused=attachment.unavailable or too_deep,
    )
    document.title = document.title or (stored.converted.title if stored.converted else None) or attachment.filename
    # The edge traverse shows, and how a re-ingest of the unchanged mail finds its attachments.
    session.add(version_relation(RelationKind.ANNEX_OF, stored.version, mail.version, origin=ATTACHMENT_ORIGIN,
                                 index=index, filename=attachment.filename))
    return document, stored


def _new_version(
    session: Session, document: Document, digest: str, entry: ManifestEntry, *, first: bool = False,
    processing_state: ProcessingState, **content: str | list[int] | None,
) -> DocumentVersion:
    """The next version in the document's chain, written now; `first`: the document has none yet.

    `content`: text, media type, language or last error, part of the row's INSERT. Not flushed:
    the relationships of observations and edges order their INSERTs after it, so a batch of files
    goes out in one flush.
    """
    previous = None if first else session.scalar(
        select(DocumentVersion).where(DocumentVersion.document_id == document.id).order_by(DocumentVersion.seq.desc()).limit(1)
    )
    seq = previous.seq + 1 if previous is not None else 1
    version = DocumentVersion(
        id=new_id(),
        document_id=document.id,
        **content,
        seq=seq,
        version_label=entry.version,
        status=entry.status,
        previous_version_id=previous.id if previous else None,
        doc_date=entry.doc_date,
        content_hash=digest,
        processing_state=processing_state,
        # Its first observation follows in this transaction (observe, `created`): that access change.
        access_version=1,
    )
    session.add(version)
    if previous is not None:
        session.add(version_relation(RelationKind.SUPERSEDES, version, previous, origin="version_chain"))
    return version


def version_relation(kind: RelationKind, source: DocumentVersion, target: DocumentVersion, *, origin: str,
                     **attributes: object) -> Relation:
    """An edge between two versions (and so their documents)."""
    return Relation(
        kind=kind, from_document_id=source.document_id, to_document_id=target.document_id,
        from_version_id=source.id, to_version_id=target.id, origin=origin, attributes=attributes,
    )


def observe(
    session: Session, versions: list[DocumentVersion], obj: SourceObject, *, new_object: bool = False,
    created: Collection[str] = (),
) -> tuple[set[str], tuple[str, ...]]:
    """Make `versions` (a file, or a mail and its attachments) what `obj` shows; retire what it showed before.

    Returns the versions whose observation was added or reactivated, and the
    versions that lost theirs. Observations decide visibility, so any change
    bumps the access generation.
    `new_object`: created in this transaction, so it has no observations to read. `created`: versions
    written in this transaction, whose rows were inserted with this first access change counted.
    """
    wanted = {version.id: version for version in versions}
    retired: list[str] = []
    current: dict[str, SourceObservation] = {}
    # One read: the object's active observations and its (possibly retired) ones of `versions`.
    stored = () if new_object else session.scalars(
        select(SourceObservation).where(
            SourceObservation.source_object_id == obj.id,
            or_(SourceObservation.state == ObservationState.ACTIVE, SourceObservation.version_id.in_(list(wanted))),
        )
    )
    for observation in stored:
        if observation.version_id in wanted:
            current[observation.version_id] = observation
            continue
        observation.state = ObservationState.DELETED
        observation.deleted_at = utcnow()
        retired.append(observation.version_id)
    touched = set()
    for version_id in wanted:
        observation = current.get(version_id)
        if observation is None:
            session.add(SourceObservation(version_id=version_id, source_object_id=obj.id))
        elif observation.state != ObservationState.ACTIVE:
            observation.state = ObservationState.ACTIVE
            observation.deleted_at = None
        else:
            continue
        touched.add(version_id)
    for version in (v for v in versions if v.id in touched and v.id not in created):
        # Rendered into the version's own pending UPDATE: no statement of its own.
        version.access_version = DocumentVersion.access_version + 1
    if touched or retired:
        retire_access_versions(session, retired)
    return touched, tuple(retired)


def retire_access_versions(session: Session, version_ids: list[str]) -> None:
    """An observation change is an access change: stale projection, new generation."""
    from ki_core.grants import bump_access_generation

    if version_ids:
        session.execute(
            update(DocumentVersion)
            .where(DocumentVersion.id.in_(version_ids))
            .values(access_version=DocumentVersion.access_version + 1)
            .execution_options(synchronize_session="fetch")
        )
    bump_access_generation(session)


def refresh_latest_final(session: Session, document: Document, *, only: DocumentVersion | None = None) -> str | None:
    """The newest final or executed version that converted; collapse uses it as tiebreak.

    `only`: the document's one version, converted now (a first sighting), so there is nothing to read.
    """
    if only is not None:
        # Written by the transaction's next flush, after both rows (post_update): nothing reads it before.
        document.latest_final_version = only if only.status in FINAL_STATUSES else None
        return only.id if only.status in FINAL_STATUSES else None
    latest = session.scalar(
        select(DocumentVersion.id)
        .where(
            DocumentVersion.document_id == document.id,
            DocumentVersion.status.in_(FINAL_STATUSES),
            DocumentVersion.processing_state != ProcessingState.FAILED,
        )
        .order_by(DocumentVersion.seq.desc())
        .limit(1)
    )
    document.latest_final_version_id = latest
    session.flush()
    return latest


def retire_object(session: Session, obj: SourceObject) -> list[str]:
    """The object is gone from the source: its observations become history; returns their versions."""
    obj.deleted_at = obj.deleted_at or utcnow()
    retired = []
    for observation in session.scalars(
        select(SourceObservation).where(
            SourceObservation.source_object_id == obj.id, SourceObservation.state == ObservationState.ACTIVE
        )
    ):
        observation.state = ObservationState.DELETED
        observation.deleted_at = utcnow()
        retired.append(observation.version_id)
    if retired:
        retire_access_versions(session, retired)
    return retired
