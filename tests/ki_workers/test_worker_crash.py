"""Nothing accepted is lost: REAL Celery workers on Redis and PostgreSQL, a purged queue, a SIGKILL.

The ingress runs in-process (the real ASGI app); workers are subprocesses
(`celery worker --pool=solo`), so killing one kills the task mid-flight.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from ki_core.config import load_settings
from ki_core.db import make_engine, session_factory
from ki_core.models import Chunk, Document, DocumentVersion, EventStatus, IngestEvent, ProcessingState, SourceObject
from ki_core.search.index import open_index
from ki_core.search.types import ScopeFilter
from ki_workers.app import app_for
from ki_workers.ingress import create_ingress_app
from tests.ki_workers.dms_support import SECRET, TEXT, content_server, upserted
from tests.ki_workers.test_ingress import post

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
QUEUES = "ki.ingest,ki.index,ki.access,ki.maintenance"


class Worker:
    """A worker subprocess that can be started again after it was killed."""

    def __init__(self, env: dict[str, str], workdir: Path, queues: str = QUEUES, name: str = "worker"):
        self.env, self.workdir, self.queues, self.name = env, workdir, queues, name
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = open(self.workdir / f"{self.name}-{self.starts}.log", "w")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "ki_workers.app", "worker", "--pool=solo", f"--queues={self.queues}",
             f"--hostname={self.name}@%h",
             "--loglevel=INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            env=self.env, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def logs(self) -> str:
        return "\n".join(p.read_text()[-3000:] for p in sorted(self.workdir.glob(f"{self.name}-*.log")))


@pytest.fixture
def server():
    with content_server() as running:
        yield running


@pytest.fixture
def env(committed_pg_url: str, redis_url: str, redis_client, server, tmp_path: Path, monkeypatch) -> dict[str, str]:
    """One configuration for the ingress (this process) and the workers (subprocesses)."""
    values = {
        "KI_DATABASE__URL": committed_pg_url,
        "KI_BROKER__URL": redis_url,
        "KI_BROKER__EAGER": "false",
        "KI_SWEEP__EVENT_REDISPATCH_AFTER_SECONDS": "1",
        "KI_STATE_DIR": str(tmp_path / "state"),
        "KI_EMBEDDING__PROVIDER": "hashing",
        "KI_EMBEDDING__DIMENSIONS": "64",
        "KI_DMS__SOURCES__ACME__SECRET": SECRET,
        "KI_DMS__SOURCES__ACME__CONTENT_BASE_URL": server.base_url,
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return {**{k: v for k, v in os.environ.items() if not k.startswith("KI_")}, **values}


@pytest.fixture
def worker(env, tmp_path: Path) -> Iterator[Worker]:
    running = Worker(env, tmp_path)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def ingress(env) -> Iterator[TestClient]:
    with TestClient(create_ingress_app(load_settings())) as client:
        yield client


def event_state(url: str, event_id: str) -> tuple[EventStatus, int]:
    with _session(url) as session:
        row = session.scalar(select(IngestEvent).where(IngestEvent.event_id == event_id))
        return row.status, row.attempts


def object_versions(url: str, object_id: str) -> list[DocumentVersion]:
    with _session(url) as session:
        return list(
            session.scalars(
                select(DocumentVersion)
                .join(Document, Document.id == DocumentVersion.document_id)
                .where(Document.key == object_id)
            )
        )


def wait_until(condition, worker: Worker, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    pytest.fail(f"condition not met in {timeout} s\n{worker.logs()}")


def indexed(url: str, object_id: str) -> bool:
    versions = object_versions(url, object_id)
    return bool(versions) and all(v.processing_state == ProcessingState.INDEXED for v in versions)


def _session(url: str):
    engine = make_engine(url)
    factory = session_factory(engine)

    class _Closing:
        def __enter__(self):
            self.session = factory()
            return self.session

        def __exit__(self, *exc):
            self.session.close()
            engine.dispose()

    return _Closing()


def test_an_event_whose_message_was_purged_is_completed_by_the_sweep(ingress, worker, redis_client, committed_pg_url) -> None:
    data = upserted("LOST-1")
    assert post(ingress, data).status_code == 202
    assert redis_client.delete("ki.ingest") == 1, "the message is lost before any worker saw it"
    worker.start()
    time.sleep(2)
    assert event_state(committed_pg_url, data["event_id"]) == (EventStatus.QUEUED, 0)
    app_for(load_settings()).send_task("ki.sweep")  # what beat sends every sweep.interval_seconds
    wait_until(lambda: indexed(committed_pg_url, "LOST-1"), worker)
    assert event_state(committed_pg_url, data["event_id"]) == (EventStatus.DONE, 1)


def test_a_worker_killed_mid_task_loses_nothing_and_duplicates_nothing(
    ingress, worker, server, committed_pg_url, env, tmp_path
) -> None:
    body = (TEXT + " Abgerufen vom DMS.").encode()
    server.files["crash.txt"] = body
    server.gate.clear()  # the content fetch hangs until the test lets it go
    data = upserted("CRASH-1", content={"url": "crash.txt", "sha256": hashlib.sha256(body).hexdigest()})
    assert post(ingress, data).status_code == 202
    worker.start()
    wait_until(lambda: "crash.txt" in server.requests, worker)
    assert event_state(committed_pg_url, data["event_id"]) == (EventStatus.PROCESSING, 1)
    worker.kill()
    server.gate.set()
    worker.start()
    # The killed worker's message stays unacknowledged; the sweep (beat) dispatches the event again.
    # Its lease died with the worker's database connection, so the copy may run at once.
    time.sleep(1.5)
    app_for(load_settings()).send_task("ki.sweep")
    wait_until(lambda: event_state(committed_pg_url, data["event_id"])[0] == EventStatus.DONE, worker)
    wait_until(lambda: indexed(committed_pg_url, "CRASH-1"), worker)
    assert event_state(committed_pg_url, data["event_id"]) == (EventStatus.DONE, 2)
    [version] = object_versions(committed_pg_url, "CRASH-1")
    with _session(committed_pg_url) as session:
        chunks = session.scalar(select(func.count()).select_from(Chunk).where(Chunk.version_id == version.id))
        assert session.scalar(select(func.count()).select_from(SourceObject).where(SourceObject.external_id == "CRASH-1")) == 1
    worker.stop()  # the embedded index has one writer; read it after the worker let go
    index = open_index(load_settings(), read_only=True)
    try:
        index.ensure()
        assert index.count(ScopeFilter(document_ids=frozenset([version.document_id]))) == chunks > 0
    finally:
        index.close()
    assert server.requests.count("crash.txt") == 2
