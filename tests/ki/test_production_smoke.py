"""Production as the Procfile says: every process started by honcho, and every accepted event applied.

api, ingress, the four worker pools, beat and Flower run as separate processes
(tests/ki/production_stack.py) on PostgreSQL, a private Redis and a private
OpenSearch node. Signed webhooks go through the ingress, searches through the
HTTP API as two users; Flower's API and /metrics are read; a worker is killed
mid-burst, Redis restarted and OpenSearch stopped during bursts, and finally
everything is stopped with SIGTERM mid-burst and started again. At the end
every accepted event is `done` (none `failed`) and each user sees exactly what
the last ACLs and group memberships allow.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from ki_core.db import make_engine, session_factory
from ki_core.models import Document, EventStatus, IngestEvent
from ki_workers.app import TASK_ROUTES
from tests.ki.production_stack import (
    FLOWER_AUTH,
    KEYS,
    PrivateOpenSearch,
    PrivateRedis,
    Stack,
    free_port,
    procfile_processes,
    wait_for,
)
from tests.conftest import service_unavailable
from tests.ki_core.search.opensearch_cluster import distribution_home
from tests.ki_workers.dms_support import SECRET, acl_changed, content_server, envelope, upserted

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
USERS = ("alice", "bob")
DRAIN_TIMEOUT = 240.0
# A search while the index is away answers 503 within this many seconds (issue 42).
UNAVAILABLE_WITHIN = 2.0
_minutes = itertools.count(10)


def later() -> int:
    """Each event of the test happens after the one before (per object, the newest ACL wins)."""
    return next(_minutes)


class World:
    """What the DMS has told the index: each object's ACL and the partners group, to compute who sees what."""

    def __init__(self) -> None:
        self.acl: dict[str, list[str]] = {}
        self.partners: list[str] = []

    def upserted(self, object_id: str, principals: list[str]) -> dict:
        self.acl[object_id] = principals
        text = f"Mietvertrag {object_id}: die Heizung ist vom Vermieter instand zu halten."
        return upserted(object_id, text=text, acl=[{"principal": p} for p in principals], minutes=later())

    def acl_changed(self, object_id: str, principals: list[str]) -> dict:
        self.acl[object_id] = principals
        return acl_changed(object_id, [{"principal": p} for p in principals], minutes=later())

    def group_changed(self, members: list[str]) -> dict:
        self.partners = members
        return envelope("group.changed", later(), group="partners", members=members)

    def visible(self, user: str) -> set[str]:
        return {o for o, acl in self.acl.items() if user in acl or ("partners" in acl and user in self.partners)}


@pytest.fixture(scope="module")
def stack(committed_pg_url: str) -> Iterator[Stack]:
    # Not under pytest's tmp dir (mode 0700): the OpenSearch node's own user must be able to enter it.
    if distribution_home() is None and not os.environ.get("KI_TEST_OPENSEARCH_URL"):
        pytest.skip("no OpenSearch in this run (KI_TEST_OPENSEARCH_URL unset, no distribution unpacked)")
    if shutil.which("redis-server") is None or distribution_home() is None:
        service_unavailable("a redis-server binary and an unpacked OpenSearch distribution (make services)", "not found")
    workdir = Path(tempfile.mkdtemp(prefix="ki-production-"))
    os.chmod(workdir, 0o755)
    redis = PrivateRedis(workdir / "redis")
    search = PrivateOpenSearch(workdir / "opensearch")
    running = None
    try:
        redis.start()
        search.start()
        with content_server() as server:
            ports = {"api": free_port(), "ingress": free_port(), "flower": free_port()}
            env = {k: v for k, v in os.environ.items() if not k.startswith("KI_")}
            env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # the Procfile's commands
            env.update(production_env(committed_pg_url, redis.url, search.url, server.base_url, ports, workdir))
            running = Stack(workdir, env, ports, redis=redis, opensearch=search)
            running.start()
            yield running
    finally:
        if running is not None:
            running.kill()
        search.stop()
        redis.stop()
        kept = Path(tempfile.gettempdir()) / "ki-production-logs"  # the last run's logs, for a failure's reader
        shutil.rmtree(kept, ignore_errors=True)
        kept.mkdir()
        for log in workdir.glob("honcho-*.log"):
            shutil.copy(log, kept / log.name)
        shutil.rmtree(workdir, ignore_errors=True)


def production_env(database: str, broker: str, opensearch: str, content: str, ports: dict[str, int], workdir: Path) -> dict:
    keys = {user: {"sha256": hashlib.sha256(key.encode()).hexdigest(), "principals": [user]} for user, key in KEYS.items()}
    return {
        "KI_DATABASE__URL": database,
        "KI_BROKER__URL": broker,
        "KI_BROKER__EAGER": "false",
        "KI_BROKER__VISIBILITY_TIMEOUT_SECONDS": "30",
        "KI_SEARCH__BACKEND": "opensearch",
        "KI_SEARCH__OPENSEARCH__HOSTS": json.dumps([opensearch]),
        "KI_SEARCH__OPENSEARCH__NUMBER_OF_REPLICAS": "0",
        "KI_EMBEDDING__PROVIDER": "hashing",
        "KI_EMBEDDING__DIMENSIONS": "64",
        "KI_STATE_DIR": str(workdir / "state"),
        "KI_DMS__SOURCES__ACME__SECRET": SECRET,
        "KI_DMS__SOURCES__ACME__CONTENT_BASE_URL": content,
        "KI_SECURITY__API_KEYS": json.dumps(keys),
        "KI_SWEEP__INTERVAL_SECONDS": "2",
        "KI_SWEEP__EVENT_REDISPATCH_AFTER_SECONDS": "3",
        "KI_SWEEP__STUCK_VERSION_AFTER_SECONDS": "10",
        "KI_FLOWER__BASIC_AUTH": ":".join(FLOWER_AUTH),
        "KI_FLOWER__PORT": str(ports["flower"]),
        "API_PORT": str(ports["api"]), "API_HOST": "127.0.0.1",
        "INGRESS_PORT": str(ports["ingress"]), "INGRESS_HOST": "127.0.0.1",
        "BEAT_SCHEDULE_FILE": str(workdir / "celerybeat-schedule"),
    }  # fmt: skip


# ------------------------------------------------------------------ checks


def event_statuses(url: str) -> dict[str, tuple[EventStatus, str | None]]:
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session:
            return {e: (s, err) for e, s, err in session.execute(select(IngestEvent.event_id, IngestEvent.status, IngestEvent.error))}
    finally:
        engine.dispose()


def all_done(url: str, sent: list[dict], stack: Stack) -> None:
    """Every accepted event ends `done`; a `failed` one fails the test at once (none may end so)."""

    def check() -> bool:
        rows = event_statuses(url)
        failed = {e: err for e, (s, err) in rows.items() if s == EventStatus.FAILED}
        assert not failed, f"events ended failed: {failed}"
        return all(rows.get(d["event_id"], (None,))[0] == EventStatus.DONE for d in sent)

    try:
        wait_for(check, DRAIN_TIMEOUT, "every accepted event done", interval=1.0)
    except AssertionError:
        rows = event_statuses(url)
        open_ = {d["event_id"]: rows.get(d["event_id"]) for d in sent if rows.get(d["event_id"], (None,))[0] != EventStatus.DONE}
        raise AssertionError(f"not done: {open_}\n{stack.logs()}") from None


def document_keys(url: str) -> dict[str, str]:
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session:
            return dict(session.execute(select(Document.id, Document.key)).all())
    finally:
        engine.dispose()


def seen_by(stack: Stack, url: str, user: str) -> set[str] | None:
    """The objects `user`'s search shows; None on a 503 (a search slower than
    search.opensearch.query_timeout_seconds on CI's busy cores), which a client retries."""
    response = stack.search(user)
    if response.status_code == 503:
        return None
    assert response.status_code == 200, f"{response.text}\n{stack.logs()}"
    keys = document_keys(url)
    return {keys[hit["document_id"]] for hit in response.json()["hits"]}


def the_wall_holds(stack: Stack, url: str, world: World) -> None:
    """Each user's search shows exactly the objects the last ACLs and memberships allow (SQL decides)."""
    for user in USERS:
        answered = wait_for(lambda u=user: (seen := seen_by(stack, url, u)) is not None and [seen], 30, f"{user}'s search")
        assert answered[0] == world.visible(user), user


def metric(text: str, name: str, **labels: str) -> float:
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def succeeded_per_queue(stack: Stack) -> dict[str, int]:
    counts: dict[str, int] = {}
    for task in stack.flower_tasks().values():
        if task.get("state") == "SUCCESS" and task.get("name") in TASK_ROUTES:
            queue = TASK_ROUTES[task["name"]]["queue"]
            counts[queue] = counts.get(queue, 0) + 1
    return counts


def pool_child(stack: Stack, name: str) -> int:
    """A prefork child of the Procfile process `name`: the process that runs its tasks.

    honcho's pid may be the shell that runs the line, so the pool's processes are the leaves
    of its process tree (killing the worker's main process would make honcho stop everything)."""

    def children(pid: int) -> list[int]:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]

    leaves, todo = [], [stack.pids()[name]]
    while todo:
        pid = todo.pop()
        below = children(pid)
        todo.extend(below)
        if not below and pid != stack.pids()[name]:
            leaves.append(pid)
    assert leaves, f"{name} has no pool process"
    return leaves[0]


def burst(world: World, n: int, prefix: str) -> list[dict]:
    """New documents, ACL changes of known ones and a group change, interleaved."""
    events: list[dict] = []
    known = sorted(world.acl)
    for i in range(n):
        if i % 3 == 0 or not known:
            events.append(world.upserted(f"{prefix}-{i}", [USERS[i % 2]] if i % 4 else ["partners"]))
        elif i % 7 == 0:
            events.append(world.group_changed(["alice"] if "bob" in world.partners else ["bob"]))
        else:
            events.append(world.acl_changed(known[i % len(known)], [USERS[(i // 2) % 2]]))
    return events


# ------------------------------------------------------------------ the test


def test_every_procfile_process_runs_and_no_accepted_event_is_lost(stack: Stack, committed_pg_url: str) -> None:
    url, world, sent = committed_pg_url, World(), []
    assert {name for name in stack.pids()} == set(procfile_processes())
    metrics_before = stack.metrics()

    # Documents, a group and ACL changes through the ingress; then the wall between the two users.
    first = [world.upserted(f"DOC-{n}", ["alice"] if n < 3 else ["partners"]) for n in range(6)]
    first += [world.group_changed(["bob"]), world.acl_changed("DOC-0", ["bob"]), world.acl_changed("DOC-3", ["alice"])]
    for data in first:
        assert stack.webhook(data) == 202
    sent += first
    all_done(url, sent, stack)
    wait_for(lambda: seen_by(stack, url, "alice") == world.visible("alice"), 30, "alice's view settles")
    the_wall_holds(stack, url, world)

    # Flower sees the tasks succeed on every queue; /metrics counts moved.
    per_queue = wait_for(lambda: (c := succeeded_per_queue(stack)) and len(c) == 4 and c, 60, "tasks on each queue")
    metrics_after = stack.metrics()
    assert metric(metrics_after, "ki_webhook_requests_total", outcome="202") >= \
        metric(metrics_before, "ki_webhook_requests_total", outcome="202") + len(first)
    assert metric(metrics_after, "ki_events", status="done") >= len(first)
    assert metric(metrics_after, "ki_task_runs_total", task="ki.process_access_event", state="SUCCESS") > \
        metric(metrics_before, "ki_task_runs_total", task="ki.process_access_event", state="SUCCESS")

    # A worker's pool process killed with SIGKILL in the middle of a burst.
    events = burst(world, 24, "KILL")
    for n, data in enumerate(events):
        if n == len(events) // 2:
            os.kill(pool_child(stack, "ingest-worker"), signal.SIGKILL)
        stack.deliver(data)
    sent += events
    all_done(url, sent, stack)

    # Redis restarted (its data gone) during a burst.
    events = burst(world, 24, "REDIS")
    for n, data in enumerate(events):
        if n == len(events) // 2:
            stack.redis.restart()
        stack.deliver(data)
    sent += events
    all_done(url, sent, stack)

    stack.wait_ready()  # production.sh starts every process again if one exited on the restart

    # OpenSearch stopped during a burst: searches answer 503 quickly; the events wait and are applied.
    events = burst(world, 18, "SEARCH")
    stack.opensearch.stop()
    unavailable = []
    for n, data in enumerate(events):
        stack.deliver(data)
        if n % 3 == 0:
            started = time.monotonic()
            try:
                status = stack.search(USERS[n % 2], timeout=10).status_code
            except httpx.TimeoutException:
                status = 0  # no answer at all: the assertion below names it with the logs
            unavailable.append((status, round(time.monotonic() - started, 3)))
    sent += events
    assert all(status == 503 for status, _ in unavailable), f"{unavailable}\n{stack.logs(20000)}"
    assert max(seconds for _, seconds in unavailable) < UNAVAILABLE_WITHIN, f"{unavailable}\n{stack.logs(20000)}"
    stack.opensearch.start()
    all_done(url, sent, stack)

    # SIGTERM to everything in the middle of a burst; started again, nothing is lost.
    events = burst(world, 18, "TERM")
    for data in events[:9]:
        stack.deliver(data)
    stopped_in = stack.terminate()
    stack.start()
    for data in events[9:]:
        stack.deliver(data)
    sent += events
    all_done(url, sent, stack)

    wait_for(lambda: all(seen_by(stack, url, u) == world.visible(u) for u in USERS), 30, "views settle")
    the_wall_holds(stack, url, world)
    rows = event_statuses(url)
    assert {s for s, _ in rows.values()} == {EventStatus.DONE}
    print(f"\nproduction smoke: {len(sent)} events done, succeeded per queue (first phase) {per_queue}, "
          f"searches while OpenSearch was stopped {unavailable}, SIGTERM stop took {stopped_in:.1f} s, "
          f"Redis restarts {stack.redis.restarts}")


def test_flower_refuses_a_request_without_credentials(stack: Stack) -> None:
    assert httpx.get(f"{stack.flower}/api/workers", timeout=10).status_code == 401
    assert httpx.get(f"{stack.flower}/api/workers", auth=("ops", "wrong"), timeout=10).status_code == 401
    assert httpx.get(f"{stack.flower}/api/workers", auth=FLOWER_AUTH, timeout=10).status_code == 200
