"""The webhook ingress over HTTP, on PostgreSQL and the Redis broker: every answer it can give.

The app is the real ASGI app (`create_ingress_app`); the broker is Redis
(database 15), so a test can see the message the ingress enqueued after its commit.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from ki_core.config import load_settings
from ki_core.db import make_engine, session_factory
from ki_core.models import EventStatus, IngestEvent
from ki_workers.ingress import create_ingress_app
from ki_workers.sources.dms_events import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from ki_workers.telemetry import record_task
from tests.ki_workers.dms_support import SECRET, SOURCE, acl_changed, upserted

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
CLOSED_PORT_DB = "postgresql+psycopg://postgres@127.0.0.1:1/nothing?connect_timeout=2"


@pytest.fixture
def configure(monkeypatch: pytest.MonkeyPatch, committed_pg_url: str, redis_url: str, tmp_path):
    """Settings for an ingress on the module's database and the test broker; keyword overrides win."""

    def settings(**overrides: str):
        env = {
            "KI_DATABASE__URL": committed_pg_url,
            "KI_BROKER__URL": redis_url,
            "KI_BROKER__EAGER": "false",
            "KI_STATE_DIR": str(tmp_path / "state"),
            "KI_DMS__SOURCES__ACME__SECRET": SECRET,
            "KI_DMS__SOURCES__ACME__PREVIOUS_SECRET": "old-secret",
            "KI_DMS__MAX_BODY_BYTES": "4000",
            **overrides,
        }
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return load_settings()

    return settings


@pytest.fixture
def client(configure, redis_client) -> Iterator[TestClient]:
    with TestClient(create_ingress_app(configure())) as test_client:
        yield test_client


def post(client: TestClient, data: dict | bytes, *, secret: str = SECRET, source: str = SOURCE, headers=None, timestamp=None):
    body = data if isinstance(data, bytes) else json.dumps(data).encode()
    signed = sign(secret, body, timestamp) if headers is None else headers
    response = client.post(f"/webhooks/{source}", content=body, headers={"Content-Type": "application/json", **signed})
    assert client.app.state.ingress.handover.flush(), "the hand-over thread publishes after the answer"
    return response


def rows(url: str, event_id: str) -> list[IngestEvent]:
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session:
            return list(session.scalars(select(IngestEvent).where(IngestEvent.event_id == event_id)))
    finally:
        engine.dispose()


def queued_messages(redis_client, queue: str = "ki.ingest") -> list[tuple[str, list]]:
    """(task name, args) of every message waiting in the queue."""
    messages = []
    for raw in redis_client.lrange(queue, 0, -1):
        message = json.loads(raw)
        args = json.loads(base64.b64decode(message["body"]))[0]
        messages.append((message["headers"]["task"], args))
    return messages


# ------------------------------------------------------------------ accepted


def test_an_accepted_event_is_a_committed_row_and_then_a_message(client, committed_pg_url, redis_client) -> None:
    data = upserted("A-1")
    response = post(client, data)
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "accepted"
    [row] = rows(committed_pg_url, data["event_id"])
    assert row.status == EventStatus.QUEUED and row.payload["object_id"] == "A-1"
    assert queued_messages(redis_client) == [("ki.process_event", [row.id])]


def test_a_repeated_event_id_is_acknowledged_as_a_duplicate_and_enqueued_once(client, committed_pg_url, redis_client) -> None:
    data = upserted("A-1")
    assert post(client, data).status_code == 202
    again = post(client, data)
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    assert len(rows(committed_pg_url, data["event_id"])) == 1
    assert len(queued_messages(redis_client)) == 1


def test_access_events_go_to_the_access_queue_never_behind_uploads(client, committed_pg_url, redis_client) -> None:
    data = acl_changed("A-1", [{"principal": "alice"}])
    assert post(client, data).status_code == 202
    [row] = rows(committed_pg_url, data["event_id"])
    assert queued_messages(redis_client, "ki.access") == [("ki.process_access_event", [row.id])]
    assert queued_messages(redis_client, "ki.ingest") == []


def test_the_previous_secret_still_verifies_during_a_rotation(client) -> None:
    assert post(client, acl_changed("A-1", []), secret="old-secret").status_code == 202


def test_a_broker_that_is_down_does_not_lose_the_event(configure, committed_pg_url) -> None:
    settings = configure(KI_BROKER__URL="redis://127.0.0.1:1/0")
    data = acl_changed("A-1", [])
    with TestClient(create_ingress_app(settings)) as down:
        assert post(down, data).status_code == 202
    [row] = rows(committed_pg_url, data["event_id"])
    assert row.status == EventStatus.RECEIVED, "left for the sweep to dispatch"


# -------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("headers", "detail"),
    [
        ({}, "missing"),
        ({TIMESTAMP_HEADER: "1"}, "missing"),
        ({TIMESTAMP_HEADER: "now", SIGNATURE_HEADER: "sha256=00"}, "integer"),
        ({SIGNATURE_HEADER: "sha256=" + "0" * 64}, "does not match"),
    ],
)
def test_a_missing_or_wrong_signature_is_401(client, headers, detail) -> None:
    headers = {TIMESTAMP_HEADER: str(int(time.time())), **headers} if SIGNATURE_HEADER in headers else headers
    response = post(client, acl_changed("A-1", []), headers=headers)
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_signature" and detail in response.json()["detail"]


def test_a_signature_over_other_bytes_or_too_old_is_401(client) -> None:
    data = acl_changed("A-1", [])
    body = json.dumps(data).encode()
    tampered = client.post(f"/webhooks/{SOURCE}", content=body.replace(b"A-1", b"A-2"), headers=sign(SECRET, body))
    assert tampered.status_code == 401
    stale = post(client, data, timestamp=int(time.time()) - 301)
    assert stale.status_code == 401 and "window" in stale.json()["detail"]
    assert post(client, data, secret="guessed").status_code == 401


def test_an_unknown_source_is_404(client) -> None:
    response = post(client, acl_changed("A-1", []), source="nobody")
    assert response.status_code == 404 and response.json()["error"] == "unknown_source"


def test_a_body_over_the_limit_is_413_with_or_without_content_length(client) -> None:
    big = upserted("A-1", text="Miete " * 1000)
    assert post(client, big).status_code == 413

    def chunks():
        yield b'{"padding": "'
        yield b"x" * 5000
        yield b'"}'

    streamed = client.post(f"/webhooks/{SOURCE}", content=chunks(), headers=sign(SECRET, b""))
    assert streamed.status_code == 413 and streamed.json()["error"] == "payload_too_large"


def test_malformed_json_is_400(client) -> None:
    response = post(client, b'{"type": "acl.changed", ')
    assert response.status_code == 400
    assert response.json()["errors"][0]["path"] == "(body)"


def test_a_schema_violation_is_400_naming_the_field(client, committed_pg_url) -> None:
    data = upserted("A-1", content={"url": "a.txt", "sha256": "abc"})
    response = post(client, data)
    assert response.status_code == 400
    assert [e["path"] for e in response.json()["errors"]] == ["content.sha256"]
    assert rows(committed_pg_url, data["event_id"]) == []


def test_an_event_dated_past_the_signature_window_is_400_naming_occurred_at(client, committed_pg_url) -> None:
    data = {**acl_changed("A-1", []), "occurred_at": "9999-12-31T00:00:00+00:00"}
    response = post(client, data)
    assert response.status_code == 400
    assert [e["path"] for e in response.json()["errors"]] == ["occurred_at"]
    assert "dms.signature_tolerance_seconds" in response.json()["errors"][0]["message"]
    assert rows(committed_pg_url, data["event_id"]) == []


def test_a_timestamp_header_with_a_unicode_space_or_digit_is_401_not_500(client) -> None:
    body = json.dumps(acl_changed("A-1", [])).encode()
    for stamp in (f"\u00a0{int(time.time())}", "١٧٠٠٠٠٠٠٠٠"):  # a no-break space; Arabic-Indic digits
        headers = {TIMESTAMP_HEADER: stamp, SIGNATURE_HEADER: "v1=00"}
        response = client.post(
            f"/webhooks/{SOURCE}", content=body,
            headers={"Content-Type": "application/json", **{k: v.encode("utf-8") for k, v in headers.items()}},
        )  # fmt: skip
        assert response.status_code == 401 and "ASCII digits" in response.json()["detail"]


def test_json_nested_too_deep_is_400(client) -> None:
    response = post(client, b"[" * 1_900 + b"]" * 1_900)  # under the 4,000-byte body limit of these tests
    assert response.status_code == 400 and "nested too deep" in response.json()["errors"][0]["message"]


@pytest.mark.parametrize(("field", "value"), [("event_id", r"ev\u0000il"), ("object_id", r"A\u0000-1"),
                                              ("event_id", r"\ud800x")])  # fmt: skip
def test_a_nul_or_a_lone_surrogate_is_400_naming_the_field(client, committed_pg_url, field, value) -> None:
    data = acl_changed("A-1", [])
    body = json.dumps(data).replace(json.dumps(data[field]), f'"{value}"', 1).encode()
    response = post(client, body)
    assert response.status_code == 400
    assert [e["path"] for e in response.json()["errors"]] == [field]


def test_a_database_that_cannot_take_the_event_is_503(configure) -> None:
    with TestClient(create_ingress_app(configure(KI_DATABASE__URL=CLOSED_PORT_DB))) as down:
        response = post(down, acl_changed("A-1", []))
        assert response.status_code == 503
        assert response.headers["Retry-After"] == "5"
        ready = down.get("/readyz")
        assert ready.status_code == 503 and ready.json()["checks"]["database"].startswith("error")


# --------------------------------------------------------- health, metrics


def test_health_and_readiness(client, tmp_path) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    unindexed = client.get("/readyz")
    assert unindexed.json()["checks"]["index"].startswith("error: FileNotFoundError")
    assert unindexed.status_code == 200, "the ingress only needs its database to accept events"
    (tmp_path / "state").mkdir()
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"] == {"database": "ok", "broker": "ok", "index": "ok"}


def test_a_broker_outage_keeps_the_ingress_ready_and_accepting(configure) -> None:
    """Accepted means committed: the sweep hands the event over when Redis is back. A readiness
    probe that failed here would take every ingress out of the load balancer during the outage."""
    with TestClient(create_ingress_app(configure(KI_BROKER__URL="redis://127.0.0.1:1/0"))) as no_broker:
        assert post(no_broker, acl_changed("A-1", [])).status_code == 202
        ready = no_broker.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ok"
        assert ready.json()["checks"]["broker"].startswith("error")
        assert "ki_broker_up 0.0" in no_broker.get("/metrics").text


def test_the_openapi_document_names_the_statuses_answered_and_no_422(client) -> None:
    operation = client.get("/openapi.json").json()["paths"]["/webhooks/{source}"]["post"]
    assert set(operation["responses"]) == {"200", "202", "400", "401", "404", "413", "503"}


def test_metrics_show_events_queues_latency_and_lag(client, redis_client) -> None:
    post(client, upserted("A-1"))
    post(client, acl_changed("A-1", []))
    post(client, acl_changed("A-1", []), source="nobody")
    record_task(redis_client, "ki.chunk_embed", 0.7, "SUCCESS")
    text = client.get("/metrics").text
    assert 'ki_events{status="queued",type="document.upserted"}' in text
    assert 'ki_queue_depth{queue="ki.ingest"} 1.0' in text and 'ki_queue_depth{queue="ki.access"} 1.0' in text
    assert 'ki_task_seconds_bucket{le="1.0",task="ki.chunk_embed"} 1.0' in text
    assert 'ki_task_runs_total{state="SUCCESS",task="ki.chunk_embed"} 1.0' in text
    assert "ki_broker_up 1.0" in text
    assert 'ki_webhook_requests_total{outcome="404",source="(unknown)"} 1.0' in text
    for name in ("ki_oldest_unfinished_event_seconds", "ki_acl_pending_seconds", "ki_acl_propagation_lag_seconds",
                 "ki_access_projections_stale", "ki_webhook_seconds_bucket"):
        assert name in text


def test_the_openapi_document_carries_the_event_schema(client) -> None:
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    assert {"DmsEvent", "DocumentUpserted", "AclChanged", "SourceListing"} <= set(schemas)
    body = document["paths"]["/webhooks/{source}"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/DmsEvent"}


def test_a_worker_process_never_loads_the_web_stack() -> None:
    probe = "import sys, ki_workers.tasks, ki_workers.sweep; print(sorted(m for m in ('fastapi', 'starlette', 'ki') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_an_event_the_broker_refused_is_set_back_to_received_for_the_sweep(configure, committed_pg_url) -> None:
    """Written queued (one transaction per event); when the publish fails it is received again, which the
    sweep sends at once, however long the queue."""
    with TestClient(create_ingress_app(configure(KI_BROKER__URL="redis://127.0.0.1:1/0"))) as no_broker:
        data = acl_changed("A-1", [])
        assert post(no_broker, data).status_code == 202
    [row] = rows(committed_pg_url, data["event_id"])
    assert row.status == EventStatus.RECEIVED


def test_a_connection_the_database_dropped_is_retried_once_not_answered_503(client, committed_pg_url) -> None:
    assert post(client, acl_changed("A-1", [])).status_code == 202
    engine = make_engine(committed_pg_url)
    try:
        with engine.begin() as conn:  # what a PostgreSQL restart does to the ingress's pooled connections
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = current_database() AND pid <> pg_backend_pid()"))
    finally:
        engine.dispose()
    data = acl_changed("A-2", [])
    response = post(client, data)
    assert response.status_code == 202, response.text
    assert len(rows(committed_pg_url, data["event_id"])) == 1


def test_a_database_gone_right_after_the_publish_does_not_break_the_hand_over(configure, redis_client, tmp_path) -> None:
    """The replay and sweep paths mark a published row queued; when the database went away in between,
    the message is out and the row is only sent once more by the sweep: no exception escapes."""
    from ki_workers.event_inbox import dispatch_events

    gone = session_factory(make_engine(f"sqlite:///{tmp_path}"))  # a directory: every connection fails
    assert dispatch_events(configure(), gone, {"0" * 32: "acl.changed"}) == 1
    assert queued_messages(redis_client, "ki.access") == [("ki.process_access_event", ["0" * 32])]
