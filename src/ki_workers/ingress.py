"""The webhook ingress: signed DMS events in, durable event rows, 202 out; health and metrics.

`POST /webhooks/{source}` checks, in this order: the source is configured
(404), the body fits `dms.max_body_bytes` (413), the HMAC signature over
"timestamp.body" matches within the time window (401), the body is JSON and
a valid event (400, naming the field). It then writes the event row and
commits (503 when the database cannot take it), answers 202 (200 for an
event id seen before), and after the answer hands the row to its task: to
the broker, or with `broker.eager` run in-process in the threadpool, never on
the event loop. A failed hand-over is left to the sweep, a failed in-process
run is recorded on the row: either way the row is already durable.

Only the ASGI entry point in `ki` imports this module; workers never do.
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from ki_core.config import Settings, get_settings
from ki_core.db import engine_from_settings, session_factory
from ki_core.models import EventStatus
from ki_core.openapi import offline_docs, without_validation_422
from ki_workers import telemetry
from ki_workers.event_inbox import AcceptOutcome, Accepted, UnknownSource, accept_event, dispatch_events, dms_source
from ki_workers.handover import Handover
from ki_workers.sources.dms_events import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    DmsEvent,
    EventSchemaError,
    SignatureError,
    event_json_schema,
    parse_event,
    verify_signature,
)

log = logging.getLogger(__name__)

DATABASE_ERRORS = (OperationalError, InterfaceError, PoolTimeout)


class PayloadTooLarge(ValueError):
    """The body is larger than dms.max_body_bytes."""


class InboxUnavailable(RuntimeError):
    """The database cannot take the event now; the sender should retry."""


# The one place where ingress exceptions become HTTP answers: (type, status, error code).
ERROR_STATUS: list[tuple[type[Exception], int, str]] = [
    (UnknownSource, 404, "unknown_source"),
    (PayloadTooLarge, 413, "payload_too_large"),
    (SignatureError, 401, "invalid_signature"),
    (EventSchemaError, 400, "invalid_event"),
    (InboxUnavailable, 503, "unavailable"),
]


def error_response(exc: Exception) -> JSONResponse:
    for exc_type, status, code in ERROR_STATUS:
        if isinstance(exc, exc_type):
            body: dict[str, Any] = {"error": code, "detail": str(exc)}
            if isinstance(exc, EventSchemaError):
                body["errors"] = [{"path": path, "message": message} for path, message in exc.problems]
            headers = {"Retry-After": "5"} if status == 503 else None
            return JSONResponse(body, status_code=status, headers=headers)
    raise exc


@dataclass
class IngressState:
    settings: Settings
    sessions: sessionmaker[Session]
    handover: Handover
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    # name -> Source row id, looked up (or created) on a source's first event
    source_ids: dict[str, str] = field(default_factory=dict)

    @property
    def engine(self) -> Engine:
        return self.sessions.kw["bind"]

    def __post_init__(self) -> None:
        # The INSERTs' own threads, as many as the pool has connections: more would only queue for one.
        self.store_threads = ThreadPoolExecutor(self.settings.database.pool_size, thread_name_prefix="ki-inbox")
        self.requests = Counter(
            "ki_webhook_requests", "Webhook requests by source and outcome", ["source", "outcome"], registry=self.registry
        )
        self.latency = Histogram(
            "ki_webhook_seconds", "Time to answer a webhook request", registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
        )
        self.registry.register(PipelineCollector(self))


# ------------------------------------------------------------------ router


def create_ingress_router(state: IngressState) -> APIRouter:
    router = APIRouter()

    async def receive_event(request: Request) -> Response:
        """A plain Starlette endpoint: FastAPI's parameter solving cost more CPU than the HMAC and the
        INSERT together, and the body is read raw anyway (the signature covers the bytes). Its OpenAPI
        entry is WEBHOOK_OPERATION."""
        source = request.path_params["source"]
        with state.latency.time():
            try:
                response = await _receive(state, source, request)
            except tuple(exc_type for exc_type, _, _ in ERROR_STATUS) as exc:
                response = error_response(exc)
        known = source if source in state.settings.dms.sources else "(unknown)"
        state.requests.labels(known, str(response.status_code)).inc()
        return response

    router.add_route(WEBHOOK_PATH, receive_event, methods=["POST"], include_in_schema=False)

    @router.get("/healthz", summary="The process is up")
    def healthz() -> dict:
        return {"status": "ok"}

    @router.get("/readyz", summary="Ready to accept events: the database is reachable (broker and index reported)")
    def readyz() -> JSONResponse:
        """Only the database decides: an event is accepted once its row is committed, and the sweep
        hands it over when the broker is back, so a broker outage must not take every ingress out
        of the load balancer. The broker's and the index's state are reported beside it."""
        checks = readiness(state)
        ok = checks["database"] == "ok"
        return JSONResponse({"status": "ok" if ok else "unavailable", "checks": checks}, status_code=200 if ok else 503)

    @router.get("/metrics", summary="Prometheus metrics")
    def metrics() -> Response:
        return Response(generate_latest(state.registry), media_type=CONTENT_TYPE_LATEST)

    return router


def refuse_future_event(event: DmsEvent, tolerance_seconds: int) -> None:
    """An event may not claim to happen later than the signature window allows: one dated
    9999-12-31 would make every later change of its subject look superseded (its watermark)."""
    latest = datetime.now(UTC) + timedelta(seconds=tolerance_seconds)
    if event.occurred_at > latest:
        raise EventSchemaError([(
            "occurred_at",
            f"lies in the future ({event.occurred_at.isoformat()}, more than dms.signature_tolerance_seconds = "
            f"{tolerance_seconds} s after this server's clock); send the time the change happened",
        )])  # fmt: skip


async def _receive(state: IngressState, source: str, request: Request) -> Response:
    settings = state.settings
    configured = settings.dms.sources.get(source)
    if configured is None:
        raise UnknownSource(f"no DMS source named {source!r}")
    body = await read_limited(request, settings.dms.max_body_bytes)
    secrets = [s.get_secret_value() for s in (configured.secret, configured.previous_secret) if s is not None]
    verify_signature(
        secrets, body, request.headers.get(TIMESTAMP_HEADER), request.headers.get(SIGNATURE_HEADER),
        tolerance_seconds=settings.dms.signature_tolerance_seconds,
    )
    event = parse_event(decode_json(body))
    refuse_future_event(event, settings.dms.signature_tolerance_seconds)
    accepted = await asyncio.get_running_loop().run_in_executor(state.store_threads, store_event, state, source, event)
    if accepted.outcome is AcceptOutcome.DUPLICATE:
        return JSONResponse(
            {"status": "duplicate", "event_id": event.event_id, "id": accepted.row_id, "event_status": str(accepted.status)},
            status_code=200,
        )
    # Published from the hand-over thread; with `broker.eager` the hand-over is the whole processing.
    state.handover.submit(accepted.row_id, event.type)
    return JSONResponse({"status": "accepted", "event_id": event.event_id, "id": accepted.row_id}, status_code=202)


async def read_limited(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"body of {declared} bytes is larger than {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"body is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def decode_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EventSchemaError([("(body)", f"not valid JSON: {exc}")]) from None
    except RecursionError:
        raise EventSchemaError([("(body)", "JSON nested too deep")]) from None


def store_event(state: IngressState, source_name: str, event) -> Accepted:
    """The event row, committed as `queued`: after this returns, the event cannot be lost.

    Written as queued because the hand-over right after the answer publishes it
    (and sets it back to received if the broker refuses); a process that dies
    in between leaves a queued row the sweep re-sends once its queue is idle.
    A pooled connection the database dropped (a restart) is retried once on a
    fresh one; the engine does not ping before every event.
    """
    for attempt in (1, 2):
        try:
            source_id = state.source_ids.get(source_name)
            if source_id is None:
                with state.sessions() as session, session.begin():
                    source_id = state.source_ids[source_name] = dms_source(session, source_name, state.settings).id
            with state.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
                return accept_event(connection, source_id, event, status=EventStatus.QUEUED)
        except DATABASE_ERRORS as exc:
            if attempt == 1 and isinstance(exc, DBAPIError) and exc.connection_invalidated:
                continue
            log.warning("event %s not stored (%s)", event.event_id, type(exc).__name__)
            raise InboxUnavailable("the event store is unavailable; retry later") from exc
    raise AssertionError("unreachable: the second attempt returns or raises")


# ------------------------------------------------------------------ health


def readiness(state: IngressState) -> dict[str, str]:
    return {"database": _check(_database_ok, state), "broker": _check(_broker_ok, state), "index": _check(_index_ok, state)}


def _check(probe, state: IngressState) -> str:
    try:
        return probe(state.settings, state.sessions)
    except Exception as exc:  # noqa: BLE001 - any failure means "not ready"; the reason is shown
        return f"error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _database_ok(settings: Settings, sessions: sessionmaker[Session]) -> str:
    with sessions() as session:
        session.execute(text("SELECT 1"))
    return "ok"


def _broker_ok(settings: Settings, sessions) -> str:
    if settings.broker.eager:
        return "not used (broker.eager)"
    telemetry.redis_client(settings).ping()
    return "ok"


def _index_ok(settings: Settings, sessions) -> str:
    if settings.search.backend == "opensearch":
        from ki_core.search.opensearch import make_client

        if not make_client(settings.search.opensearch).ping():
            raise ConnectionError("OpenSearch does not answer ping")
        return _index_signature_ok(settings, sessions)
    path = Path(settings.embedded_index_path)
    if not (path.is_dir() or path.parent.is_dir()):
        raise FileNotFoundError(f"embedded index directory {path} is missing")
    return _index_signature_ok(settings, sessions)


def _index_signature_ok(settings: Settings, sessions: sessionmaker[Session]) -> str:
    """An index built for another embedder or extractor is reported (IndexSignatureMismatch) like an outage."""
    from ki_core.search.index import open_index
    from ki_core.search.signature import bind_index_signature

    index = open_index(settings, read_only=True)
    try:
        bind_index_signature(index, settings, sessions, claim=False)
    finally:
        index.close()
    return "ok"


# ----------------------------------------------------------------- metrics


def _broker_up(answered: bool) -> GaugeMetricFamily:
    return GaugeMetricFamily("ki_broker_up", "1 when the broker answered this scrape", value=int(answered))


class PipelineCollector(Collector):
    """Figures read at scrape time from SQL and Redis, so every worker's work shows here."""

    def __init__(self, state: IngressState):
        self.state = state

    def collect(self):
        yield from self._from_sql()
        if not self.state.settings.broker.eager:
            yield from self._from_redis()

    def _from_sql(self):
        try:
            with self.state.sessions() as session:
                counts = telemetry.event_counts(session)
                oldest = telemetry.oldest_open_event_age(session)
                oldest_access = telemetry.oldest_open_event_age(session, telemetry.ACCESS_EVENT_TYPES)
                lags = telemetry.access_lags(session)
                stale = telemetry.stale_access_projections(session)
        except DATABASE_ERRORS as exc:
            log.warning("metrics: database unavailable (%s)", type(exc).__name__)
            return
        events = GaugeMetricFamily("ki_events", "Events in the inbox by type and status", labels=["type", "status"])
        for (event_type, status), count in sorted(counts.items()):
            events.add_metric([event_type, status], count)
        yield events
        yield GaugeMetricFamily("ki_oldest_unfinished_event_seconds", "Age of the oldest accepted, unfinished event", value=oldest)
        yield GaugeMetricFamily(
            "ki_acl_pending_seconds", "Age of the oldest unfinished access event (ACL, group, project, delete)", value=oldest_access
        )
        lag = GaugeMetricFamily(
            "ki_acl_propagation_lag_seconds",
            "Receipt to in-force-in-SQL of access events finished in the last 15 minutes",
            labels=["quantile"],
        )
        for quantile in ("0.5", "0.95", "1"):
            lag.add_metric([quantile], _quantile(lags, float(quantile)))
        yield lag
        yield GaugeMetricFamily(
            "ki_access_projections_stale", "Indexed versions whose index projection lags their access_version", value=stale
        )

    def _from_redis(self):
        try:
            client = telemetry.redis_client(self.state.settings)
            depths = telemetry.queue_depths(client)
            latencies = telemetry.task_latencies(client)
            states = telemetry.task_states(client)
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail because the broker blinked
            log.warning("metrics: broker unavailable (%s: %s)", type(exc).__name__, exc)
            yield _broker_up(False)
            return
        yield _broker_up(True)
        queue = GaugeMetricFamily("ki_queue_depth", "Messages waiting per queue", labels=["queue"])
        for name, depth in depths.items():
            queue.add_metric([name], depth)
        yield queue
        latency = HistogramMetricFamily("ki_task_seconds", "Task run time per pipeline stage", labels=["task"])
        for item in latencies:
            latency.add_metric([item.task], item.buckets, item.total)
        yield latency
        runs = CounterMetricFamily("ki_task_runs", "Task runs per stage and final state", labels=["task", "state"])
        for (name, task_state), count in sorted(states.items()):
            runs.add_metric([name, task_state], count)
        yield runs


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


# --------------------------------------------------------------------- app


def create_ingress_app(settings: Settings | None = None) -> FastAPI:
    """The ingress as an ASGI app: the router, and the event schema in the OpenAPI document."""
    settings = settings or get_settings()
    engine = engine_from_settings(settings, pre_ping=False)  # store_event retries a dropped connection once
    sessions = session_factory(engine)
    state = IngressState(settings=settings, sessions=sessions, handover=Handover(settings, sessions, dispatch=dispatch_events))

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        stop = asyncio.Event()
        sweeper = asyncio.create_task(_sweep_in_process_forever(settings, stop)) if settings.broker.eager else None
        try:
            yield
        finally:
            if sweeper is not None:
                # Not cancel(): a sweep running in a worker thread would go on holding its database
                # connection after the engines are disposed. Ask the loop to stop, and wait for it.
                stop.set()
                await sweeper
            await run_in_threadpool(state.handover.stop)
            state.store_threads.shutdown(wait=True)
            engine.dispose()

    app = FastAPI(title="LegalMemory knowledge index: DMS ingress", version="1", lifespan=lifespan,
                  docs_url=None, redoc_url=None)
    app.include_router(create_ingress_router(state))
    app.state.ingress = state
    _publish_event_schema(app)
    without_validation_422(app)
    offline_docs(app)
    return app


async def _sweep_in_process_forever(settings: Settings, stop: asyncio.Event) -> None:
    """With broker.eager no beat runs: the process sweeps itself, first right at start, so an
    event a crash left half-done is taken up again, then every sweep.interval_seconds, until
    `stop` is set (a sweep in progress then finishes first)."""
    from ki_workers.context import worker_context
    from ki_workers.sweep import sweep_in_process

    while not stop.is_set():
        try:
            result = await run_in_threadpool(sweep_in_process, worker_context())
            log.debug("in-process sweep: %s", result)
        except Exception:  # noqa: BLE001 - a failed sweep is logged and tried again next interval
            log.exception("in-process sweep failed; next try in %d s", settings.sweep.interval_seconds)
        with suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=settings.sweep.interval_seconds)


WEBHOOK_PATH = "/webhooks/{source}"
WEBHOOK_OPERATION: dict[str, Any] = {
    "summary": "Receive a signed DMS event",
    "operationId": "receive_event",
    "parameters": [
        {"name": "source", "in": "path", "required": True, "schema": {"type": "string"},
         "description": "The DMS source, a key of dms.sources"},
        {"name": TIMESTAMP_HEADER, "in": "header", "required": True, "schema": {"type": "string"},
         "description": "Unix seconds when the request was signed"},
        {"name": SIGNATURE_HEADER, "in": "header", "required": True, "schema": {"type": "string"},
         "description": "sha256=<hex HMAC-SHA256 of '<timestamp>.<raw body>'>"},
    ],
    "requestBody": {"required": True, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DmsEvent"}}}},
    "responses": {
        "202": {"description": "Accepted: stored, and handed to its task"},
        "200": {"description": "Duplicate event id: acknowledged, not processed again"},
        "400": {"description": "Malformed JSON or schema violation (errors name the field path)"},
        "401": {"description": "Missing or wrong signature, or timestamp outside the window"},
        "404": {"description": "Unknown source"},
        "413": {"description": "Body larger than dms.max_body_bytes"},
        "503": {"description": "The database cannot take the event now; retry"},
    },
}  # fmt: skip


def _publish_event_schema(app: FastAPI) -> None:
    """The webhook is a plain Starlette route reading its raw body (the signature covers the bytes), so its
    operation and the event schema are added by hand."""
    base_openapi = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            document = base_openapi()
            document.setdefault("paths", {})[WEBHOOK_PATH] = {"post": WEBHOOK_OPERATION}
            union, definitions = event_json_schema()
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            schemas.update(definitions)
            schemas["DmsEvent"] = union
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi
