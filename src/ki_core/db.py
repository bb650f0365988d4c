"""Engines and sessions for PostgreSQL (psycopg 3) and SQLite (the embedded default)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from ki_core.config import Settings

# Negative cache_size counts KiB; SQLite allocates the pages only as it reads them.
SQLITE_CACHE_KIB = 64 * 1024


def make_engine(url: str, *, echo: bool = False, pool_size: int = 5, pre_ping: bool = True) -> Engine:
    """An engine with the per-dialect settings we rely on.

    SQLite gets foreign keys on (cascades and RESTRICT are part of the model),
    WAL so readers do not block the single writer, a busy timeout, and a page
    cache of up to 64 MB per connection instead of 2 MB: re-verification reads
    a few pages of eight tables per hit, different pages every search, and at
    2 MB most of them came through a read() from the OS each time (peer-bench
    store, 112 MB: verify step 3.6 -> 3.2 ms per search, interleaved A/B).
    PostgreSQL pings a pooled connection before use unless `pre_ping` is off
    (the ingress: it retries a dropped connection itself rather than pay a
    round trip per event).
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, echo=echo, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, echo=echo, pool_size=pool_size, pool_pre_ping=pre_ping)


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA cache_size=-{SQLITE_CACHE_KIB}")
    cursor.close()


def engine_from_settings(settings: Settings, *, pre_ping: bool = True) -> Engine:
    return make_engine(
        settings.database_url, echo=settings.database.echo, pool_size=settings.database.pool_size, pre_ping=pre_ping
    )


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


def end_read(session: Session) -> None:
    """End a read-only transaction with COMMIT, or ROLLBACK if the session holds changes.

    psycopg forgets every prepared statement of a connection on ROLLBACK, so a query service
    whose reads all rolled back never prepared one: PostgreSQL planned the re-verification
    statement on every search (3.5 ms planning for 1.1 ms of execution, bench/query.py). A read
    path writes nothing; if it ever changed an ORM object, the change is dropped, as before.
    """
    if session.new or session.dirty or session.deleted:
        session.rollback()
    else:
        session.commit()


@contextmanager
def read_transaction(factory: Callable[[], Session]) -> Iterator[Session]:
    """A session for reads: rolled back on an exception, else ended by `end_read`."""
    with factory() as session:
        try:
            yield session
        except BaseException:
            session.rollback()
            raise
        end_read(session)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits on success and rolls back on any exception."""
    with factory() as session, session.begin():
        yield session
