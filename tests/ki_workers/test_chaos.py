"""Chaos: a burst of events while PostgreSQL drops every connection and Redis loses everything.

A REAL Celery worker (subprocess) and the in-process ingress. During the burst a
thread terminates every connection to the database (pg_terminate_backend, what
a restart does to clients) every 0.4 s for a few seconds, and halfway Redis
is "restarted": all clients disconnected and its data gone (our Redis keeps
no persistence, so queued messages vanish). The test acts as the DMS (it
re-sends what was not acknowledged) and as beat (it sends the sweep every
second). Afterwards every accepted event is done exactly once, every object has
one version, and each principal sees exactly what the last ACL of each object
says. Bounded: it fails after DRAIN_TIMEOUT rather than hang.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
from sqlalchemy import create_engine, func, select, text

from ki_core.config import load_settings
from ki_core.db import make_engine, session_factory
from ki_core.models import Document, DocumentVersion, EventStatus, IngestEvent
from ki_query.scope import AccessService
from ki_workers.app import app_for
from tests.ki_workers.dms_support import acl_changed, upserted
from tests.ki_workers.test_ingress import post
from tests.ki_workers.test_worker_crash import env, ingress, server, worker  # noqa: F401 - fixtures

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
OBJECTS = [f"CHAOS-{n}" for n in range(8)]
PRINCIPALS = ["alice", "bob", "carol", "dave"]
ACL_EVENTS = 40
DB_CHAOS_SECONDS = 6.0
DRAIN_TIMEOUT = 150.0


def burst(rng: random.Random) -> list[dict]:
    """Upserts, then ACL changes in random order; occurred_at decides which ACL is the last."""
    events = [upserted(o, text=f"Mietvertrag {o}: die Kaution beträgt drei Monatsmieten.", acl=[{"principal": "alice"}])
              for o in OBJECTS]
    changes = [acl_changed(rng.choice(OBJECTS), [{"principal": p} for p in rng.sample(PRINCIPALS, rng.randint(0, 3))],
                           minutes=1 + n) for n in range(ACL_EVENTS)]  # fmt: skip
    rng.shuffle(changes)
    return events + changes


def expected_visible(events: list[dict]) -> dict[str, set[str]]:
    latest: dict[str, dict] = {}
    for event in events:
        if latest.get(event["object_id"]) is None or event["occurred_at"] > latest[event["object_id"]]["occurred_at"]:
            latest[event["object_id"]] = event
    return {p: {o for o, e in latest.items() if any(a["principal"] == p for a in e["acl"])} for p in PRINCIPALS}


def terminate_connections(url: str, stop: threading.Event, until: float, counts: dict) -> None:
    admin = create_engine(url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    try:
        while not stop.is_set() and time.monotonic() < until:
            try:
                with admin.connect() as conn:
                    killed = conn.execute(text(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()")).scalar()
                counts["terminated"] += killed or 0
            except Exception:  # noqa: BLE001 - the chaos thread itself may lose its connection
                pass
            stop.wait(0.4)
    finally:
        admin.dispose()


def restart_redis(redis_client, counts: dict) -> None:
    """What `systemctl restart redis-server` does without persistence: clients cut off, data gone."""
    counts["redis_restarts"] += 1
    redis_client.flushdb()
    database = redis_client.connection_pool.connection_kwargs.get("db", 0)
    for client in redis_client.client_list():  # only this test database's clients: the server may be shared
        if int(client.get("db", -1)) == database and client.get("name") != "chaos":
            redis_client.client_kill_filter(_id=client["id"], skipme=True)


def deliver(ingress, data: dict, counts: dict) -> None:
    """Send until acknowledged, as a DMS retries a 5xx or a dropped request."""
    for _ in range(50):
        response = post(ingress, data)
        if response.status_code in (200, 202):
            return
        assert response.status_code == 503, response.text
        counts["retried_503"] += 1
        time.sleep(0.2)
    pytest.fail(f"event {data['event_id']} never accepted")


def event_rows(url: str) -> list[tuple[str, EventStatus, int]]:
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session:
            return list(session.execute(select(IngestEvent.event_id, IngestEvent.status, IngestEvent.attempts)))
    finally:
        engine.dispose()


def test_a_burst_through_database_and_broker_outages_ends_applied_exactly_once(
    ingress, worker, redis_client, committed_pg_url  # noqa: F811
) -> None:
    rng = random.Random(int(time.time()))
    events = burst(rng)
    counts = {"terminated": 0, "redis_restarts": 0, "retried_503": 0}
    worker.start()
    stop = threading.Event()
    chaos = threading.Thread(target=terminate_connections,
                             args=(committed_pg_url, stop, time.monotonic() + DB_CHAOS_SECONDS, counts))
    chaos.start()
    try:
        for n, data in enumerate(events):
            if n == len(events) // 2:
                restart_redis(redis_client, counts)
            deliver(ingress, data, counts)
            time.sleep(0.05)
        chaos.join()
    finally:
        stop.set()
        chaos.join()
    sweep_app = app_for(load_settings())
    deadline = time.monotonic() + DRAIN_TIMEOUT
    while time.monotonic() < deadline:
        rows = event_rows(committed_pg_url)
        if len(rows) == len(events) and all(status == EventStatus.DONE for _, status, _ in rows):
            break
        try:
            sweep_app.send_task("ki.sweep")  # what beat sends every sweep.interval_seconds
        except Exception:  # noqa: BLE001 - the broker reconnects on the next round
            pass
        time.sleep(1.0)
    rows = event_rows(committed_pg_url)
    statuses = {status for _, status, _ in rows}
    assert statuses == {EventStatus.DONE}, (counts, sorted((s, a) for _, s, a in rows if s != EventStatus.DONE),
                                           worker.logs())
    assert sorted(e for e, _, _ in rows) == sorted(d["event_id"] for d in events), "one row per accepted event"
    engine = make_engine(committed_pg_url)
    try:
        sessions = session_factory(engine)
        with sessions() as session:
            versions = dict(session.execute(
                select(Document.key, func.count(DocumentVersion.id))
                .join(DocumentVersion, DocumentVersion.document_id == Document.id).group_by(Document.key)).all())
            keys = dict(session.execute(select(Document.id, Document.key)).all())
        assert versions == {o: 1 for o in OBJECTS}, "each upsert applied once"
        access = AccessService(sessions, load_settings())
        seen = {p: {keys[d] for d in access.visible_document_ids([p])} for p in PRINCIPALS}
    finally:
        engine.dispose()
    assert seen == expected_visible(events)
    attempts = sorted(a for _, _, a in rows)
    print(f"\nchaos: {len(rows)} events done, connections terminated {counts['terminated']}, "
          f"Redis restarts {counts['redis_restarts']}, 503s re-sent {counts['retried_503']}, "
          f"events run more than once {sum(1 for a in attempts if a > 1)}, max attempts {attempts[-1]}")
