"""One store, one index: a database paired with an index another database filled is refused,
named with both, and `ki reindex` replaces another store's index only with --replace-index."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sqlalchemy import select

from ki.cli import app
from ki_core.config import get_settings
from ki_core.db import make_engine, session_factory
from ki_core.grants import GrantTarget, grant
from ki_core.models import Project
from ki_workers.context import reset_worker_context
from tests.ki_core.test_migrations import empty_pg_url  # noqa: F401 - fixture

FOLDER = Path(__file__).parents[1] / "fixtures" / "folder"
runner = CliRunner(env={"COLUMNS": "250"})


def forget_the_service() -> None:
    """Each `ki` run is a process of its own: no query service (and its connections) carried over."""
    from ki.commands.reading import query

    if query._service.cache_info().currsize:
        query._service().close()
    query._service.cache_clear()


def ki(monkeypatch: pytest.MonkeyPatch, database: Path, *args: str):
    """A `ki` command on DATABASE; the state directory (so the embedded index path) stays the same."""
    monkeypatch.setenv("KI_DATABASE__URL", f"sqlite:///{database}")
    get_settings.cache_clear()
    reset_worker_context()
    forget_the_service()
    try:
        return runner.invoke(app, list(args))
    finally:
        reset_worker_context()
        forget_the_service()


@pytest.fixture
def first_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A store with the fixture folder indexed; its database file is returned."""
    monkeypatch.setenv("KI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KI_EMBEDDING__PROVIDER", "hashing")
    monkeypatch.setenv("KI_EMBEDDING__DIMENSIONS", "64")
    folder = tmp_path / "akte"
    shutil.copytree(FOLDER, folder)
    database = tmp_path / "first.db"
    assert ki(monkeypatch, database, "init").exit_code == 0
    ki(monkeypatch, database, "ingest", str(folder), "--project", "kontorwerk")
    grant_project(f"sqlite:///{database}", "kontorwerk", "anna")
    yield database


def grant_project(url: str, project: str, principal: str) -> None:
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session, session.begin():
            project_id = session.scalar(select(Project.id).where(Project.name == project))
            grant(session, GrantTarget.project(project_id), principal)
    finally:
        engine.dispose()


def hits(monkeypatch, database: Path) -> str:
    return ki(monkeypatch, database, "search", "Mietvertrag", "--as", "anna").output


def test_another_database_on_the_same_index_is_refused_naming_both(monkeypatch, first_store: Path, tmp_path) -> None:
    other = tmp_path / "other.db"
    result = ki(monkeypatch, other, "init")
    assert result.exit_code == 2, result.output
    assert "filled from another store" in result.output and str(other) in result.output

    searched = ki(monkeypatch, other, "search", "Mietvertrag", "--as", "anna")
    assert searched.exit_code == 2 and "ki store migrate" in searched.output, "never a silently empty answer"


def test_reindex_from_another_database_is_refused_and_the_first_store_keeps_its_index(
    monkeypatch, first_store: Path, tmp_path
) -> None:
    before = hits(monkeypatch, first_store)
    assert "no hits" not in before
    other = tmp_path / "other.db"
    ki(monkeypatch, other, "init")
    refused = ki(monkeypatch, other, "reindex")
    assert refused.exit_code == 2 and "--replace-index" in refused.output
    assert hits(monkeypatch, first_store) == before, "the first store's index is untouched"

    replaced = ki(monkeypatch, other, "reindex", "--replace-index")
    assert replaced.exit_code == 0, replaced.output
    now = ki(monkeypatch, other, "search", "Mietvertrag", "--as", "anna")
    assert now.exit_code == 0 and "no hits" in now.output, "the other database is empty, and so is its index now"
    back = ki(monkeypatch, first_store, "search", "Mietvertrag", "--as", "anna")
    assert back.exit_code == 2 and "filled from another store" in back.output, "now the first store is told"


def test_a_new_store_answers_a_search_with_no_hits(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KI_EMBEDDING__PROVIDER", "hashing")
    monkeypatch.setenv("KI_EMBEDDING__DIMENSIONS", "64")
    database = tmp_path / "new.db"
    initialised = ki(monkeypatch, database, "init")
    assert "is ready" in initialised.output and "next: ki ingest" in initialised.output
    result = ki(monkeypatch, database, "search", "Mietvertrag", "--as", "anna")
    assert result.exit_code == 0 and "no hits" in result.output


# ------------------------------------------------------------------ moving a store


def test_a_store_moves_to_postgresql_keeps_its_index_and_refuses_a_used_target(
    monkeypatch, first_store: Path, empty_pg_url: str  # noqa: F811
) -> None:
    before = hits(monkeypatch, first_store)
    moved = ki(monkeypatch, first_store, "store", "migrate", "--to", empty_pg_url)
    assert moved.exit_code == 0, moved.output
    assert "copied chunks:" in moved.output and "Next: set database.url" in moved.output

    monkeypatch.setenv("KI_DATABASE__URL", empty_pg_url)
    get_settings.cache_clear()
    forget_the_service()
    on_postgres = runner.invoke(app, ["search", "Mietvertrag", "--as", "anna"])
    forget_the_service()
    assert on_postgres.exit_code == 0 and on_postgres.output == before, "the same store: same index, same hits"

    again = ki(monkeypatch, first_store, "store", "migrate", "--to", empty_pg_url)
    assert again.exit_code == 1 and "the target database is not empty" in again.output
