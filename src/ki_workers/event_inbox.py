"""The durable inbox of source events: accept, dispatch, run, finish, list, re-drive.

An event is a row (`ingest_events`) before anyone is told it was accepted,
and it is handed to the broker only after that commit; the sweep dispatches
rows whose message was lost. Status: received -> queued -> processing ->
done | failed (the retries ran out; `transient` when the error was one worth
retrying, which the sweep redrives) | parked (permanent error, or the attempts
ran out, with the reason). The webhook, `ki events replay` and the sweep all
go through the functions here; the task `ki.process_event` calls `run_event`.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

from celery import Task
from celery.exceptions import Retry
from sqlalchemy import Connection, Engine, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ki_core.config import Settings
from ki_core.grants import UnknownTarget
from ki_core.models import EventStatus, IngestEvent, Source, SourceKind
from ki_core.models.base import new_id, utcnow
from ki_workers.sources.dms_events import ACCESS_EVENT_TYPES, DmsEvent, EventSchemaError, parse_event

if TYPE_CHECKING:
    from ki_workers.context import WorkerContext
    from ki_workers.sources.dms import Followups

log = logging.getLogger(__name__)

# With broker.eager the handing over IS the processing, and webhooks hand over on several
# threadpool threads at once. They take turns: Celery's eager apply_async saves and restores
# a process-global "joining a result would block" flag, so overlapping runs leave it stuck
# on (every later EagerResult.get() in the process then raises), and the embedded index has
# one writer anyway. Reentrant: the in-process sweep holds its turn while it dispatches.
_IN_PROCESS_TURN = threading.RLock()

OPEN_STATUSES = (EventStatus.RECEIVED, EventStatus.QUEUED, EventStatus.PROCESSING)
FINISHED_STATUSES = (EventStatus.DONE, EventStatus.PARKED, EventStatus.FAILED)


def event_task_name(event_type: str) -> str:
    """Access events have their own task, routed to the access queue in app.py."""
    from ki_workers.app import PROCESS_ACCESS_EVENT, PROCESS_EVENT  # not at the top: app.py imports the tasks, they this module

    return PROCESS_ACCESS_EVENT if event_type in ACCESS_EVENT_TYPES else PROCESS_EVENT


class UnknownSource(UnknownTarget):
    """The source is not configured in `dms.sources` (the CLI maps UnknownTarget to its exit code)."""


class UnknownEvent(UnknownTarget):
    """No event row with that id."""


class AcceptOutcome(enum.StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"


@dataclass(frozen=True)
class Accepted:
    outcome: AcceptOutcome
    row_id: str
    status: EventStatus


# ------------------------------------------------------------------ accept


def dms_source(session: Session, name: str, settings: Settings) -> Source:
    """The Source row of a configured DMS, created on its first event (race-safe)."""
    if name not in settings.dms.sources:
        raise UnknownSource(f"no DMS source named {name!r} in dms.sources")
    source = session.scalar(select(Source).where(Source.name == name))
    if source is not None:
        if source.kind != SourceKind.DMS:
            raise UnknownSource(f"source {name!r} exists with kind {source.kind}, not dms")
        return source
    try:
        with session.begin_nested():
            source = Source(name=name, kind=SourceKind.DMS, config={"content_base_url": settings.dms.sources[name].content_base_url})
            session.add(source)
    except IntegrityError:
        source = session.scalar(select(Source).where(Source.name == name))
    return source


def accept_event(
    db: Session | Connection, source_id: str, event: DmsEvent, *, status: EventStatus = EventStatus.RECEIVED
) -> Accepted:
    """Write the event row (status received) in the caller's transaction; a known event id is a duplicate.

    One INSERT .. ON CONFLICT DO NOTHING: a concurrent request with the same id
    cannot slip between a check and the insert. The caller commits, and only
    then dispatches (`dispatch_events`). On an autocommit connection (the
    ingress) the statement is its own transaction: one round trip per event.
    """
    now = utcnow()
    values = {
        "id": new_id(), "source_id": source_id, "event_id": event.event_id, "event_type": event.type,
        "schema_version": event.schema_version, "payload": event.model_dump(mode="json"),
        "status": status.value, "attempts": 0, "received_at": now, "updated_at": now,
    }  # fmt: skip
    connection = db.connection() if isinstance(db, Session) else db
    row_id = connection.execute(_insert_event_statement(connection.dialect.name), values).scalar()
    if row_id is not None:
        return Accepted(AcceptOutcome.ACCEPTED, row_id, status)
    existing_id, existing_status = connection.execute(
        select(IngestEvent.id, IngestEvent.status).where(
            IngestEvent.source_id == source_id, IngestEvent.event_id == event.event_id)
    ).one()
    return Accepted(AcceptOutcome.DUPLICATE, existing_id, existing_status)


@cache
def _insert_event_statement(dialect: str):
    """INSERT .. ON CONFLICT DO NOTHING RETURNING id, built once per dialect: the ingress runs it per
    event, and building and caching the statement each time cost more CPU than the round trip."""
    insert = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}[dialect]
    table = IngestEvent.__table__
    return insert(table).on_conflict_do_nothing(index_elements=["source_id", "event_id"]).returning(table.c.id)


def submit_event(settings: Settings, sessions: sessionmaker[Session], source_name: str, data: Any) -> Accepted:
    """Validate, store and dispatch one decoded event: the webhook's path without HTTP (replay, tests)."""
    event = parse_event(data)
    with sessions() as session, session.begin():
        source = dms_source(session, source_name, settings)
        accepted = accept_event(session, source.id, event)
    if accepted.outcome is AcceptOutcome.ACCEPTED:
        dispatch_events(settings, sessions, {accepted.row_id: event.type})
    return accepted


# ---------------------------------------------------------------- dispatch

# Publishing must not hold a webhook answer for long when Redis is down: the sweep dispatches later.
PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}


def dispatch_events(
    settings: Settings, sessions: sessionmaker[Session], events: Mapping[str, str], *, queued: bool = False
) -> int:
    """Hand committed event rows ({row id: event type}) to their task; returns how many were handed over.

    `queued`: the rows were written as queued (the ingress saves a transaction
    per event that way); a publish that fails sets them back to received.

    One path for both modes: the task of the app configured from `settings` is
    published to the broker, or with `broker.eager` run here, to its end. A
    failed publish is logged and left to the sweep (the row is durable); a
    failed in-process run is the task's failure, recorded on the row as a
    worker records it (Celery skips `on_failure` when an eager task propagates).
    """
    from ki_workers.app import app_for

    app = app_for(settings)
    handed = _run_in_process(settings, sessions, app, events) if settings.broker.eager else _publish(app, events)
    if not handed:
        if queued and not settings.broker.eager:
            _mark_received(sessions, list(events))
        return 0
    if not queued:
        _mark_queued(sessions, handed)
    return len(handed)


def _publish(app, events: Mapping[str, str]) -> list[str]:
    """All rows in one Redis pipeline (kombu's producer batch): a publish each cost more CPU than the
    ingress's whole request. All or none: a broker that refuses the batch leaves every row to the sweep."""
    try:
        with app.producer_or_acquire() as producer, producer.batch():
            for row_id, event_type in events.items():
                app.tasks[event_task_name(event_type)].apply_async(
                    args=[row_id], producer=producer, retry=True, retry_policy=PUBLISH_RETRY
                )
    except Exception as exc:  # noqa: BLE001 - never lost: the rows are durable and the sweep re-sends them
        log.warning("%d events not dispatched (%s: %s); the sweep will retry", len(events), type(exc).__name__, exc)
        return []
    return list(events)


def _run_in_process(settings: Settings, sessions: sessionmaker[Session], app, events: Mapping[str, str]) -> list[str]:
    """broker.eager: each task run here, one at a time; a failure is recorded on its row."""
    from ki_workers.app import running_in

    handed = []
    for row_id, event_type in events.items():
        task = app.tasks[event_task_name(event_type)]
        try:
            with in_process_turn(settings), running_in(app):
                task.apply_async(args=[row_id], retry=True, retry_policy=PUBLISH_RETRY)
        except Exception as exc:  # noqa: BLE001 - never lost: failed on the row
            finish_event(sessions, row_id, EventStatus.FAILED, _describe(exc), transient=is_transient(task, exc))
            log.warning("event %s failed (%s)", row_id, _describe(exc))
            continue
        handed.append(row_id)
    return handed


@contextmanager
def in_process_turn(settings: Settings) -> Iterator[None]:
    """One in-process (broker.eager) run at a time; nothing to wait for when workers run the tasks."""
    if not settings.broker.eager:
        yield
        return
    with _IN_PROCESS_TURN:
        yield


def _mark_queued(sessions: sessionmaker[Session], row_ids: list[str]) -> None:
    """received -> queued only: a worker may already have moved the row on.

    Best effort: the message is published already; a row left `received` (the
    database went away just now) is only dispatched once more by the sweep.
    """
    try:
        with sessions() as session, session.begin():
            session.execute(
                update(IngestEvent)
                .where(IngestEvent.id.in_(row_ids), IngestEvent.status == EventStatus.RECEIVED)
                .values(status=EventStatus.QUEUED, updated_at=utcnow())
            )
    except DBAPIError as exc:
        log.warning("events %s handed over but not marked queued (%s); the sweep may send them once more",
                    ", ".join(row_ids), type(exc).__name__)


def _mark_received(sessions: sessionmaker[Session], row_ids: list[str]) -> None:
    """queued -> received after a failed publish, so the sweep sends them without waiting for an idle queue."""
    try:
        with sessions() as session, session.begin():
            session.execute(
                update(IngestEvent)
                .where(IngestEvent.id.in_(row_ids), IngestEvent.status == EventStatus.QUEUED, IngestEvent.attempts == 0)
                .values(status=EventStatus.RECEIVED, updated_at=utcnow())
            )
    except DBAPIError as exc:
        log.warning("events %s left queued (%s); the sweep sends them once their queue is idle",
                    ", ".join(row_ids), type(exc).__name__)


# --------------------------------------------------------------------- run


@dataclass(frozen=True)
class ClaimedEvent:
    row_id: str
    source: Source
    event: DmsEvent
    attempts: int


@contextmanager
def event_lease(engine: Engine, row_id: str) -> Iterator[bool]:
    """Run one event at a time: a PostgreSQL advisory lock held on its own connection.

    The lock dies with the worker's connection, so a killed worker frees the
    event at once, while a live one keeps a re-dispatched copy from running
    beside it. SQLite (the embedded mode) has one process and needs no lock.
    """
    if engine.dialect.name != "postgresql":
        yield True
        return
    key = int(row_id[:15], 16)
    with engine.connect() as conn:
        held = bool(conn.scalar(text("SELECT pg_try_advisory_lock(:key)"), {"key": key}))
        conn.commit()
        try:
            yield held
        finally:
            if held:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})
                conn.commit()


def claim_event(sessions: sessionmaker[Session], row_id: str, max_attempts: int) -> ClaimedEvent | None:
    """Move an open event to processing and count the attempt; None when it is finished or gone.

    A payload that no longer validates (a schema change) parks the event.
    """
    with sessions() as session, session.begin():
        row = session.get(IngestEvent, row_id, with_for_update=True)
        if row is None or row.status in FINISHED_STATUSES:
            return None
        row.attempts += 1
        if row.attempts > max_attempts:
            _finish(row, EventStatus.PARKED, gave_up_note(max_attempts, row.error))
            return None
        row.status = EventStatus.PROCESSING
        try:
            event = parse_event(row.payload)
        except EventSchemaError as exc:
            _finish(row, EventStatus.PARKED, f"payload no longer valid: {exc}")
            return None
        source = session.get(Source, row.source_id)
        session.expunge(source)
        return ClaimedEvent(row_id, source, event, row.attempts)


def finish_event(
    sessions: sessionmaker[Session], row_id: str, status: EventStatus, note: str | None = None, *, transient: bool = False
) -> None:
    with sessions() as session, session.begin():
        row = session.get(IngestEvent, row_id, with_for_update=True)
        if row is not None and row.status not in FINISHED_STATUSES:
            _finish(row, status, note, transient)


def _finish(row: IngestEvent, status: EventStatus, note: str | None, transient: bool = False) -> None:
    row.status = status
    row.error = note
    row.transient = transient and status == EventStatus.FAILED
    row.finished_at = utcnow() if status in FINISHED_STATUSES else None


def gave_up_note(max_attempts: int, last_error: str | None) -> str:
    return f"gave up after {max_attempts} attempts (last: {last_error or 'worker lost'})"


def note_retry(sessions: sessionmaker[Session], row_id: str, error: str) -> None:
    """A transient error: back to queued with the reason, the retry is on its way."""
    with sessions() as session, session.begin():
        session.execute(
            update(IngestEvent)
            .where(IngestEvent.id == row_id, IngestEvent.status.in_(OPEN_STATUSES))
            .values(status=EventStatus.QUEUED, error=error, updated_at=utcnow())
        )


def run_event(ctx: WorkerContext, row_id: str, hand_on: Callable[[Followups], None]) -> str:
    """Claim, apply, hand the follow-up ids on, then mark done; returns the outcome.

    Transient errors propagate (the task retries); permanent ones park the event.
    `hand_on` runs after the event's SQL commit and before `done` is written, so
    a worker killed in between leaves an open event that is simply run again.
    """
    from ki_core.grants import InvalidPrincipal
    from ki_workers.sources.dms import PermanentEventError, apply_event

    with event_lease(ctx.engine, row_id) as held:
        if not held:
            return "busy"
        claimed = claim_event(ctx.sessions, row_id, ctx.settings.sweep.max_event_attempts)
        if claimed is None:
            return "skipped"
        try:
            followups = apply_event(ctx, claimed.source, claimed.event)
        except (PermanentEventError, InvalidPrincipal) as exc:
            finish_event(ctx.sessions, row_id, EventStatus.PARKED, f"{type(exc).__name__}: {exc}")
            return "parked"
        hand_on(followups)
        finish_event(ctx.sessions, row_id, EventStatus.DONE, followups.note)
    return "done"


class EventTask(Task):
    """Records retries and final failures of `ki.process_event` on the event row.

    Both hooks are best effort: they run when something already went wrong,
    often because the database is away. A hook that raises would make Celery
    record a handler error and fail the event while its retry is on the way;
    a row the hook could not update stays open, and the sweep redrives it.
    """

    def on_retry(self, exc, task_id, args, kwargs, einfo) -> None:
        from ki_workers.context import worker_context

        try:
            note_retry(worker_context().sessions, args[0], _describe(exc))
        except Exception as hook_error:  # noqa: BLE001 - the retry is published; the row is noted later
            log.warning("event %s: retry not noted (%s); the retry runs anyway", args[0], _describe(hook_error))

    def on_failure(self, exc, task_id, args, kwargs, einfo) -> None:
        from ki_workers.context import worker_context

        try:
            finish_event(worker_context().sessions, args[0], EventStatus.FAILED, _describe(exc),
                         transient=is_transient(self, exc))
        except Exception as hook_error:  # noqa: BLE001 - left open: the sweep redrives it
            log.warning("event %s: failure not recorded (%s); the sweep will redrive it", args[0], _describe(hook_error))


def is_transient(task: Task, exc: BaseException) -> bool:
    """The error is one the task retries (its `autoretry_for`): worth running again later."""
    if isinstance(exc, Retry):
        return True  # an eager task's transient error, raised as the retry Celery would schedule
    return isinstance(exc, tuple(getattr(task, "autoretry_for", ()) or ()))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, Retry) and isinstance(exc.exc, BaseException):
        exc = exc.exc  # an eager task's transient error, raised as the retry Celery would schedule
    return f"{type(exc).__name__}: {exc}"[:2000]


# -------------------------------------------------------------- operators


# A redispatched event that is still not done waits twice as long each time, up to this many doublings.
MAX_BACKOFF_DOUBLINGS = 6


@dataclass(frozen=True)
class WaitingEvent:
    row_id: str
    status: EventStatus
    event_type: str
    attempts: int


def redispatch_delay(base: timedelta, attempts: int) -> timedelta:
    """How long an event that ran `attempts` times waits before the sweep sends it again."""
    return base * 2 ** min(max(attempts - 1, 0), MAX_BACKOFF_DOUBLINGS)


def events_due(session: Session, base: timedelta, limit: int = 1000) -> list[WaitingEvent]:
    """Open events, and failed ones whose error was transient, untouched for their backoff delay.

    The query takes everything older than `base` (the shortest delay); the
    per-event delay, which grows with the attempts, is applied to those rows.
    """
    now = utcnow()
    rows = session.execute(
        select(IngestEvent.id, IngestEvent.status, IngestEvent.event_type, IngestEvent.attempts, IngestEvent.updated_at)
        .where(
            (IngestEvent.status.in_(OPEN_STATUSES))
            | ((IngestEvent.status == EventStatus.FAILED) & IngestEvent.transient.is_(True)),
            IngestEvent.updated_at < now - base,
        )
        .order_by(IngestEvent.received_at)
        .limit(limit)
    )
    return [
        WaitingEvent(row_id, status, event_type, attempts)
        for row_id, status, event_type, attempts, updated_at in rows
        if _aware(updated_at) < now - redispatch_delay(base, attempts)
    ]


def _aware(moment: datetime) -> datetime:
    """SQLite hands timestamps back without their zone; they were written in UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def lease_is_free(engine: Engine, row_id: str) -> bool:
    """Nobody runs the event now: a `processing` row with a free lease lost its worker."""
    with event_lease(engine, row_id) as held:
        return held


def list_events(
    session: Session, *, status: EventStatus | None = None, event_type: str | None = None, limit: int = 50
) -> list[tuple[IngestEvent, str]]:
    """(row, source name), newest first."""
    stmt = select(IngestEvent, Source.name).join(Source, Source.id == IngestEvent.source_id)
    if status is not None:
        stmt = stmt.where(IngestEvent.status == status)
    if event_type is not None:
        stmt = stmt.where(IngestEvent.event_type == event_type)
    return [(row, name) for row, name in session.execute(stmt.order_by(IngestEvent.received_at.desc()).limit(limit))]


@dataclass(frozen=True)
class EventCount:
    status: EventStatus
    reason: str  # empty for open and done events
    transient: bool
    count: int


def event_counts(session: Session) -> list[EventCount]:
    """Events per status, and failed or parked ones per reason (the error's kind), largest first."""
    counts: dict[tuple[EventStatus, str, bool], int] = defaultdict(int)
    stmt = select(IngestEvent.status, IngestEvent.error, IngestEvent.transient, func.count()).group_by(
        IngestEvent.status, IngestEvent.error, IngestEvent.transient
    )
    for status, error, transient, count in session.execute(stmt):
        reason = failure_reason(error) if status in (EventStatus.FAILED, EventStatus.PARKED) else ""
        counts[(status, reason, bool(transient) and status == EventStatus.FAILED)] += count
    return sorted(
        (EventCount(status, reason, transient, count) for (status, reason, transient), count in counts.items()),
        key=lambda c: (list(EventStatus).index(c.status), -c.count, c.reason),
    )


def failure_reason(error: str | None) -> str:
    """The kind of an error note: its exception name, or "gave up (<last kind>)" after the attempts ran out."""
    if not error:
        return "unknown"
    if error.startswith("gave up after") and "(last: " in error:
        return f"gave up ({failure_reason(error.split('(last: ', 1)[1].rstrip(')'))})"
    head, colon, _rest = error.partition(":")
    return head if colon and head.replace(".", "").isidentifier() else error[:80]


def reopen_event(session: Session, reference: str) -> IngestEvent:
    """An event (by row id or event id) back to received, attempts reset; the caller commits and dispatches."""
    row = session.get(IngestEvent, reference, with_for_update=True)
    if row is None:
        matches = list(session.scalars(select(IngestEvent).where(IngestEvent.event_id == reference).limit(2)))
        if len(matches) > 1:
            raise UnknownEvent(f"event id {reference!r} exists for several sources; give the row id")
        row = matches[0] if matches else None
    if row is None:
        raise UnknownEvent(f"no event with row id or event id {reference!r}")
    row.status, row.attempts, row.finished_at, row.updated_at = EventStatus.RECEIVED, 0, None, utcnow()
    return row


def redrive_event(settings: Settings, sessions: sessionmaker[Session], reference: str) -> str:
    """Reopen one event and dispatch it again (`ki events redrive`, the operations page's button);
    returns its state afterwards in one line."""
    with sessions() as session, session.begin():
        row = reopen_event(session, reference)
        row_id, event_type = row.id, row.event_type
    dispatch_events(settings, sessions, {row_id: event_type})
    with sessions() as session:
        row = session.get(IngestEvent, row_id)
        return f"{row.event_id} ({row.event_type}): {row.status.value}" + (f" - {row.error}" if row.error else "")
