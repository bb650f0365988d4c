"""Beat jobs in-process: re-dispatch of unfinished events, the attempt limit, the index reconcile.

The real-broker versions (a purged queue, a SIGKILLed worker) are in test_worker_crash.py.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import select, update
from sqlalchemy.exc import OperationalError

from ki_core.config import get_settings, load_settings
from ki_core.models import Chunk, DocumentVersion, EventStatus, IngestEvent
from ki_core.models.base import utcnow
from ki_core.search.index import DeleteOp, IndexOp, UpdateAccessOp
from ki_core.search.types import AccessProjection, IndexChunk
from ki_workers import tasks
from ki_workers.app import beat_schedule, celery_config
from ki_workers.context import reset_worker_context
from ki_workers.event_inbox import accept_event, dms_source
from ki_workers.sources.dms_events import parse_event
from ki_workers.sweep import idle_queues, reconcile_index, redispatch_events, run_sweep
from tests.ki_workers.dms_support import SECRET, SOURCE, TEXT, acl_changed, envelope, upserted
from ki_query.scope import AccessService
from tests.ki_workers.test_dms_events import sees, submit, version_of


@pytest.fixture
def dms(ctx, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KI_DMS__SOURCES__ACME__SECRET", SECRET)
    get_settings.cache_clear()
    ctx.settings = get_settings()
    return ctx


def accepted_without_dispatch(ctx, data: dict, *, status=EventStatus.QUEUED, age=timedelta(minutes=10)) -> str:
    """An event row as if its broker message had been lost after the commit."""
    with ctx.sessions() as session, session.begin():
        source = dms_source(session, SOURCE, ctx.settings)
        row_id = accept_event(session, source.id, parse_event(data)).row_id
        session.execute(
            update(IngestEvent).where(IngestEvent.id == row_id).values(status=status, updated_at=utcnow() - age)
        )
    return row_id


def status_of(ctx, row_id: str) -> tuple[EventStatus, int, str | None]:
    with ctx.sessions() as session:
        row = session.get(IngestEvent, row_id)
        return row.status, row.attempts, row.error


def test_events_whose_message_was_lost_are_dispatched_again_after_the_delay(dms) -> None:
    lost = accepted_without_dispatch(dms, upserted("A-1"))
    killed = accepted_without_dispatch(dms, acl_changed("A-1", [{"principal": "bob"}], minutes=3),
                                       status=EventStatus.PROCESSING)
    recent = accepted_without_dispatch(dms, upserted("A-2", text=TEXT + " Zwei."), age=timedelta(seconds=5))
    report = run_sweep(dms)
    assert report["events_redispatched"] == 2
    assert status_of(dms, lost)[0] == status_of(dms, killed)[0] == EventStatus.DONE
    assert status_of(dms, recent) == (EventStatus.QUEUED, 0, None), "younger than the delay: left alone"
    assert version_of(dms, "A-1") is not None
    assert redispatch_events(dms) == 0, "nothing left to re-dispatch"


def test_while_the_ingest_queue_has_a_backlog_only_events_never_handed_over_are_dispatched(dms) -> None:
    waiting = accepted_without_dispatch(dms, upserted("A-1"))
    never_sent = accepted_without_dispatch(dms, upserted("A-2", text=TEXT + " Zwei."), status=EventStatus.RECEIVED)
    assert redispatch_events(dms, idle=set()) == 1, "a backlog: the queued event is waiting its turn, not lost"
    assert status_of(dms, waiting)[0] == EventStatus.QUEUED
    assert status_of(dms, never_sent)[0] == EventStatus.DONE


@pytest.mark.redis
def test_a_queue_with_waiting_messages_is_not_idle(dms, redis_url, redis_client, monkeypatch) -> None:
    monkeypatch.setenv("KI_BROKER__URL", redis_url)
    monkeypatch.setenv("KI_BROKER__EAGER", "false")
    get_settings.cache_clear()
    dms.settings = get_settings()
    redis_client.lpush("ki.index", b"{}")
    assert idle_queues(dms) == {"ki.ingest", "ki.access"}


def test_an_event_that_keeps_losing_its_worker_is_parked_after_the_attempt_limit(dms) -> None:
    row_id = accepted_without_dispatch(dms, upserted("A-1"), status=EventStatus.PROCESSING)
    with dms.sessions() as session, session.begin():
        session.execute(update(IngestEvent).where(IngestEvent.id == row_id).values(attempts=dms.settings.sweep.max_event_attempts))
    assert tasks.process_event.delay(row_id).get() == "skipped"
    status, attempts, error = status_of(dms, row_id)
    assert status == EventStatus.PARKED and error.startswith("gave up after 12 attempts")
    assert version_of(dms, "A-1") is None


def test_beat_sends_the_sweep_and_the_reconcile_at_their_configured_intervals(monkeypatch) -> None:
    monkeypatch.setenv("KI_SWEEP__INTERVAL_SECONDS", "30")
    settings = load_settings()
    schedule = beat_schedule(settings)
    assert schedule["sweep"] == {"task": "ki.sweep", "schedule": 30.0}
    assert schedule["reconcile"]["task"] == "ki.reconcile"
    assert celery_config(settings)["task_routes"]["ki.reconcile"] == {"queue": "ki.maintenance"}


# ----------------------------------------------------------------- reconcile


@pytest.fixture
def dms_any(search_backend: str, request: pytest.FixtureRequest):
    """`dms` on each search backend."""
    return request.getfixturevalue("dms")


def count_requests(index) -> list[str]:
    """Record the method and path of every request the index sends from now on (OpenSearch only)."""
    seen: list[str] = []
    transport = getattr(getattr(index, "client", None), "transport", None)
    if transport is None:
        return seen
    send = transport.perform_request

    def recording(method, url, *args, **kwargs):
        seen.append(f"{method} {url}")
        return send(method, url, *args, **kwargs)

    transport.perform_request = recording
    return seen


def test_reconcile_repairs_missing_stale_and_orphaned_rows_without_embedding(dms_any) -> None:
    dms = dms_any
    for n, object_id in enumerate(("A-1", "A-2", "A-3")):
        submit(dms, upserted(object_id, text=f"{TEXT} Akte {object_id}. " * 3, minutes=n))
    index = dms.index()
    index.refresh()
    healthy = index.count()
    missing, stale, sample = (version_of(dms, o) for o in ("A-1", "A-2", "A-3"))
    with dms.sessions() as session:
        chunks = {v.id: list(session.scalars(select(Chunk).where(Chunk.version_id == v.id))) for v in (missing, stale)}
    orphan = IndexChunk(
        chunk_id=987_654_321, text="verwaist", embedding=tuple(np.ones(64, dtype=np.float32) / 8.0),
        project_id=_project_id(dms, sample), document_id="deleted-long-ago", document_version_id="gone",
    )
    index.bulk([
        DeleteOp(chunks[missing.id][0].id),
        IndexOp(orphan),
        UpdateAccessOp(AccessProjection(document_id=stale.document_id, document_version_id=stale.id,
                                        chunk_ids=tuple(c.id for c in chunks[stale.id]), allowed_principals=("mallory",),
                                        denied_principals=(), access_version=-1)),
    ])
    index.refresh()
    embedded = dms.embedder().passages

    report = reconcile_index(dms)

    assert (report.projects_mismatched, report.orphan_documents_removed, report.documents_repaired) == (1, 1, 1)
    assert report.versions_refreshed == 1
    assert report.chunks_in_index_before == healthy and report.chunks_in_index_after == report.chunks_expected == healthy
    assert index.stored_fields(chunks[stale.id][0].id)["allowed_principals"] == ("alice",)
    assert index.stored_fields(orphan.chunk_id) is None
    assert dms.embedder().passages == embedded
    again = reconcile_index(dms)
    assert (again.projects_mismatched, again.documents_repaired, again.versions_refreshed) == (0, 0, 0)


def test_reconcile_reads_the_access_fields_in_batches_not_one_request_per_version(dms_any) -> None:
    dms = dms_any
    for n in range(25):
        submit(dms, upserted(f"B-{n}", text=f"{TEXT} Akte B-{n}.", minutes=n))
    sent = count_requests(dms.index())
    report = reconcile_index(dms)
    assert report.projects_mismatched == 0 and report.versions_refreshed == 0
    if dms.settings.search.backend == "opensearch":
        assert not [r for r in sent if "/_doc/" in r], sent
        # One _mget of the first chunks, one of their versions' access projections (the -access index).
        assert sorted(r.rsplit("/", 2)[-2].endswith("-access") for r in sent if r.endswith("/_mget")) == [False, True]
        # A fixed number of calls: refresh, counts per project, two _mget, refresh, count.
        assert len(sent) <= 9, sent


def test_reconcile_removes_rows_of_a_document_sql_no_longer_observes(dms_any) -> None:
    dms = dms_any
    submit(dms, upserted("A-1"))
    version = version_of(dms, "A-1")
    project_id = _project_id(dms, version)
    with dms.sessions() as session:
        rows = list(session.scalars(select(Chunk).where(Chunk.version_id == version.id)))
    submit(dms, envelope("document.deleted", 5, object_id="A-1"))
    index = dms.index()
    # The index missed the delete: its rows are back as they were.
    index.bulk([
        IndexOp(IndexChunk(chunk_id=row.id, text=row.text, embedding=tuple(np.frombuffer(row.embedding, dtype=np.float32)),
                           project_id=project_id, document_id=version.document_id, document_version_id=version.id))
        for row in rows
    ])
    index.refresh()
    assert index.count() == len(rows)
    report = reconcile_index(dms)
    assert report.documents_repaired == 1 and report.chunks_in_index_after == report.chunks_expected == 0


def _project_id(ctx, version: DocumentVersion) -> str:
    from ki_core.models import Document

    with ctx.sessions() as session:
        return session.get(Document, version.document_id).project_id


# ------------------------------------------------------------ transient failures


def failed(ctx, row_id: str, *, transient: bool, attempts: int = 1, age=timedelta(minutes=10)) -> None:
    with ctx.sessions() as session, session.begin():
        session.execute(update(IngestEvent).where(IngestEvent.id == row_id).values(
            status=EventStatus.FAILED, transient=transient, attempts=attempts, error="OperationalError: server closed",
            finished_at=utcnow(), updated_at=utcnow() - age))


def test_an_event_that_failed_on_a_transient_error_is_applied_by_the_sweep(dms) -> None:
    """A revocation that outlived its retries during a database restart is applied, not lost."""
    assert submit(dms, upserted("A-1", acl=[{"principal": "bob"}])).status == EventStatus.DONE
    access = AccessService(dms.sessions, dms.settings)
    assert sees(access, "bob", version_of(dms, "A-1"))
    revoked = accepted_without_dispatch(dms, acl_changed("A-1", [{"principal": "carol"}], minutes=3))
    failed(dms, revoked, transient=True)
    assert redispatch_events(dms) == 1
    assert status_of(dms, revoked)[:2] == (EventStatus.DONE, 2)
    assert not sees(access, "bob", version_of(dms, "A-1"))


def test_a_failure_that_is_not_transient_stays_failed_for_an_operator(dms) -> None:
    row_id = accepted_without_dispatch(dms, upserted("A-1"))
    failed(dms, row_id, transient=False)
    assert redispatch_events(dms) == 0
    assert status_of(dms, row_id)[0] == EventStatus.FAILED


def test_a_transient_failure_without_attempts_left_is_parked_with_the_reason(dms) -> None:
    row_id = accepted_without_dispatch(dms, upserted("A-1"))
    failed(dms, row_id, transient=True, attempts=dms.settings.sweep.max_event_attempts, age=timedelta(days=30))
    assert redispatch_events(dms) == 0
    status, _attempts, error = status_of(dms, row_id)
    assert status == EventStatus.PARKED
    assert error == "gave up after 12 attempts (last: OperationalError: server closed)"
    assert version_of(dms, "A-1") is None


def test_each_run_an_event_had_doubles_its_wait_before_the_next_redispatch(dms) -> None:
    base = timedelta(seconds=dms.settings.sweep.event_redispatch_after_seconds)
    waited = accepted_without_dispatch(dms, upserted("A-1"), status=EventStatus.PROCESSING, age=3 * base)
    with dms.sessions() as session, session.begin():
        session.execute(update(IngestEvent).where(IngestEvent.id == waited).values(attempts=3))
    assert redispatch_events(dms) == 0, "three runs: it waits 4 times the delay"
    with dms.sessions() as session, session.begin():
        session.execute(update(IngestEvent).where(IngestEvent.id == waited).values(updated_at=utcnow() - 5 * base))
    assert redispatch_events(dms) == 1
    assert status_of(dms, waited)[0] == EventStatus.DONE


def test_the_task_hooks_never_fail_an_event_when_the_database_is_away(dms, monkeypatch, tmp_path) -> None:
    """on_retry and on_failure run when something already broke; if they cannot reach the database the
    event stays open for the sweep instead of Celery failing it with a handler error."""
    row_id = accepted_without_dispatch(dms, upserted("A-1"), status=EventStatus.PROCESSING)
    monkeypatch.setenv("KI_DATABASE__URL", f"sqlite:///{tmp_path}")  # a directory: no database can be opened
    get_settings.cache_clear()
    reset_worker_context()
    error = OperationalError("SELECT 1", {}, Exception("the server closed the connection"))
    tasks.process_event.on_retry(error, "task-1", [row_id], {}, None)
    tasks.process_event.on_failure(error, "task-1", [row_id], {}, None)
    assert status_of(dms, row_id)[0] == EventStatus.PROCESSING
    dms.close()  # no longer the process-wide context, so the fixture's reset would not close it


def test_a_task_that_ran_out_of_retries_on_a_transient_error_is_marked_for_the_sweep(dms) -> None:
    row_id = accepted_without_dispatch(dms, upserted("A-1"), status=EventStatus.PROCESSING)
    error = OperationalError("SELECT 1", {}, Exception("the server closed the connection"))
    tasks.process_event.on_failure(error, "task-1", [row_id], {}, None)
    tasks.process_access_event.on_failure(RuntimeError("a bug"), "task-2", [row_id], {}, None)  # already finished
    with dms.sessions() as session:
        row = session.get(IngestEvent, row_id)
        assert (row.status, row.transient) == (EventStatus.FAILED, True)
    other = accepted_without_dispatch(dms, upserted("A-2"), status=EventStatus.PROCESSING)
    tasks.process_event.on_failure(RuntimeError("a bug"), "task-3", [other], {}, None)
    with dms.sessions() as session:
        row = session.get(IngestEvent, other)
        assert (row.status, row.transient, row.error) == (EventStatus.FAILED, False, "RuntimeError: a bug")
