"""Alembic builds the schema on PostgreSQL and SQLite and takes it down again."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect
from sqlalchemy.exc import SAWarning

from ki_core.db import make_engine
from ki_core.migrate import current_revision, downgrade_to_base, upgrade_to_head
from ki_core.models import Base
from tests.conftest import create_database, drop_database


@pytest.fixture
def empty_pg_url(pg_template: str) -> Iterator[str]:
    name = f"ki_empty_{uuid.uuid4().hex[:12]}"
    url = create_database(name)
    try:
        yield url
    finally:
        drop_database(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    return request.getfixturevalue("empty_pg_url")


# The decision text index lives outside the models (migration 0006): SQLite's FTS5 table with its
# shadow tables and row keys, PostgreSQL's generated tsvector column and its GIN index.
TEXT_INDEX_TABLE_PREFIX = "decision_fts"
TEXT_INDEX_COLUMNS = {("decision_records", "text_vector")}
TEXT_INDEX_INDEXES = {"ix_decision_records_text_vector"}


def _tables(engine: Engine) -> set[str]:
    names = set(inspect(engine).get_table_names()) - {"alembic_version"}
    return {name for name in names if not name.startswith(TEXT_INDEX_TABLE_PREFIX)}


def _modelled(obj, name, type_, reflected, compare_to) -> bool:
    """compare_metadata's filter: leave out what the text index migration owns."""
    if type_ == "table":
        return not name.startswith(TEXT_INDEX_TABLE_PREFIX)
    if type_ == "column":
        return (obj.table.name, name) not in TEXT_INDEX_COLUMNS
    if type_ == "index":
        return name not in TEXT_INDEX_INDEXES
    return True


def test_upgrade_creates_every_table_and_downgrade_removes_them(empty_url: str) -> None:
    upgrade_to_head(empty_url)
    engine = make_engine(empty_url)
    try:
        assert _tables(engine) == set(Base.metadata.tables)
        downgrade_to_base(empty_url)
        assert set(inspect(engine).get_table_names()) - {"alembic_version"} == set()  # text index tables too
    finally:
        engine.dispose()
    assert current_revision(empty_url) is None


def test_upgrade_twice_is_harmless(empty_url: str) -> None:
    upgrade_to_head(empty_url)
    upgrade_to_head(empty_url)
    assert current_revision(empty_url) is not None


def test_migrations_match_the_models(empty_url: str) -> None:
    """A model change without a migration fails here, before it reaches a user's database."""
    upgrade_to_head(empty_url)
    engine = make_engine(empty_url)
    try:
        with engine.connect() as conn, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*expression-based index", category=SAWarning)
            warnings.filterwarnings("ignore", message=".*expression-based index", category=UserWarning)
            context = MigrationContext.configure(conn, opts={"compare_type": True, "include_object": _modelled})
            diff = [d for d in compare_metadata(context, Base.metadata) if not _expression_index(d)]
    finally:
        engine.dispose()
    assert diff == []


def _expression_index(diff: object) -> bool:
    """Alembic cannot reflect expression indexes on every dialect; they are checked by constraint tests."""
    if isinstance(diff, tuple) and diff and diff[0] in ("add_index", "remove_index"):
        return diff[1].name in {"uq_grants_target_principal_effect", "uq_relations_kind_from_to"}
    return False


def test_0008_moves_clause_rows_above_any_body_chunk(empty_url: str) -> None:
    """A clause row stored at the old ordinal 1000 is renumbered, after which body chunk 1000 fits."""
    from alembic import command
    from sqlalchemy import insert, select
    from sqlalchemy.orm import Session

    from ki_core.migrate import alembic_config
    from ki_core.models import Chunk, ChunkKind, Document, DocumentVersion, Project
    from ki_workers.stages.chunking import FIRST_CLAUSE_ORDINAL

    command.upgrade(alembic_config(empty_url), "0007_transient_event_failures")
    engine = make_engine(empty_url)
    try:
        with Session(engine) as session, session.begin():
            project = Project(name="p")
            session.add(project)
            session.flush()
            # The document and version rows through their tables, naming only 0007's columns: later
            # columns the models have (0015's declared_doc_type, 0016's page_starts) are not there yet.
            document_id, version_id = "d" * 32, "e" * 32
            session.execute(insert(Document.__table__).values(id=document_id, project_id=project.id, key="d"))
            session.execute(insert(DocumentVersion.__table__).values(
                id=version_id, document_id=document_id, seq=1, content_hash="h"))
            session.add(Chunk(id=1, version_id=version_id, document_id=document_id, ordinal=1000, kind=ChunkKind.CLAUSE,
                              text="Haftung", text_hash="t"))
        upgrade_to_head(empty_url)
        with Session(engine) as session, session.begin():
            assert session.scalar(select(Chunk.ordinal).where(Chunk.id == 1)) == FIRST_CLAUSE_ORDINAL
            session.add(Chunk(id=2, version_id=version_id, document_id=document_id, ordinal=1000, kind=ChunkKind.CHUNK,
                              text="Absatz", text_hash="u"))
    finally:
        engine.dispose()
