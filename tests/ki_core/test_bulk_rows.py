"""The one bulk row writer stores what an INSERT of the same rows would, on both databases."""

from __future__ import annotations

from datetime import UTC, date, datetime

import numpy as np
import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ki_core.bulk_rows import write_rows
from ki_core.models import (
    Chunk,
    ChunkKind,
    Document,
    DocumentVersion,
    Project,
    Source,
    SourceObject,
    SourceObservation,
)
from ki_workers.stages.chunking import PROFILE_ORDINAL

AT = datetime(2024, 5, 17, 9, 30, tzinfo=UTC)


def a_document(session: Session) -> tuple[str, str]:
    """(document id, version id) of a project written row by row through the ORM."""
    project = Project(name="bulk", title="Bulk")
    session.add(project)
    session.flush()
    document = Document(project_id=project.id, key="a.txt", identifiers=[])
    session.add(document)
    session.flush()
    version = DocumentVersion(document_id=document.id, seq=1, content_hash="0" * 64)
    session.add(version)
    session.flush()
    return document.id, version.id


def test_chunk_rows_keep_enums_bytes_timestamps_and_nulls(db_session: Session) -> None:
    document_id, version_id = a_document(db_session)
    vector = np.arange(4, dtype=np.float32).tobytes()
    written = write_rows(db_session, Chunk, [
        {"id": 1, "version_id": version_id, "document_id": document_id, "ordinal": 0, "kind": ChunkKind.CHUNK,
         "text": "Tab\there, a back\\slash, a\nnewline and 'quotes'", "text_hash": "h0", "char_start": 0,
         "char_end": 10, "embedding": vector, "embedding_signature": "sig", "created_at": AT},
        {"id": 2, "version_id": version_id, "document_id": document_id, "ordinal": PROFILE_ORDINAL, "kind": "profile",
         "text": "Profil", "text_hash": "h1", "created_at": AT},
    ])
    assert written == 2
    db_session.expire_all()
    first, second = db_session.scalars(select(Chunk).order_by(Chunk.id)).all()
    assert (first.kind, second.kind) == (ChunkKind.CHUNK, ChunkKind.PROFILE)
    assert first.text == "Tab\there, a back\\slash, a\nnewline and 'quotes'"
    assert first.embedding == vector and second.embedding is None
    assert (first.char_start, first.char_end, second.char_start, second.locus) == (0, 10, None, None)
    assert first.created_at.replace(tzinfo=UTC) == AT


def test_left_out_columns_get_their_client_defaults_and_json_is_json(db_session: Session) -> None:
    write_rows(db_session, Source, [{"name": "dms", "kind": "dms", "config": {"root": "/x", "n": [1, 2]}}])
    write_rows(db_session, Project, [{"name": f"p{n}", "title": None} for n in range(3)])
    source = db_session.scalar(select(Source).where(Source.name == "dms"))
    assert source.config == {"root": "/x", "n": [1, 2]}
    assert len(source.id) == 32 and source.created_at is not None
    ids = db_session.scalars(select(Project.id).where(Project.name.like("p%"))).all()
    assert len(set(ids)) == 3


def test_rows_belong_to_the_callers_transaction(db_session: Session) -> None:
    with db_session.begin_nested() as savepoint:
        write_rows(db_session, Project, [{"name": "gone", "title": "Weg"}])
        assert db_session.scalar(select(Project.id).where(Project.name == "gone")) is not None
        savepoint.rollback()
    assert db_session.scalar(select(Project.id).where(Project.name == "gone")) is None


def test_rows_may_refer_to_objects_the_session_has_pending(db_session: Session) -> None:
    project = Project(id="p" * 32, name="pending", title="Noch nicht geschrieben")
    db_session.add(project)
    write_rows(db_session, Document, [{"project_id": project.id, "key": "k", "identifiers": ["§ 1 BGB"]}])
    assert db_session.scalar(select(Document.identifiers).where(Document.project_id == project.id)) == ["§ 1 BGB"]


def test_a_column_the_table_lacks_is_named(db_session: Session) -> None:
    with pytest.raises(KeyError, match="projects has no column colour"):
        write_rows(db_session, Project, [{"name": "x", "colour": "blau"}])


def test_bulk_observations_reach_the_access_summary(db_session: Session) -> None:
    """The summary's triggers fire for bulk rows as for ORM ones (statement-level on PostgreSQL)."""
    document_id, version_id = a_document(db_session)
    source_id = write_rows(db_session, Source, [{"id": "s" * 32, "name": "fs", "kind": "local_fs", "config": {}}])
    assert source_id == 1
    write_rows(db_session, SourceObject, [{"id": "o" * 32, "source_id": "s" * 32, "external_id": "a.txt",
                                           "acl_known": False}])
    write_rows(db_session, SourceObservation, [{"version_id": version_id, "source_object_id": "o" * 32,
                                                "state": "active", "observed_at": AT}])
    flags = db_session.execute(
        text("SELECT local_delegation, has_active_observation FROM document_access_summary WHERE document_id = :d"),
        {"d": document_id},
    ).one()
    assert tuple(map(bool, flags)) == (True, True)


def test_dates_and_nothing_to_write(db_session: Session) -> None:
    document_id, version_id = a_document(db_session)
    assert write_rows(db_session, Chunk, []) == 0
    write_rows(db_session, DocumentVersion, [{"document_id": document_id, "seq": 2, "content_hash": "1" * 64,
                                              "doc_date": date(2020, 2, 29), "status": "final",
                                              "processing_state": "indexed", "access_version": 0}])
    assert db_session.scalar(select(DocumentVersion.doc_date).where(DocumentVersion.seq == 2)) == date(2020, 2, 29)
    assert version_id
