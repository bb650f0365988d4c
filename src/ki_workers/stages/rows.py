"""The rows every stage finds or creates: project, matter, source, object, document, and a
version with its document.

Shared by ingest, metadata, chunk/embed and the DMS source, so a stage depends on these
helpers and not on another stage.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

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


@dataclass
class BatchRows:
    """The objects and documents a batch of files names, read in two statements before the batch.

    A name the read did not find is new: its row is created without a read of its own (on an
    initial load, two SELECTs per file that could only come back empty). Rows created during the
    batch are added, so a second file of the same document finds the first one's.
    """

    objects: dict[str, SourceObject | None]
    documents: dict[str, Document | None]


def read_batch_rows(
    session: Session, source: Source, project: Project, external_ids: Collection[str], keys: Collection[str]
) -> BatchRows:
    """The rows that exist among `external_ids` (of `source`) and `keys` (of `project`); None for the others."""
    objects: dict[str, SourceObject | None] = dict.fromkeys(external_ids)
    documents: dict[str, Document | None] = dict.fromkeys(keys)
    if objects:
        for obj in session.scalars(select(SourceObject).where(
            SourceObject.source_id == source.id, in_set(SourceObject.external_id, list(objects))
        )):
            objects[obj.external_id] = obj
    if documents:
        for document in session.scalars(select(Document).where(
            Document.project_id == project.id, in_set(Document.key, list(documents))
        )):
            documents[document.key] = document
    return BatchRows(objects, documents)


def get_or_create_object(
    session: Session, source: Source, external_id: str, batch: BatchRows | None = None
) -> tuple[SourceObject, bool]:
    """The object, seen now; and whether it was created (then it has no observations yet).

    `batch`: read before, for the names it holds. A new one is written with the batch's flush
    (the observations' relationship orders it before them).
    """
    obj, created = _found_or_added(
        session, batch.objects if batch is not None else None, external_id,
        read=lambda: session.scalar(select(SourceObject).where(
            SourceObject.source_id == source.id, SourceObject.external_id == external_id)),
        new=lambda: SourceObject(id=new_id(), source_id=source.id, external_id=external_id, title=external_id,
                                 last_seen_at=utcnow()),
    )
    if not created:
        obj.last_seen_at = utcnow()
        obj.deleted_at = None
    return obj, created


def get_or_create_document(
    session: Session, project: Project, key: str, batch: BatchRows | None = None
) -> tuple[Document, bool]:
    """The document; and whether it was created (then it has no versions yet).

    `batch`: read before, for the keys it holds. A new one is not flushed here: with its id set,
    its INSERT goes out with its first version's and carries the title and matter that ingest
    sets next (no UPDATE of a row just written).
    """
    return _found_or_added(
        session, batch.documents if batch is not None else None, key,
        read=lambda: session.scalar(select(Document).where(Document.project_id == project.id, Document.key == key)),
        new=lambda: Document(id=new_id(), project_id=project.id, key=key, identifiers=[]),
    )


def _found_or_added(session: Session, known: dict | None, name: str, *, read, new) -> tuple:
    """(the row, False) as read before in the batch or now; else (a new row added to the session, True),
    which the batch's next file of that name finds."""
    was_read = known is not None and name in known
    row = known[name] if was_read else read()
    if row is not None:
        return row, False
    row = new()
    session.add(row)
    if was_read:
        known[name] = row
    return row, True


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
