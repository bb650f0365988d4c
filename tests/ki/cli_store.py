"""An embedded store as `ki` commands meet it, for the tests of the everyday commands.

Import `store` (a fixture: an initialised embedded store with the hashing
embedder and a copy of the fixture folder, the one of the ingest tests) into
the test module that uses it; `database`, requested before it, runs a test on
SQLite (the default store) and on a PostgreSQL database of its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ki.cli import app
from ki_core.audit import close_audit_logs
from ki_workers.context import reset_worker_context
from tests.ki.test_ingest_cli import runner, store  # noqa: F401 - fixture, re-exported

PROJECT = "mietsache"
# The fixture folder's PDF is broken on purpose (exit 1); these tests leave it out.
BROKEN = "kaputt.pdf"


@pytest.fixture
def fresh_query_service() -> Iterator[None]:
    """The CLI keeps one query service per process (functools.cache): each test's store gets its own."""
    from ki.commands.reading import query

    query._service.cache_clear()
    yield
    if query._service.cache_info().currsize:
        query._service().close()  # its engine's pooled connections, before a PostgreSQL database is dropped
    query._service.cache_clear()


def ki(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), input=input)


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The store's database: the embedded SQLite file, or a fresh migrated PostgreSQL database as database.url."""
    if request.param == "sqlite":
        yield request.param
        return
    from tests.conftest import create_database, drop_database

    name = f"ki_cli_{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("KI_DATABASE__URL", create_database(name, template=request.getfixturevalue("pg_template")))
    try:
        yield request.param
    finally:
        reset_worker_context()
        close_audit_logs()  # its pooled connections to this database, before the database goes
        drop_database(name)


def table_rows(output: str) -> list[list[str]]:
    """The cells of each row of the rich tables in OUTPUT (headers included)."""
    return [[cell.strip() for cell in line.replace("┃", "│").strip("│").split("│")] for line in output.splitlines()
            if line.startswith(("│", "┃"))]


def summary_counts(output: str) -> dict[str, str]:
    """`ki ingest`'s summary table as {what: count}."""
    return {row[0]: row[1] for row in table_rows(output) if len(row) == 2}


def ingested(folder: Path, *grantees: str) -> Path:
    """`ki ingest FOLDER` into PROJECT (without the broken PDF), and each grantee allowed on it."""
    result = ki("ingest", str(folder), "--project", PROJECT, "--exclude", BROKEN)
    assert result.exit_code == 0, result.output
    for principal in grantees:
        granted = ki("access", "grant", principal, "--project", PROJECT)
        assert granted.exit_code == 0, granted.output
    return folder


def document_keys_found(query: str, *principals: str) -> set[str]:
    """The keys of the documents a search as PRINCIPALS returns, through a fresh query service."""
    from ki_core.config import load_settings
    from ki_query.retrieval import retrieval_service_from_settings
    from ki_query.types import SearchRequest

    service = retrieval_service_from_settings(load_settings())
    try:
        response = service.search(SearchRequest(query=query, limit=50), list(principals))
    finally:
        service.close()
    return {hit.citation.document.key for hit in response.hits}
