"""Operational figures that live outside any one process: task latency in Redis, the rest read from SQL.

Workers record each task's run time into per-task histogram buckets in Redis
(one pipelined round-trip per task), so the ingress's `/metrics` shows every
worker's latency, not just its own. Queue depth is read from the broker,
event figures from `ingest_events`. No Prometheus or FastAPI import here:
workers load this module, the ingress turns its figures into metric families.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import redis
from celery.signals import task_postrun, task_prerun
from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from ki_core.config import Settings, get_settings
from ki_core.models import DocumentVersion, EventStatus, IngestEvent, ProcessingState
from ki_core.models.base import utcnow
from ki_workers.sources.dms_events import ACCESS_EVENT_TYPES

log = logging.getLogger(__name__)

KEY_PREFIX = "ki:metrics:"
TASK_KEY = KEY_PREFIX + "task_seconds:"
TASK_STATES_KEY = KEY_PREFIX + "task_states"
# Seconds; an access reindex takes milliseconds, an embedding batch on 2 cores minutes.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# kombu's Redis transport keeps one list per priority step: "name", "name\x06\x163", ...
PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")
LAG_WINDOW = timedelta(minutes=15)


_clients: dict[str, redis.Redis] = {}


def redis_client(settings: Settings) -> redis.Redis:
    """One client (and connection pool) per broker URL and process."""
    url = settings.broker.url
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    return _clients[url]


# ------------------------------------------------------------ worker side

_started: dict[str, float] = {}


@task_prerun.connect
def _task_started(task_id=None, task=None, **_) -> None:
    _started[task_id] = time.monotonic()


@task_postrun.connect
def _task_finished(task_id=None, task=None, state=None, **_) -> None:
    began = _started.pop(task_id, None)
    settings = get_settings()
    if began is None or settings.broker.eager or task is None:
        return
    try:
        record_task(redis_client(settings), task.name, time.monotonic() - began, state or "UNKNOWN")
    except redis.RedisError as exc:
        log.warning("task latency not recorded (%s: %s)", type(exc).__name__, exc)


def record_task(client: redis.Redis, name: str, seconds: float, state: str) -> None:
    bucket = next((str(b) for b in LATENCY_BUCKETS if seconds <= b), "+Inf")
    pipe = client.pipeline(transaction=False)
    pipe.hincrby(TASK_KEY + name, bucket, 1)
    pipe.hincrbyfloat(TASK_KEY + name, "sum", seconds)
    pipe.hincrby(TASK_STATES_KEY, f"{name}|{state}", 1)
    pipe.execute()


# ------------------------------------------------------------ scrape side


@dataclass(frozen=True)
class TaskLatency:
    task: str
    # cumulative (upper bound, count) pairs ending with +Inf, as Prometheus wants them
    buckets: list[tuple[str, int]]
    total: float


def task_latencies(client: redis.Redis) -> list[TaskLatency]:
    latencies = []
    for key in sorted(client.scan_iter(match=TASK_KEY + "*", count=100)):
        name = key.decode()[len(TASK_KEY) :]
        raw = {k.decode(): v.decode() for k, v in client.hgetall(key).items()}
        running, buckets = 0, []
        for bound in [*(str(b) for b in LATENCY_BUCKETS), "+Inf"]:
            running += int(raw.get(bound, 0))
            buckets.append((bound, running))
        latencies.append(TaskLatency(name, buckets, float(raw.get("sum", 0.0))))
    return latencies


def task_states(client: redis.Redis) -> dict[tuple[str, str], int]:
    states = {}
    for field, value in client.hgetall(TASK_STATES_KEY).items():
        name, _, state = field.decode().partition("|")
        states[(name, state)] = int(value)
    return states


def queue_depths(client: redis.Redis) -> dict[str, int]:
    # Imported here: ki_workers.app loads the task modules, and they load this one.
    from ki_workers.app import QUEUE_ACCESS, QUEUE_INDEX, QUEUE_INGEST, QUEUE_MAINTENANCE

    queues = (QUEUE_INGEST, QUEUE_INDEX, QUEUE_ACCESS, QUEUE_MAINTENANCE)
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        for suffix in PRIORITY_SUFFIXES:
            pipe.llen(queue + suffix)
    lengths = pipe.execute()
    step = len(PRIORITY_SUFFIXES)
    return {queue: sum(lengths[i * step : (i + 1) * step]) for i, queue in enumerate(queues)}


def event_counts(session: Session) -> dict[tuple[str, str], int]:
    """(type, status) -> rows: the events by type and outcome."""
    rows = session.execute(
        select(IngestEvent.event_type, IngestEvent.status, func.count()).group_by(IngestEvent.event_type, IngestEvent.status)
    )
    return {(event_type, str(status)): count for event_type, status, count in rows}


def oldest_open_event_age(session: Session, event_types: tuple[str, ...] | None = None) -> float:
    """Seconds since the oldest accepted-but-unfinished event arrived (0 when none)."""
    open_statuses = (EventStatus.RECEIVED, EventStatus.QUEUED, EventStatus.PROCESSING)
    stmt = select(func.min(IngestEvent.received_at)).where(IngestEvent.status.in_(open_statuses))
    if event_types:
        stmt = stmt.where(IngestEvent.event_type.in_(event_types))
    oldest = session.scalar(stmt)
    return max(0.0, (utcnow() - _aware(oldest)).total_seconds()) if oldest else 0.0


def access_lags(session: Session) -> list[float]:
    """Seconds from receipt to `done` (the change in force in SQL) of access events of the last window."""
    since = utcnow() - LAG_WINDOW
    rows = session.execute(
        select(IngestEvent.received_at, IngestEvent.finished_at).where(
            and_(
                IngestEvent.event_type.in_(ACCESS_EVENT_TYPES),
                IngestEvent.status == EventStatus.DONE,
                IngestEvent.finished_at >= since,
            )
        )
    )
    return sorted((_aware(done) - _aware(received)).total_seconds() for received, done in rows)


def stale_access_projections(session: Session) -> int:
    """Indexed versions whose index projection is older than their access_version (the index lags SQL)."""
    return session.scalar(
        select(func.count()).select_from(DocumentVersion).where(
            DocumentVersion.processing_state == ProcessingState.INDEXED,
            DocumentVersion.indexed_access_version.is_not(None),
            DocumentVersion.indexed_access_version != DocumentVersion.access_version,
        )
    ) or 0


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; they were written as UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
