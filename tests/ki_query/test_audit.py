"""The audit trail: each read is recorded with who, what and where before it is answered, or refused."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ki_core.audit import AuditAction, AuditEntry, AuditFilter, AuditLog, Surface, audit_log
from ki_core.config import SecuritySettings, Settings
from ki_query.api.http import create_query_app
from ki_query.identity import key_digest
from tests.ki_query.credentials import ANNA_KEY, NOBODY_KEY, keyed_settings, signing_key  # noqa: F401
from tests.ki_query.retrieval_fixtures import ADMIN, FolderWorld, folder_world  # noqa: F401

AUDITOR_KEY = "key-auditor-0123456789"
QUERY = "Mietvertrag Haftung"


def audited_settings(world: FolderWorld, signing_key, **changes) -> Settings:  # noqa: F811
    settings = keyed_settings(world, signing_key)
    keys = settings.security.api_keys | {"auditor": {"sha256": key_digest(AUDITOR_KEY), "principals": [ADMIN]}}
    security = SecuritySettings.model_validate(settings.security.model_dump() | {"api_keys": keys})
    return settings.model_copy(update={"security": security, **changes})


@pytest.fixture
def client(folder_world: FolderWorld, signing_key) -> TestClient:  # noqa: F811
    service, _, _ = folder_world.service()
    return TestClient(create_query_app(audited_settings(folder_world, signing_key), lambda: service))


def _trail(client: TestClient, **params) -> list[dict]:
    response = client.get("/v1/audit", params=params, headers={"X-API-Key": AUDITOR_KEY})
    assert response.status_code == 200, response.text
    return response.json()


def test_a_read_by_one_user_appears_with_the_document_id(client: TestClient, folder_world) -> None:  # noqa: F811
    document_id = folder_world.documents["mietvertrag"].id
    assert client.get(f"/v1/documents/{document_id}", headers={"X-API-Key": ANNA_KEY}).status_code == 200
    newest = _trail(client, document=document_id, user="key:anna")[0]
    assert (newest["action"], newest["surface"], newest["document_id"]) == ("read", "http", document_id)
    assert newest["principals"] == ["anna"]


def test_reading_a_documents_text_and_original_is_recorded_with_its_version(
    client: TestClient, folder_world  # noqa: F811
) -> None:
    document_id = folder_world.documents["mietvertrag"].id
    text = client.get(f"/v1/documents/{document_id}/text", headers={"X-API-Key": ANNA_KEY})
    assert text.status_code == 200
    original = client.get(f"/v1/documents/{document_id}/original", headers={"X-API-Key": ANNA_KEY})
    assert original.status_code == 200
    newest, before = _trail(client, document=document_id, user="key:anna", limit=2)
    assert (newest["action"], newest["surface"]) == ("original", "http")
    assert (before["action"], before["detail"]) == ("text", text.json()["version_id"])
    assert text.json()["text"][:40] not in repr([newest, before])


def test_a_search_records_query_hits_and_shown_documents_but_no_text(client: TestClient) -> None:
    answer = client.post("/v1/search", json={"query": QUERY, "limit": 5}, headers={"X-API-Key": ANNA_KEY}).json()
    assert answer["hits"]
    newest = _trail(client, user="key:anna", limit=1)[0]
    assert newest["action"] == "search" and newest["query"] == QUERY
    assert newest["hit_count"] == len(answer["hits"])
    assert newest["document_ids"] == list(dict.fromkeys(h["document_id"] for h in answer["hits"]))
    recorded = repr(newest)
    assert not any(hit["citation"]["excerpt"][:40] in recorded for hit in answer["hits"])


def test_a_search_that_finds_nothing_is_recorded_too(client: TestClient) -> None:
    assert client.post("/v1/search", json={"query": QUERY}, headers={"X-API-Key": NOBODY_KEY}).json()["hits"] == []
    newest = _trail(client, user="key:nobody", limit=1)[0]
    assert (newest["query"], newest["hit_count"], newest["document_ids"]) == (QUERY, 0, [])


def test_only_admins_see_the_trail(client: TestClient) -> None:
    refused = client.get("/v1/audit", headers={"X-API-Key": ANNA_KEY})
    assert refused.status_code == 403
    assert client.get("/v1/audit").status_code == 401


def test_looking_at_the_trail_is_recorded(client: TestClient) -> None:
    _trail(client, user="key:anna")
    assert _trail(client, limit=1)[0]["action"] == "audit_view"


def test_a_search_whose_record_cannot_be_written_fails_closed(folder_world, signing_key, tmp_path: Path) -> None:  # noqa: F811
    """The trail's file cannot be opened (a directory stands in its place): 503, and no hit is shown."""
    (tmp_path / "audit.db").mkdir()
    settings = audited_settings(folder_world, signing_key, state_dir=str(tmp_path),
                                database=folder_world.ctx.settings.database.model_copy(
                                    update={"url": f"sqlite:///{tmp_path / 'ki.db'}"}))
    service, _, _ = folder_world.service()
    response = TestClient(create_query_app(settings, lambda: service)).post(
        "/v1/search", json={"query": QUERY}, headers={"X-API-Key": ANNA_KEY})
    assert response.status_code == 503
    assert "audit" in response.json()["detail"] and "hits" not in response.json()


def _entry(subject: str, at: datetime, **fields) -> AuditEntry:
    return AuditEntry(**{"at": at, "subject": subject, "principals": (subject,), "surface": Surface.CLI,
                         "action": AuditAction.READ} | fields)


def test_filters_by_user_document_and_time(tmp_path: Path) -> None:
    log = AuditLog(Settings(state_dir=str(tmp_path)))
    start = datetime(2026, 12, 1, 9, tzinfo=UTC)
    log.record(_entry("anna", start, document_id="d1"))
    log.record(_entry("tom", start + timedelta(days=1), query="Kündigung", document_ids=("d1", "d2"),
                      action=AuditAction.SEARCH))
    log.record(_entry("anna", start + timedelta(days=2), document_id="d3"))
    assert [e.document_id for e in log.entries(AuditFilter(user="anna"))] == ["d3", "d1"]
    assert [e.subject for e in log.entries(AuditFilter(document="d1"))] == ["tom", "anna"]
    window = AuditFilter(since=start + timedelta(hours=1), until=start + timedelta(days=2))
    assert [e.subject for e in log.entries(window)] == ["tom"]


def test_records_older_than_the_retention_are_pruned(tmp_path: Path) -> None:
    log = AuditLog(Settings(state_dir=str(tmp_path), audit={"retention_days": 30}))
    now = datetime.now(UTC)
    log.record(_entry("old", now - timedelta(days=31)))  # the process's first record prunes
    log.record(_entry("new", now - timedelta(days=29)))
    assert [e.subject for e in log.entries(AuditFilter())] == ["new"]
    log.record(_entry("old again", now - timedelta(days=40)))  # within the hour: left for the next prune
    assert log.prune(now) == 1
    assert log.prune(now + timedelta(days=2)) == 1


def test_on_sqlite_a_record_does_not_wait_for_the_stores_writer(tmp_path: Path) -> None:
    """An ingest holds the store file's one write lock for its transaction; the trail has a file of its own."""
    settings = Settings(state_dir=str(tmp_path))
    store = sqlite3.connect(tmp_path / "ki.db", timeout=0.1)
    store.execute("create table busy (x)")
    store.execute("begin immediate")  # the writer's lock, as an ingest's open transaction holds it
    store.execute("insert into busy values (1)")
    try:
        started = time.monotonic()
        audit_log(settings).record(_entry("anna", datetime.now(UTC), document_id="d1"))
        assert time.monotonic() - started < 1.0
    finally:
        store.rollback()
        store.close()
    assert Path(settings.audit_database_url.removeprefix("sqlite:///")) == tmp_path / "audit.db"
    assert sqlite3.connect(tmp_path / "audit.db").execute("pragma journal_mode").fetchone() == ("wal",)


def test_mcp_tool_calls_are_recorded_as_the_mcp_surface(folder_world) -> None:  # noqa: F811
    from concurrent.futures import ThreadPoolExecutor

    from tests.ki_query.api.test_mcp import _call, _payload

    document_id = folder_world.documents["mietvertrag"].id
    # In a thread of its own: a browser test's Playwright may hold an event loop in this one.
    with ThreadPoolExecutor(1) as thread:
        _, found = thread.submit(_call, folder_world, ("anna",), "search", {"query": QUERY}).result()
        _, read = thread.submit(_call, folder_world, ("anna",), "get_document", {"document_id": document_id}).result()
    assert not found.is_error and not read.is_error
    newest = audit_log(folder_world.ctx.settings).entries(AuditFilter(user="test", limit=2))
    assert [(e.surface, e.action) for e in newest] == [(Surface.MCP, AuditAction.READ), (Surface.MCP, AuditAction.SEARCH)]
    assert newest[0].document_id == document_id
    assert newest[1].document_ids == tuple(dict.fromkeys(h["document_id"] for h in _payload(found)["hits"]))
