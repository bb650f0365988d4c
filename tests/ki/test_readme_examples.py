"""What the README promises a user of a fresh clone: the statutes example ships, and where the API docs are."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.ki.cli_store import ki

STATUTES = Path(__file__).parents[2] / "examples" / "statutes" / "bgb-mietrecht.jsonl.gz"


@pytest.fixture
def hashing_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KI_EMBEDDING__PROVIDER", "hashing")
    monkeypatch.setenv("KI_EMBEDDING__DIMENSIONS", "64")


def test_the_shipped_statutes_load_and_answer_the_readme_question(hashing_embedder: None) -> None:
    loaded = ki("corpus", "load", "statutes", str(STATUTES))
    assert loaded.exit_code == 0, loaded.output
    assert "296 records" in loaded.output

    asked = ki("ask", "Kündigungsfrist Mietvertrag", "--as", "anna.berg", "--corpus", "statutes")
    assert asked.exit_code == 0, asked.output
    assert "§ 573c Abs. 1 BGB" in asked.output


def test_ki_serve_has_the_query_api_docs_at_v1_docs_and_the_ingress_docs_at_docs(hashing_embedder: None) -> None:
    from ki.asgi import create_all_in_one

    client = TestClient(create_all_in_one())

    assert client.get("/v1/docs").status_code == 200 and client.get("/docs").status_code == 200
    assert client.get("/v1/openapi.json").json()["info"]["title"].endswith("query API")
    assert client.get("/openapi.json").json()["info"]["title"].endswith("DMS ingress")
