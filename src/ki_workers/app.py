"""The Celery application, configured from Settings; task names and queues are routed here only.

Embedded mode (`broker.eager`) runs the very same tasks in-process, so the
default install needs no broker.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery, current_app
from kombu import Queue

from ki_core.config import Settings, get_settings

# One queue per kind of work, so a flood of uploads cannot starve ACL changes.
QUEUE_INGEST = "ki.ingest"
QUEUE_INDEX = "ki.index"
QUEUE_ACCESS = "ki.access"
QUEUE_MAINTENANCE = "ki.maintenance"

# The pipeline's task names. Services that start work (folder sync, the sweep) are called by the
# tasks, so they start a task by its name (start_task) instead of importing the tasks module back.
INGEST = "ki.ingest"
INGEST_MANY = "ki.ingest_many"
EXTRACT_METADATA = "ki.extract_metadata"
EXTRACT_METADATA_MANY = "ki.extract_metadata_many"
CHUNK_EMBED = "ki.chunk_embed"
CHUNK_EMBED_MANY = "ki.chunk_embed_many"
REINDEX_ACCESS = "ki.reindex_access"
WRITE_INDEX = "ki.write_index"
SWEEP = "ki.sweep"
PROCESS_EVENT = "ki.process_event"
PROCESS_ACCESS_EVENT = "ki.process_access_event"
RECONCILE = "ki.reconcile"
TASK_NAMES = (INGEST, INGEST_MANY, EXTRACT_METADATA, EXTRACT_METADATA_MANY, CHUNK_EMBED, CHUNK_EMBED_MANY,
              REINDEX_ACCESS, WRITE_INDEX, SWEEP, PROCESS_EVENT, PROCESS_ACCESS_EVENT, RECONCILE)

TASK_ROUTES = {
    INGEST: {"queue": QUEUE_INGEST},
    INGEST_MANY: {"queue": QUEUE_INGEST},
    PROCESS_EVENT: {"queue": QUEUE_INGEST},
    PROCESS_ACCESS_EVENT: {"queue": QUEUE_ACCESS},
    EXTRACT_METADATA: {"queue": QUEUE_INGEST},
    EXTRACT_METADATA_MANY: {"queue": QUEUE_INGEST},
    CHUNK_EMBED: {"queue": QUEUE_INDEX},
    CHUNK_EMBED_MANY: {"queue": QUEUE_INDEX},
    REINDEX_ACCESS: {"queue": QUEUE_ACCESS},
    WRITE_INDEX: {"queue": QUEUE_ACCESS},
    SWEEP: {"queue": QUEUE_MAINTENANCE},
    RECONCILE: {"queue": QUEUE_MAINTENANCE},
}

# Declared retry policy for transient errors (broker, database, index, gateway).
RETRY_POLICY = {
    "retry_backoff": 2,
    "retry_backoff_max": 300,
    "retry_jitter": True,
    "max_retries": 8,
}
# An embedding batch on 2 CPU cores can take minutes; a hung converter must not hold a worker forever.
SOFT_TIME_LIMIT_SECONDS = 600
TIME_LIMIT_SECONDS = 660


def celery_config(settings: Settings) -> dict:
    return {
        "broker_url": settings.broker.url,
        "result_backend": None,
        "task_ignore_result": True,
        "task_always_eager": settings.broker.eager,
        "task_eager_propagates": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": True,
        "worker_prefetch_multiplier": 1,
        "task_soft_time_limit": SOFT_TIME_LIMIT_SECONDS,
        "task_time_limit": TIME_LIMIT_SECONDS,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_default_queue": QUEUE_INGEST,
        "task_queues": [Queue(q) for q in (QUEUE_INGEST, QUEUE_INDEX, QUEUE_ACCESS, QUEUE_MAINTENANCE)],
        "task_routes": task_routes(settings),
        "broker_transport_options": {"visibility_timeout": settings.broker.visibility_timeout_seconds},
        "broker_connection_retry_on_startup": True,
        "worker_hijack_root_logger": False,
        "enable_utc": True,
        "beat_schedule": beat_schedule(settings),
    }


def index_writer_is_access_worker(settings: Settings) -> bool:
    """The embedded index has one writer process (a flock). With real workers that is the access
    worker: the embed worker only embeds and stores vectors in SQL, then sends `ki.write_index`
    (a bulk write from the stored rows, milliseconds) to the access queue, and `ki.reconcile`
    goes there too. So an ACL change waits at most behind a short write, never behind an
    embedding batch. OpenSearch takes writes from every process; in-process (eager) runs are one."""
    return settings.search.backend == "embedded" and not settings.broker.eager


def task_routes(settings: Settings) -> dict:
    if not index_writer_is_access_worker(settings):
        return TASK_ROUTES
    return {**TASK_ROUTES, RECONCILE: {"queue": QUEUE_ACCESS}}


def beat_schedule(settings: Settings) -> dict:
    """What `celery beat` sends: the sweep (re-dispatch, re-drive) and the index reconcile."""
    return {
        "sweep": {"task": SWEEP, "schedule": float(settings.sweep.interval_seconds)},
        "reconcile": {"task": RECONCILE, "schedule": float(settings.sweep.reconcile_interval_seconds)},
    }


def create_app(settings: Settings | None = None) -> Celery:
    settings = settings or get_settings()
    # Not made current by construction: that would bind only the constructing thread (see app_for).
    app = Celery("ki", set_as_current=False)
    app.conf.update(celery_config(settings))
    app.autodiscover_tasks(["ki_workers"], related_name="tasks", force=True)
    return app


_apps: dict[tuple[str, int, bool], Celery] = {}
_apps_lock = threading.Lock()


def app_for(settings: Settings) -> Celery:
    """The app configured from `settings` (one per broker configuration in a process); the webhook,
    the sweep and `ki events` hand events over through it, so `broker.eager` decides, not the thread."""
    key = (settings.broker.url, settings.broker.visibility_timeout_seconds, settings.broker.eager)
    with _apps_lock:
        if key not in _apps:
            _apps[key] = create_app(settings)
        return _apps[key]


def start_task(name: str, *args: Any) -> Any:
    """`.delay(*args)` of the task `name` in the current app: its AsyncResult (eager: already run).

    The current app is the worker's, or running_in's for an in-process sync; so a queued and an
    eager start go through the same configuration as a task object's own `.delay()`."""
    return current_app.tasks[name].delay(*args)


@contextmanager
def running_in(app: Celery) -> Iterator[Celery]:
    """`app` is this thread's current app meanwhile: an eager task's `.delay()` of the next stage
    (a shared task, looked up in the current app) goes through the same configuration."""
    previous = current_app._get_current_object()
    app.set_current()
    try:
        yield app
    finally:
        previous.set_current()


app = app_for(get_settings())
# Celery keeps the current app per thread; every other thread would fall back to Celery's own,
# unconfigured default app (amqp://localhost, never eager), so a task started from the web
# server's threadpool would be published to some broker instead of running here.
app.set_default()
app.set_current()
