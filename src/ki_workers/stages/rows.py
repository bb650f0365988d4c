"""The rows every stage finds or creates: project, matter, source, object, document, and a
version with its document.

Shared by ingest, metadata, chunk/embed and the DMS source, so a stage depends on these
helpers and not on another stage.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ki_core.acl import in_set
from ki_core.models import Document, DocumentVersion, Matter, Project, Source, SourceKind, SourceObject
from ki_core.models.base import new_id, utcnow


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
        # Written with the version's flush that follows (observe makes sure, before its observations).
        obj = SourceObject(id=new_id(), source_id=source.id, external_id=external_id, title=external_id,
                           last_seen_at=utcnow())
        session.add(obj)
        return obj, True
    obj.last_seen_at = utcnow()
    obj.deleted_at = None
    return obj, False


def get_or_create_document(session: Session, project: Project, key: str) -> tuple[Document, bool]:
    """The document; and whether it was created (then it has no versions yet)."""
    document = session.scalar(select(Document).where(Document.project_id == project.id, Document.key == key))
    if document is None:
        # Not flushed here: with its id set, its INSERT goes out with its first version's and
        # carries the title and matter that ingest sets next (no UPDATE of a row just written).
        document = Document(id=new_id(), project_id=project.id, key=key, identifiers=[])
        session.add(document)
        return document, True
    return document, False


def version_and_document(session: Session, version_id: str) -> tuple[DocumentVersion | None, Document | None]:
    """A version and its document in one statement: each stage runs in a session of its own, where
    neither is in the identity map yet."""
    return versions_and_documents(session, [version_id]).get(version_id, (None, None))


def versions_and_documents(session: Session, version_ids: list[str]) -> dict[str, tuple[DocumentVersion, Document]]:
    """The versions that exist among `version_ids`, each with its document, read in one statement."""
    rows = session.execute(
        select(DocumentVersion, Document)
        .join(Document, Document.id == DocumentVersion.document_id)
        .where(in_set(DocumentVersion.id, list(dict.fromkeys(version_ids))))
    )
    return {version.id: (version, document) for version, document in rows}
