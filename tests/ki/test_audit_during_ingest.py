"""Searches answer, and are recorded, while `ki ingest` writes the same SQLite store.

The store's file has one writer; the audit trail is a file of its own, so recording a
search never queues behind the ingest's write transactions.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ki_core.audit import AuditAction, AuditFilter, audit_log
from ki_core.config import load_settings
from ki_query.api.http import create_query_app
from ki_query.retrieval import retrieval_service_from_settings
from tests.ki_query.web.ki_server import ACCOUNTS, KiStore

REPO = Path(__file__).resolve().parents[2]
ANNA = ACCOUNTS["anna"]


def test_searches_during_ki_ingest_answer_and_are_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = KiStore.create(tmp_path)
    store.ki("ingest", str(REPO / "examples" / "kanzlei-mandant-nordbau"), "--project", "nordbau")
    store.ki("access", "grant", "anna.berg", "--project", "nordbau")
    for name in ("KI_CONFIG_FILE", "KI_STATE_DIR", "KI_EMBEDDING__PROVIDER", "KI_EMBEDDING__DIMENSIONS"):
        monkeypatch.setenv(name, store.env[name])
    settings = load_settings()
    service = retrieval_service_from_settings(settings)
    client = TestClient(create_query_app(settings, lambda: service))

    ingest = subprocess.Popen([sys.executable, "-m", "ki.cli", "ingest", str(REPO / "examples" / "kanzlei-mandant-hanse"),
                               "--project", "hanse-pharma"], env=store.env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seconds: list[float] = []
    try:
        while ingest.poll() is None:
            started = time.monotonic()
            response = client.post("/v1/search", json={"query": "Werkvertrag Haftung"}, headers={"X-API-Key": ANNA.key})
            seconds.append(time.monotonic() - started)
            assert response.status_code == 200, response.text
            assert response.json()["hits"]
    finally:
        output = ingest.communicate(timeout=600)[0]
    assert ingest.returncode == 0, output
    assert len(seconds) >= 3, f"only {len(seconds)} searches ran during the ingest"
    assert max(seconds) < 10, f"a search waited {max(seconds):.1f} s"  # SQLite's busy timeout is 30 s
    recorded = audit_log(settings).entries(AuditFilter(user="key:anna", limit=10_000))
    assert [e.action for e in recorded] == [AuditAction.SEARCH] * len(seconds)
