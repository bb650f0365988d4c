"""Shared fixtures: settings isolation, PostgreSQL and SQLite sessions, Redis.

PostgreSQL: one migrated template database per run; the per-test session runs
inside an outer transaction that is rolled back (SAVEPOINTs for the code's own
commits). Tests whose data must be seen by other processes use
`committed_pg_url`: a fresh database per module, copied from the template and
dropped afterwards. Each run uses its own databases, so concurrent runs on one
server do not interfere.

Under KI_REQUIRE_SERVICES=1 (CI) an unreachable service fails the run;
otherwise the tests that need it are skipped with a one-line reason.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from ki_core.config import get_settings
from ki_core.db import make_engine
from ki_core.migrate import upgrade_to_head

REQUIRE_SERVICES = os.environ.get("KI_REQUIRE_SERVICES") == "1"
PG_URL = os.environ.get(
    "KI_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("KI_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
# The realm `ki` of the Keycloak that `make services` starts (deploy/keycloak/realm-ki.json).
OIDC_ISSUER = os.environ.get("KI_TEST_OIDC_ISSUER")
_KEEP_ENV = {"KI_TEST_DATABASE_URL", "KI_TEST_REDIS_URL", "KI_REQUIRE_SERVICES", "KI_TEST_OPENSEARCH_URL",
             "KI_TEST_OIDC_ISSUER"}


def service_unavailable(name: str, reason: object) -> None:
    """Fail under KI_REQUIRE_SERVICES=1, skip otherwise; never returns."""
    message = f"{name} is not reachable: {str(reason).splitlines()[0] if str(reason) else reason!r}"
    if REQUIRE_SERVICES:
        pytest.fail(f"{message} (KI_REQUIRE_SERVICES=1)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(autouse=True)
def isolated_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No KI_* variable or config.json of the developer's leaks into a test."""
    for name in list(os.environ):
        if name.startswith("KI_") and name not in _KEEP_ENV:
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


# ---------------------------------------------------------------- PostgreSQL


def _server_engine() -> Engine:
    return create_engine(PG_URL, isolation_level="AUTOCOMMIT")


def _database_url(name: str) -> str:
    return make_url(PG_URL).set(database=name).render_as_string(hide_password=False)


def create_database(name: str, template: str | None = None) -> str:
    engine = _server_engine()
    try:
        with engine.connect() as conn:
            # template0 accepts no connections, so concurrent test runs on one server never
            # collide on it ("source database template1 is being accessed by other users").
            suffix = f" TEMPLATE {template or 'template0'}"
            conn.execute(text(f'CREATE DATABASE "{name}"{suffix}'))
    finally:
        engine.dispose()
    return _database_url(name)


def drop_database(name: str) -> None:
    engine = _server_engine()
    try:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """Name of a migrated database that per-run and per-module databases copy."""
    try:
        engine = _server_engine()
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as exc:  # noqa: BLE001 - any connection failure means "not reachable"
        service_unavailable("PostgreSQL", exc)
    name = f"ki_tpl_{uuid.uuid4().hex[:12]}"
    url = create_database(name)
    try:
        upgrade_to_head(url)
        yield name
    finally:
        drop_database(name)


@pytest.fixture(scope="session")
def pg_engine(pg_template: str) -> Iterator[Engine]:
    name = f"ki_run_{uuid.uuid4().hex[:12]}"
    url = create_database(name, template=pg_template)
    engine = make_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()
        drop_database(name)


@pytest.fixture
def pg_session(pg_engine: Engine) -> Iterator[Session]:
    """A session whose every write, commits included, is rolled back after the test."""
    connection = pg_engine.connect()
    outer = connection.begin()
    session = Session(bind=connection, join_transaction_mode="create_savepoint")
    try:
        yield session
    finally:
        session.close()
        outer.rollback()
        connection.close()


@pytest.fixture(scope="module")
def committed_pg_url(pg_template: str) -> Iterator[str]:
    """A fresh migrated database for this module, with committed data visible to other processes."""
    name = f"ki_mod_{uuid.uuid4().hex[:12]}"
    url = create_database(name, template=pg_template)
    try:
        yield url
    finally:
        drop_database(name)


# -------------------------------------------------------------------- SQLite


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "ki.db"
    upgrade_to_head(f"sqlite:///{path}")
    return path


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """A migrated SQLite file of this test's own (a copy of the template)."""
    path = tmp_path / "ki.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def sqlite_session(sqlite_url: str) -> Iterator[Session]:
    engine = make_engine(sqlite_url)
    session = Session(bind=engine)
    try:
        yield session
    finally:
        session.close()
        engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_session(request: pytest.FixtureRequest) -> Session:
    """The same test on both databases."""
    return request.getfixturevalue({"sqlite": "sqlite_session", "postgresql": "pg_session"}[request.param])


# --------------------------------------------------------------------- Redis


@pytest.fixture(scope="session")
def redis_url() -> str:
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except Exception as exc:  # noqa: BLE001
        service_unavailable("Redis", exc)
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture
def redis_client(redis_url: str):
    """A client on the test database, emptied before and after the test."""
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    try:
        yield client
    finally:
        client.flushdb()
        client.close()


# ------------------------------------------------------------------ OpenSearch summary

_ON_THE_NODE: dict[str, set[str]] = {"passed": set(), "failed": set(), "skipped": set()}


def _runs_on_the_node(nodeid: str) -> bool:
    """Tests that talk to a live OpenSearch node: the opensearch parameter of the contract and
    worker suites and the live module (the request-body pins run without a node)."""
    return "test_opensearch_live.py" in nodeid or re.search(r"\[(?:[^\]]*-)?opensearch(?:-[^\]]*)?\]", nodeid) is not None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _runs_on_the_node(report.nodeid):
        return
    if report.skipped:
        _ON_THE_NODE["skipped"].add(report.nodeid)
    elif report.failed:
        _ON_THE_NODE["failed"].add(report.nodeid)
    elif report.when == "call":
        _ON_THE_NODE["passed"].add(report.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """One line CI's log can be checked by: how many tests ran on the OpenSearch node."""
    url = os.environ.get("KI_TEST_OPENSEARCH_URL")
    passed = len(_ON_THE_NODE["passed"] - _ON_THE_NODE["failed"])
    failed, skipped = len(_ON_THE_NODE["failed"]), len(_ON_THE_NODE["skipped"])
    where = f"on {url}" if url else "(KI_TEST_OPENSEARCH_URL unset: no node)"
    terminalreporter.write_line(f"OpenSearch tests {where}: {passed} passed, {failed} failed, {skipped} skipped")
