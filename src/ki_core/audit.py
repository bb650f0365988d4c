"""The audit trail: every search, read, question and access change, with who, when and on which surface.

A firm must be able to show after the fact who accessed a client's file, so a
read whose record cannot be written is refused (`AuditUnavailable`, 503), never
answered unrecorded. Records hold the query text and document ids, never
document text.

Access changes are recorded before they commit, whoever makes them: `ki access`
and `ki groups`, and a DMS sync (ki_workers.sources.dms: each group member added
or removed through `record_membership`, each ACL or project grant change), so
who may see what is on record however it changed.

Every surface records through `record` (HTTP routes, which the web page calls
in process, the MCP tools, the CLI). On SQLite the records go to a WAL database
file of their own (Settings.audit_database_url): the store's file has one
writer, and a search must not wait behind an ingest's write transaction.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Connection, Engine, delete, insert, inspect, or_, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from ki_core.config import Settings
from ki_core.grants import MembershipDiff
from ki_core.models import AuditRecord

# Pruning is a DELETE over the `at` index; once an hour keeps it off nearly every search.
PRUNE_INTERVAL_SECONDS = 3600
NEWEST_SHOWN = 50
# The web page's in-process calls to the query API name themselves, so its reads are recorded as `web`.
SURFACE_HEADER = "X-KI-Surface"


class Caller(Protocol):
    """Who acted: the query side's `Identity`, the CLI's operator, a DMS source's sync."""

    @property
    def subject(self) -> str: ...

    @property
    def principals(self) -> tuple[str, ...]: ...


class AuditUnavailable(Exception):
    """The audit record could not be written: the read is refused (HTTP 503, CLI exit 3), the change not made."""


class Surface(StrEnum):
    HTTP = "http"
    MCP = "mcp"
    WEB = "web"
    CLI = "cli"
    # A source's sync (DMS events): the change came from the DMS, no one at ki's surfaces made it.
    SYNC = "sync"


class AuditAction(StrEnum):
    SEARCH = "search"
    SEARCH_FILTER = "search_filter"
    SEARCH_DECISIONS = "search_decisions"
    ASK = "ask"
    # `ki eval --as`: questions run through the firm's index as a principal, one record per run.
    EVAL = "eval"
    READ = "read"
    TEXT = "text"
    ORIGINAL = "original"
    RELATED = "related"
    TRAVERSE = "traverse"
    ACCESS_CHANGE = "access_change"
    MEMBER_ADDED = "member_added"
    MEMBER_REMOVED = "member_removed"
    AUDIT_VIEW = "audit_view"


class AuditEntry(BaseModel):
    """One record as the surfaces hand it over and `ki audit` / GET /v1/audit give it back."""

    model_config = ConfigDict(frozen=True)

    at: datetime | None = None
    subject: str
    principals: tuple[str, ...]
    surface: Surface
    action: AuditAction
    query: str | None = None
    hit_count: int | None = None
    document_id: str | None = None
    document_ids: tuple[str, ...] = ()
    detail: str | None = None
    group: str | None = None
    member: str | None = None
    event_id: str | None = None


class AuditFilter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The caller, a principal it acted as, or the member of a membership change.
    user: str | None = None
    document: str | None = None
    group: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = Field(default=NEWEST_SHOWN, gt=0, le=100_000)


class AuditLog:
    """The trail of one store, opened on the first record.

    A record is one INSERT in autocommit mode, without a pre-ping: one round trip to
    PostgreSQL. With BEGIN, INSERT, COMMIT and a ping it was four, and on a loaded
    2-core machine (load 22) each round trip cost about 5 ms (ping + transaction:
    p50 22.6 ms, one autocommit statement: see README, "Audit trail").
    """

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._engine: Engine | None = None
        self._lock = threading.Lock()
        self._pruned_at = float("-inf")

    def record(self, *entries: AuditEntry) -> None:
        """All of `entries` in one statement (a sync of a large group is one round trip, not one per member)."""
        if not entries:
            return
        try:
            with self._connect() as connection:
                connection.execute(insert(AuditRecord), [_row(entry) for entry in entries])
            self._prune_now_and_then()
        except SQLAlchemyError as exc:
            raise AuditUnavailable(f"the audit record could not be written ({type(exc).__name__}); "
                                   "nothing is shown unrecorded, retry later") from None

    def entries(self, where: AuditFilter) -> list[AuditEntry]:
        """Newest first."""
        query = select(AuditRecord).order_by(AuditRecord.at.desc(), AuditRecord.id.desc()).limit(where.limit)
        if where.user:
            query = query.where(or_(AuditRecord.subject == where.user, AuditRecord.member_principal == where.user,
                                    AuditRecord.principals.contains(json.dumps(where.user), autoescape=True)))
        if where.group:
            query = query.where(AuditRecord.group_principal == where.group)
        if where.document:
            query = query.where(or_(AuditRecord.document_id == where.document,
                                    AuditRecord.document_ids.contains(json.dumps(where.document))))
        if where.since:
            query = query.where(AuditRecord.at >= where.since)
        if where.until:
            query = query.where(AuditRecord.at < where.until)
        with self._connect() as connection, Session(connection) as session:
            return [_entry(row) for row in session.scalars(query)]

    def prune(self, now: datetime | None = None) -> int:
        """Delete records older than audit.retention_days; the number deleted."""
        cutoff = (now or datetime.now(UTC)) - timedelta(days=self._settings.audit.retention_days)
        with self._connect() as connection:
            return connection.execute(delete(AuditRecord).where(AuditRecord.at < cutoff)).rowcount or 0

    def _prune_now_and_then(self) -> None:
        if time.monotonic() - self._pruned_at >= PRUNE_INTERVAL_SECONDS:
            self._pruned_at = time.monotonic()
            self.prune()

    def close(self) -> None:
        with self._lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.dispose()

    def _connect(self) -> Connection:
        with self._lock:
            if self._engine is None:
                self._engine = _open(self._settings)
        return self._engine.connect()


def _open(settings: Settings) -> Engine:
    """The store's database on PostgreSQL (migrations made the table); on SQLite the audit file, table made here.
    Autocommit: every statement of the trail stands alone."""
    from ki_core.db import make_engine

    url = settings.audit_database_url
    engine = make_engine(url, pool_size=settings.database.pool_size, pre_ping=False)
    if engine.dialect.name == "sqlite":
        AuditRecord.__table__.create(engine, checkfirst=True)
        _add_missing_columns(engine)
    return engine.execution_options(isolation_level="AUTOCOMMIT")


def _add_missing_columns(engine: Engine) -> None:
    """The SQLite trail file is not under Alembic: a file written before a column existed gets it here
    (every column added since 0017 is nullable, so ADD COLUMN is all a migration would do)."""
    with engine.begin() as connection:
        present = {column["name"] for column in inspect(connection).get_columns(AuditRecord.__tablename__)}
        for column in AuditRecord.__table__.columns:
            if column.name not in present:
                kind = column.type.compile(dialect=connection.dialect)
                connection.exec_driver_sql(f"ALTER TABLE {AuditRecord.__tablename__} ADD COLUMN {column.name} {kind}")
        for index in AuditRecord.__table__.indexes:
            index.create(connection, checkfirst=True)


_logs: dict[tuple[str, int], AuditLog] = {}
_logs_lock = threading.Lock()


def audit_log(settings: Settings) -> AuditLog:
    """One trail per store and retention in this process, shared by every surface."""
    with _logs_lock:
        return _logs.setdefault((settings.audit_database_url, settings.audit.retention_days), AuditLog(settings))


def close_audit_logs() -> None:
    """Close every trail this process opened (their pooled connections too): a process that swaps its
    store, or a test that breaks a trail's file, opens the next one afresh."""
    with _logs_lock:
        logs = list(_logs.values())
        _logs.clear()
    for log in logs:
        log.close()


def record(log: AuditLog, who: Caller, surface: Surface, action: AuditAction, *, query: str | None = None,
           document_id: str | None = None, document_ids: Sequence[str] = (), hit_count: int | None = None,
           detail: str | None = None, event_id: str | None = None) -> None:
    """The one call every surface makes after a read and before it answers (and a change, before it commits)."""
    log.record(AuditEntry(subject=who.subject, principals=who.principals, surface=surface, action=action,
                          query=query, hit_count=hit_count, document_id=document_id,
                          document_ids=tuple(dict.fromkeys(document_ids)), detail=detail, event_id=event_id))


def record_membership(log: AuditLog, who: Caller, surface: Surface, diff: MembershipDiff, *,
                      event_id: str | None = None, detail: str | None = None) -> None:
    """Each member added to or removed from a group, called before the change commits: a change that
    cannot be recorded is rolled back (a sync's event is retried), never applied unrecorded. A commit that
    fails after the record leaves it standing and the retry records again: too much, never too little."""
    entries = [AuditEntry(subject=who.subject, principals=who.principals, surface=surface, action=action,
                          group=diff.group, member=member, event_id=event_id, detail=detail)
               for action, members in ((AuditAction.MEMBER_ADDED, diff.added), (AuditAction.MEMBER_REMOVED, diff.removed))
               for member in members]
    log.record(*entries)


@dataclass(frozen=True)
class Actor:
    """A caller that is not a signed-in identity: a source's sync (`source:<name>`), the terminal's operator."""

    subject: str
    principals: tuple[str, ...]

    @classmethod
    def named(cls, subject: str) -> Actor:
        return cls(subject, (subject,))


def shown_documents(hits: Iterable[object]) -> list[str]:
    """The document ids of shown hits: a search's `Hit`s, or `ask`'s firm hits (metadata document_id)."""
    ids = []
    for hit in hits:
        document_id = getattr(hit, "document_id", None) or (getattr(hit, "metadata", None) or {}).get("document_id")
        if document_id:
            ids.append(str(document_id))
    return ids


def _row(entry: AuditEntry) -> dict[str, object]:
    return {"at": entry.at or datetime.now(UTC), "subject": entry.subject, "principals": json.dumps(entry.principals),
            "surface": entry.surface.value, "action": entry.action.value, "query": entry.query,
            "hit_count": entry.hit_count, "document_id": entry.document_id,
            "document_ids": json.dumps(entry.document_ids) if entry.document_ids else None, "detail": entry.detail,
            "group_principal": entry.group, "member_principal": entry.member, "event_id": entry.event_id}


def _entry(row: AuditRecord) -> AuditEntry:
    at = row.at if row.at.tzinfo else row.at.replace(tzinfo=UTC)  # SQLite hands back naive UTC
    return AuditEntry(at=at, subject=row.subject, principals=tuple(json.loads(row.principals)),
                      surface=Surface(row.surface), action=AuditAction(row.action), query=row.query,
                      hit_count=row.hit_count, document_id=row.document_id,
                      document_ids=tuple(json.loads(row.document_ids)) if row.document_ids else (),
                      detail=row.detail, group=row.group_principal, member=row.member_principal,
                      event_id=row.event_id)
