"""Engines and sessions: how a read-only transaction ends (SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from ki_core.db import end_read, make_engine
from ki_core.models import Project
from tests.conftest import create_database, drop_database


@pytest.fixture(params=["sqlite", "postgresql"])
def db_session(request: pytest.FixtureRequest) -> Iterator[Session]:
    """A session on a migrated database of this test's own, with real transactions (no savepoints)."""
    name = None
    if request.param == "sqlite":
        url = request.getfixturevalue("sqlite_url")
    else:
        name = f"ki_db_{uuid.uuid4().hex[:12]}"
        url = create_database(name, template=request.getfixturevalue("pg_template"))
    engine = make_engine(url)
    try:
        with Session(bind=engine) as session:
            yield session
    finally:
        engine.dispose()
        if name is not None:
            drop_database(name)


def test_a_read_is_committed_and_a_read_that_changed_an_object_is_rolled_back_unwritten(db_session: Session) -> None:
    """COMMIT keeps psycopg's prepared statements (a ROLLBACK drops them); a change a read path made by
    mistake must still never reach the database."""
    engine = db_session.get_bind()
    db_session.add(Project(name="akte", title="Akte"))
    db_session.commit()
    ended: list[str] = []
    event.listen(engine, "commit", lambda _conn: ended.append("commit"))
    event.listen(engine, "rollback", lambda _conn: ended.append("rollback"))

    assert db_session.scalar(select(Project.title)) == "Akte"
    end_read(db_session)
    assert ended == ["commit"]

    db_session.scalar(select(Project)).title = "geändert"
    end_read(db_session)
    assert ended[-1] == "rollback"
    with Session(bind=engine) as other:
        assert other.scalar(select(Project.title)) == "Akte"
