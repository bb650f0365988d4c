"""The webhook ingress in embedded mode (`broker.eager`, SQLite, no broker): accepted means processed.

`ki serve` with no servers: the ingress hands the committed row to the very
same Celery tasks, run in-process (in the threadpool, never on the event
loop). An accepted document ends `done` and searchable; a failing one ends
parked or failed with its reason, and the webhook answer is still 202.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from celery._state import task_join_will_block
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from ki.commands.storage.store import prepare_store
from ki_core.config import Settings, load_settings
from ki_core.models import Chunk, DocumentVersion, EventStatus, IngestEvent, ProcessingState
from ki_core.models.base import utcnow
from ki_workers import ingress
from ki_workers import tasks  # noqa: F401 - like a long-lived process: the Celery app was built on another thread
from ki_workers.context import reset_worker_context, worker_context
from ki_workers.ingress import create_ingress_app
from ki_workers.sources.dms_events import sign
from tests.ki_workers.dms_support import SECRET, SOURCE, upserted


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch, sqlite_url: str, tmp_path) -> Iterator[Settings]:
    env = {
        "KI_DATABASE__URL": sqlite_url,
        "KI_BROKER__EAGER": "true",
        # Nothing listens here: a hand-over that publishes instead of running in-process fails at once.
        "KI_BROKER__URL": "redis://127.0.0.1:1/0",
        "KI_STATE_DIR": str(tmp_path / "state"),
        "KI_EMBEDDING__PROVIDER": "hashing",
        "KI_EMBEDDING__DIMENSIONS": "64",
        "KI_DMS__SOURCES__ACME__SECRET": SECRET,
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    prepare_store(settings)
    reset_worker_context()
    yield settings
    reset_worker_context()


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_ingress_app(settings)) as test_client:
        yield test_client


def post(client: TestClient, data: dict):
    body = json.dumps(data).encode()
    response = client.post(f"/webhooks/{SOURCE}", content=body, headers={"Content-Type": "application/json", **sign(SECRET, body)})
    assert client.app.state.ingress.handover.flush(60), "the hand-over thread runs the event after the answer"
    return response


def event_row(event_id: str) -> IngestEvent:
    with worker_context().sessions() as session:
        return session.scalar(select(IngestEvent).where(IngestEvent.event_id == event_id))


def test_an_accepted_document_is_processed_in_process_and_searchable(client, monkeypatch: pytest.MonkeyPatch) -> None:
    from ki_workers.sources import dms

    on_event_loop = []

    def apply_event(*args):
        on_event_loop.append(_running_loop() is not None)
        return real_apply_event(*args)

    real_apply_event = dms.apply_event
    monkeypatch.setattr(dms, "apply_event", apply_event)
    ctx = worker_context()
    for object_id in ("E-1", "E-2"):  # two requests: the threadpool may run them on different threads
        data = upserted(object_id)
        response = post(client, data)
        assert response.status_code == 202, response.text
        row = event_row(data["event_id"])
        assert (row.status, row.error) == (EventStatus.DONE, None)
    with ctx.sessions() as session:
        states = list(session.scalars(select(DocumentVersion.processing_state)))
        chunks = session.scalar(select(func.count()).select_from(Chunk))
    assert states == [ProcessingState.INDEXED, ProcessingState.INDEXED]
    index = ctx.index()
    index.refresh()
    assert chunks > 0 and index.count() == chunks
    assert on_event_loop == [False, False], "processed in the threadpool, never on the event loop"


def _running_loop():
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def test_a_failing_event_is_accepted_and_parked_with_its_reason(client) -> None:
    data = upserted("E-3")
    data["content"]["sha256"] = "0" * 64  # the bytes cannot be what the DMS announced
    response = post(client, data)
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "accepted"
    row = event_row(data["event_id"])
    assert row.status == EventStatus.PARKED
    assert row.error.startswith("ContentRejected: content sha256") and row.finished_at is not None


def test_a_processing_error_is_accepted_and_recorded_as_failed(client, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("the embedder fell over")

    monkeypatch.setattr("ki_workers.stages.embed_index.embed_versions", broken)
    data = upserted("E-4")
    response = post(client, data)
    assert response.status_code == 202, response.text
    row = event_row(data["event_id"])
    assert (row.status, row.error) == (EventStatus.FAILED, "RuntimeError: the embedder fell over")
    assert row.finished_at is not None


def test_a_transient_error_in_process_is_recorded_as_failed_with_its_cause(client, monkeypatch: pytest.MonkeyPatch) -> None:
    from ki_workers.sources import dms

    def unavailable(*args):
        raise dms.ContentUnavailable("content server answered 503")

    monkeypatch.setattr(dms, "apply_event", unavailable)
    data = upserted("E-5")
    assert post(client, data).status_code == 202
    row = event_row(data["event_id"])
    assert (row.status, row.error) == (EventStatus.FAILED, "ContentUnavailable: content server answered 503")


def test_webhooks_arriving_at_once_are_all_processed(client) -> None:
    """Concurrent requests hand over on several threads; the single embedded writer takes them in turn."""
    from concurrent.futures import ThreadPoolExecutor

    events = [upserted(f"C-{n}") for n in range(6)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        codes = list(pool.map(lambda data: post(client, data).status_code, events))
    assert codes == [202] * 6
    rows = [event_row(data["event_id"]) for data in events]
    assert [(row.status, row.error) for row in rows] == [(EventStatus.DONE, None)] * 6
    ctx = worker_context()
    with ctx.sessions() as session:
        chunks = session.scalar(select(func.count()).select_from(Chunk))
    index = ctx.index()
    index.refresh()
    assert chunks > 0 and index.count() == chunks
    # Overlapping eager runs would leave Celery's process-wide flag on, and every later
    # EagerResult.get() in this process (a folder sync) would raise.
    assert not task_join_will_block()


def test_an_event_a_crash_left_open_is_taken_up_when_the_server_starts_again(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No beat runs beside `ki serve` on the embedded default: the server sweeps itself at start."""
    data = upserted("R-1")
    with monkeypatch.context() as crashed:  # accepted and committed, then the process died before processing
        crashed.setattr(ingress, "dispatch_events", lambda *args, **kwargs: 0)
        with TestClient(create_ingress_app(settings)) as first:
            assert post(first, data).status_code == 202
    assert event_row(data["event_id"]).status == EventStatus.QUEUED, "written queued: the hand-over never ran"
    long_ago = utcnow() - timedelta(seconds=settings.sweep.event_redispatch_after_seconds + 60)
    with worker_context().sessions() as session, session.begin():
        session.execute(update(IngestEvent).values(received_at=long_ago, updated_at=long_ago))

    with TestClient(create_ingress_app(settings)):
        deadline = time.monotonic() + 30
        while event_row(data["event_id"]).status != EventStatus.DONE and time.monotonic() < deadline:
            time.sleep(0.1)
    row = event_row(data["event_id"])
    assert (row.status, row.error) == (EventStatus.DONE, None)
    with worker_context().sessions() as session:
        assert session.scalar(select(func.count()).select_from(DocumentVersion)) == 1
