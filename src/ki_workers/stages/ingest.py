"""Ingest: from source bytes to a DocumentVersion with its observation.

Identical bytes are the same version: no new rows, no conversion, no
re-embedding. A file that cannot be converted still gets a version row in
state `failed` with the reason, so the operator sees it and the batch goes on.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from ki_core.models import (
    Document,
    DocumentVersion,
    Matter,
    ObservationState,
    ProcessingState,
    Project,
    Relation,
    RelationKind,
    Source,
    SourceKind,
    SourceObject,
    SourceObservation,
    VersionStatus,
)
from ki_core.models.base import utcnow
from ki_workers.sources.local_fs import ManifestEntry, document_key

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


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def get_or_create_project(session: Session, name: str) -> Project:
    project = session.scalar(select(Project).where(Project.name == name))
    if project is None:
        project = Project(name=name, title=name)
        session.add(project)
        session.flush()
    return project


def get_or_create_matter(session: Session, project: Project, name: str | None) -> Matter | None:
    if not name:
        return None
    matter = session.scalar(select(Matter).where(Matter.project_id == project.id, Matter.name == name))
    if matter is None:
        matter = Matter(project_id=project.id, name=name, title=name)
        session.add(matter)
        session.flush()
    return matter


def get_or_create_source(session: Session, name: str, kind: SourceKind, config: dict | None = None) -> Source:
    source = session.scalar(select(Source).where(Source.name == name))
    if source is None:
        source = Source(name=name, kind=kind, config=config or {})
        session.add(source)
        session.flush()
    elif source.kind != kind:
        raise ValueError(f"source {name!r} exists with kind {source.kind}, not {kind}")
    return source


def get_or_create_object(session: Session, source: Source, external_id: str) -> tuple[SourceObject, bool]:
    """The object, seen now; and whether it was created (then it has no observations yet)."""
    obj = session.scalar(
        select(SourceObject).where(SourceObject.source_id == source.id, SourceObject.external_id == external_id)
    )
    if obj is None:
        obj = SourceObject(source_id=source.id, external_id=external_id, title=external_id, last_seen_at=utcnow())
        session.add(obj)
        session.flush()
        return obj, True
    obj.last_seen_at = utcnow()
    obj.deleted_at = None
    return obj, False


def get_or_create_document(session: Session, project: Project, key: str) -> tuple[Document, bool]:
    """The document; and whether it was created (then it has no versions yet)."""
    document = session.scalar(select(Document).where(Document.project_id == project.id, Document.key == key))
    if document is None:
        document = Document(project_id=project.id, key=key, identifiers=[])
        session.add(document)
        session.flush()
        return document, True
    return document, False


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
) -> IngestResult:
    """Create or reuse the version for `data` as seen at `external_id`; record the observation.

    `filename` and `media_type` tell the converter the format when `external_id`
    has no suffix (a DMS object id); by default the external id is the file name.
    """
    from ki_workers.stages.convert import ConversionError, convert

    # A first sighting (new object, new document: the bulk of an initial load) skips the
    # reads that can only come back empty.
    obj, new_object = get_or_create_object(session, source, external_id)
    document, new_document = get_or_create_document(session, project, document_key(entry))
    matter = get_or_create_matter(session, project, entry.matter or matter_name)
    if matter is not None and document.matter_id is None:
        document.matter_id = matter.id
    if entry.title and not document.title:
        document.title = entry.title
    digest = content_hash(data)
    existing = None if new_document else session.scalar(
        select(DocumentVersion).where(DocumentVersion.document_id == document.id, DocumentVersion.content_hash == digest)
    )
    if existing is not None:
        changed, retired = observe(session, existing, obj, new_object=new_object)
        outcome = Outcome.FAILED if existing.processing_state == ProcessingState.FAILED else Outcome.UNCHANGED
        if changed and outcome is Outcome.UNCHANGED:
            outcome = Outcome.NEW
        return IngestResult(existing.id, document.id, outcome, existing.last_error, retired)
    version = _new_version(session, document, digest, entry, first=new_document)
    try:
        converted = convert(data, filename=filename or external_id, media_type=media_type)
    except ConversionError as exc:
        version.processing_state = ProcessingState.FAILED
        version.last_error = f"conversion failed: {exc}"
        _, retired = observe(session, version, obj, new_object=new_object)
        return IngestResult(version.id, document.id, Outcome.FAILED, version.last_error, retired)
    version.text = converted.text
    version.media_type = converted.media_type
    version.language = entry.language or converted.language
    if not document.title:
        document.title = converted.title
    version.processing_state = ProcessingState.CONVERTED
    _, retired = observe(session, version, obj, new_object=new_object)
    refresh_latest_final(session, document)
    return IngestResult(version.id, document.id, Outcome.NEW, None, retired)


def _new_version(
    session: Session, document: Document, digest: str, entry: ManifestEntry, *, first: bool = False
) -> DocumentVersion:
    """The next version in the document's chain; `first`: the document has none yet."""
    previous = None if first else session.scalar(
        select(DocumentVersion).where(DocumentVersion.document_id == document.id).order_by(DocumentVersion.seq.desc()).limit(1)
    )
    seq = previous.seq + 1 if previous is not None else 1
    version = DocumentVersion(
        document_id=document.id,
        seq=seq,
        version_label=entry.version,
        status=entry.status,
        previous_version_id=previous.id if previous else None,
        doc_date=entry.doc_date,
        content_hash=digest,
        processing_state=ProcessingState.PENDING,
    )
    session.add(version)
    session.flush()
    if previous is not None:
        session.add(
            Relation(
                kind=RelationKind.SUPERSEDES,
                from_document_id=document.id,
                to_document_id=document.id,
                from_version_id=version.id,
                to_version_id=previous.id,
                origin="version_chain",
            )
        )
    return version


def observe(
    session: Session, version: DocumentVersion, obj: SourceObject, *, new_object: bool = False
) -> tuple[bool, tuple[str, ...]]:
    """Make `version` the active observation of `obj`; retire what the object showed before.

    Returns whether anything changed and the versions that lost their observation.
    Observations decide visibility, so any change bumps the access generation.
    `new_object`: created in this transaction, so it has no observations to read.
    """
    changed = False
    retired: list[str] = []
    current = None
    # One read: the object's active observations and its (possibly retired) one of `version`.
    stored = () if new_object else session.scalars(
        select(SourceObservation).where(
            SourceObservation.source_object_id == obj.id,
            or_(SourceObservation.state == ObservationState.ACTIVE, SourceObservation.version_id == version.id),
        )
    )
    for observation in stored:
        if observation.version_id == version.id:
            current = observation
            continue
        observation.state = ObservationState.DELETED
        observation.deleted_at = utcnow()
        retired.append(observation.version_id)
        changed = True
    if current is None:
        session.add(SourceObservation(version_id=version.id, source_object_id=obj.id))
        changed = True
    elif current.state != ObservationState.ACTIVE:
        current.state = ObservationState.ACTIVE
        current.deleted_at = None
        changed = True
    if changed:
        # Rendered into the version's own pending UPDATE: no statement of its own.
        version.access_version = DocumentVersion.access_version + 1
        retire_access_versions(session, retired)
    session.flush()
    return changed, tuple(retired)


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


def refresh_latest_final(session: Session, document: Document) -> str | None:
    """The newest final or executed version that converted; collapse uses it as tiebreak."""
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
