"""Retention of the event inbox, on SQLite and PostgreSQL: processed events go after the window, nothing else does,
and a deleted event cannot get an old change applied again."""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from ki_core.config import DmsSettings
from ki_core.models import EventStatus, IngestEvent, SourceWatermark
from ki_core.models.base import utcnow
from ki_query.scope import AccessService
from ki_workers.event_inbox import FINISHED_STATUSES, dms_source
from ki_workers.event_retention import RetentionTooShort, prunable_before, prune_processed_events
from ki_workers.ingress import create_ingress_app
from ki_workers.sources.dms_events import sign
from ki_workers.sweep import prune_events, run_sweep
from tests.ki_workers.dms_support import SECRET, SOURCE, acl_changed, upserted
from tests.ki_workers.test_dms_events import sees, submit, version_of
from tests.ki_workers.test_sweep import dms  # noqa: F401 - the fixture: the worker context with source `acme`

RETENTION_DAYS = 30  # the default of sweep.processed_event_retention_days


def stored(ctx, status: EventStatus, days_ago: float, n: int = 1) -> list[str]:
    """`n` event rows in `status`, received (and, if finished, finished) `days_ago`."""
    moment = utcnow() - timedelta(days=days_ago)
    with ctx.sessions() as session, session.begin():
        source = dms_source(session, SOURCE, ctx.settings)
        rows = []
        for _ in range(n):
            payload = upserted("A-1")
            rows.append(IngestEvent(
                source_id=source.id, event_id=payload["event_id"], event_type=payload["type"], payload=payload,
                status=status, received_at=moment, updated_at=moment,
                finished_at=moment if status in FINISHED_STATUSES else None,
            ))
        session.add_all(rows)
        session.flush()
        return [row.id for row in rows]


def age(ctx, days: float) -> None:
    """Every row as if received and finished `days` ago."""
    moment = utcnow() - timedelta(days=days)
    with ctx.sessions() as session, session.begin():
        session.execute(update(IngestEvent).values(received_at=moment, updated_at=moment, finished_at=moment))


def remaining(ctx) -> set[str]:
    with ctx.sessions() as session:
        return set(session.scalars(select(IngestEvent.id)))


def watermarks(ctx) -> list[tuple]:
    with ctx.sessions() as session:
        return list(session.execute(
            select(SourceWatermark.subject, SourceWatermark.occurred_at, SourceWatermark.event_id).order_by(SourceWatermark.subject)
        ))


def test_processed_events_past_the_window_go_and_recent_open_failed_or_parked_ones_stay(dms) -> None:
    old_processed = stored(dms, EventStatus.DONE, RETENTION_DAYS + 1, n=2)
    recent_processed = stored(dms, EventStatus.DONE, RETENTION_DAYS - 1)
    waiting_for_someone = [
        row_id
        for status in (EventStatus.RECEIVED, EventStatus.QUEUED, EventStatus.PROCESSING, EventStatus.FAILED, EventStatus.PARKED)
        for row_id in stored(dms, status, days_ago=400)
    ]
    assert prune_events(dms) == 2
    assert remaining(dms) == set(recent_processed) | set(waiting_for_someone)
    assert not remaining(dms) & set(old_processed)
    assert prune_events(dms) == 0, "nothing left past the window"


def test_the_sweep_reports_and_logs_how_many_events_it_deleted(dms, caplog: pytest.LogCaptureFixture) -> None:
    stored(dms, EventStatus.DONE, RETENTION_DAYS + 5, n=3)
    parked = stored(dms, EventStatus.PARKED, RETENTION_DAYS + 5)
    with caplog.at_level(logging.INFO, logger="ki_workers.sweep"):
        report = run_sweep(dms)
    assert report["events_pruned"] == 3
    assert remaining(dms) == set(parked)
    assert "deleted 3 processed event(s) finished more than 30 days ago" in caplog.text


def test_rows_go_in_batches_oldest_first_and_a_bounded_run_leaves_the_rest_for_the_next(dms) -> None:
    by_age = {days: stored(dms, EventStatus.DONE, days)[0] for days in range(40, 47)}
    cutoff = prunable_before(dms.settings.dms, timedelta(days=RETENTION_DAYS))
    assert prune_processed_events(dms.sessions, cutoff, batch_size=3, max_batches=2) == 6
    assert remaining(dms) == {by_age[40]}, "the youngest is left after two batches of three"
    more = stored(dms, EventStatus.DONE, 50, n=2)
    assert prune_processed_events(dms.sessions, cutoff, batch_size=3) == 3
    assert not remaining(dms) & ({by_age[40], *more})


def test_a_retention_inside_the_replay_window_is_refused() -> None:
    dms = DmsSettings(signature_tolerance_seconds=12 * 3600)
    with pytest.raises(RetentionTooShort, match="dms.signature_tolerance_seconds"):
        prunable_before(dms, timedelta(days=1))
    assert prunable_before(dms, timedelta(days=1, seconds=1)) < utcnow() - timedelta(days=1)


def test_a_captured_request_of_a_deleted_event_is_refused_by_its_signed_timestamp(dms) -> None:
    """The row is aged instead of waiting a month; the captured request was signed when the row was received."""
    data = upserted("A-1")
    assert submit(dms, data).status == EventStatus.DONE
    age(dms, RETENTION_DAYS + 1)
    assert prune_events(dms) == 1
    body = json.dumps(data).encode()
    signed_then = int(time.time() - timedelta(days=RETENTION_DAYS + 1).total_seconds())
    with TestClient(create_ingress_app(dms.settings)) as client:
        replay = client.post(
            f"/webhooks/{SOURCE}", content=body,
            headers={"Content-Type": "application/json", **sign(SECRET, body, signed_then)},
        )
    assert replay.status_code == 401 and "outside the 300 s window" in replay.json()["detail"]
    with dms.sessions() as session:
        assert session.scalar(select(IngestEvent.id).where(IngestEvent.event_id == data["event_id"])) is None


def test_the_dms_sending_a_deleted_event_again_cannot_undo_a_newer_change(dms) -> None:
    """Accepted as new (its row is gone), but the watermarks, which are never pruned, still hold."""
    first = submit(dms, upserted("A-1", acl=[{"principal": "alice"}], minutes=0))
    grant = submit(dms, acl_changed("A-1", [{"principal": "alice"}, {"principal": "bob"}], minutes=5))
    submit(dms, acl_changed("A-1", [{"principal": "alice"}], minutes=10))
    version = version_of(dms, "A-1")
    marks = watermarks(dms)
    age(dms, RETENTION_DAYS + 1)
    assert prune_events(dms) == 3
    assert watermarks(dms) == marks

    grant_again = submit(dms, grant.payload)
    upsert_again = submit(dms, first.payload)

    assert grant_again.id != grant.id, "no row to call it a duplicate: it is accepted and run"
    assert grant_again.status == EventStatus.DONE and grant_again.error.startswith("superseded")
    assert upsert_again.status == EventStatus.DONE
    assert version_of(dms, "A-1").id == version.id, "the same bytes again: no new version"
    access = AccessService(dms.sessions, dms.settings)
    assert not sees(access, "bob", version_of(dms, "A-1")), "the newer revocation stands"
    assert sees(access, "alice", version_of(dms, "A-1"))
