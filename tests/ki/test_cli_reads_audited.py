"""Reads from a terminal are in the audit trail like reads over HTTP: `ki search --as anna` is anna's search,
recorded with surface `cli` and the operator's login, and a read whose record cannot be written prints nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ki_core.config import load_settings
from tests.ki.cli_store import database, fresh_query_service, ki, store  # noqa: F401 - fixtures
from tests.ki.test_query_cli import listed  # noqa: F401 - fixture

__all__ = ["database", "store"]

pytestmark = pytest.mark.usefixtures("fresh_query_service")


def trail() -> list[dict]:
    """The operator's view, oldest first."""
    result = ki("audit", "--json")
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in reversed(result.output.splitlines())]


def test_each_terminal_read_is_one_record_of_the_principal_read_as(listed: dict[str, dict]) -> None:  # noqa: F811
    contract = listed["mietvertrag"]["citation"]["document"]["id"]
    before = len(trail())
    found = ki("search", "Miete", "--as", "anna", "--json")
    assert found.exit_code == 0, found.output
    shown = list(dict.fromkeys(hit["citation"]["document"]["id"] for hit in json.loads(found.output)["hits"]))
    assert shown, "the fixture's search must show hits for the record to name"
    for args in (("get", contract, "--as", "anna"), ("get", contract, "--as", "anna", "--text", "--limit", "10"),
                 ("related", contract, "--as", "anna")):
        result = ki(*args)
        assert result.exit_code == 0, result.output

    records = trail()[before:]
    assert [r["action"] for r in records] == ["search", "read", "text", "related"]
    assert {r["surface"] for r in records} == {"cli"}
    assert {r["subject"] for r in records} == {"anna"}
    assert all(r["detail"].startswith("operator cli:") for r in records)
    assert records[0]["query"] == "Miete" and list(records[0]["document_ids"]) == shown
    assert records[0]["hit_count"] == len(json.loads(found.output)["hits"])
    assert {r["document_id"] for r in records[1:]} == {contract}


def test_a_read_whose_record_cannot_be_written_shows_nothing(store: Path) -> None:  # noqa: F811
    """The trail's file cannot be opened (a directory stands in its place): exit 3 naming the audit, no hit."""
    assert ki("ingest", str(store), "--project", "mietsache", "--exclude", "kaputt.pdf").exit_code == 0
    assert ki("access", "grant", "anna", "--project", "mietsache").exit_code == 0
    audit_file = Path(load_settings().state_dir) / "audit.db"
    audit_file.unlink()
    audit_file.mkdir()
    from ki_query import audit

    audit.close_audit_logs()  # the process keeps one opened trail per store
    result = ki("search", "Miete", "--as", "anna")
    assert result.exit_code == 3, result.output
    assert "audit record could not be written" in result.output
    assert "mietvertrag" not in result.output.lower()
