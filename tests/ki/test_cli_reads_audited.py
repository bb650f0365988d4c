"""Reads from a terminal are in the audit trail like reads over HTTP: `ki search --as anna` is recorded with the
operator's account as subject, anna as the principal read as and surface `cli`, on SQLite and PostgreSQL;
a read whose record cannot be written prints nothing and exits 3."""

from __future__ import annotations

import json
import pwd
from collections.abc import Iterator
from contextlib import contextmanager
from os import geteuid
from pathlib import Path

import pytest

from ki_core.audit import audit_log
from ki_core.config import load_settings
from tests.ki.cli_store import database, fresh_query_service, ingested, ki, store  # noqa: F401 - fixtures
from tests.ki.test_query_cli import listed  # noqa: F401 - fixture

__all__ = ["database", "store"]

pytestmark = pytest.mark.usefixtures("fresh_query_service")
OPERATOR = f"operator:{pwd.getpwuid(geteuid()).pw_name}"


def trail(*args: str) -> list[dict]:
    """The operator's view, oldest first."""
    result = ki("audit", "--json", "--limit", "1000", *args)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in reversed(result.output.splitlines())]


@contextmanager
def trail_table_gone() -> Iterator[None]:
    """The trail's table renamed away (on SQLite in its own file, on PostgreSQL in the store's database)."""
    with audit_log(load_settings())._connect() as connection:
        connection.exec_driver_sql("ALTER TABLE audit_records RENAME TO audit_records_away")
    try:
        yield
    finally:
        with audit_log(load_settings())._connect() as connection:
            connection.exec_driver_sql("ALTER TABLE audit_records_away RENAME TO audit_records")


def test_each_terminal_read_is_one_record_of_the_operator_reading_as_the_principal(
    database: str, listed: dict[str, dict], tmp_path: Path  # noqa: F811
) -> None:
    questions = tmp_path / "fragen.jsonl"
    questions.write_text('{"question": "Wie hoch ist die Miete?", "expected": "found"}\n', encoding="utf-8")
    contract = listed["mietvertrag"]["citation"]["document"]["id"]
    before = len(trail())
    found = ki("search", "Miete", "--as", "anna", "--json")
    assert found.exit_code == 0, found.output
    shown = list(dict.fromkeys(hit["citation"]["document"]["id"] for hit in json.loads(found.output)["hits"]))
    assert shown, "the fixture's search must show hits for the record to name"
    for args in (("get", contract, "--as", "anna"), ("get", contract, "--as", "anna", "--text", "--limit", "10"),
                 ("related", contract, "--as", "anna"), ("list", "--as", "anna", "--limit", "5"),
                 ("ask", "Wie hoch ist die Miete?", "--as", "anna"),
                 ("eval", "--verdict", str(questions), "--as", "anna", "--json")):
        result = ki(*args)
        assert result.exit_code == 0, result.output

    records = trail()[before:]
    assert [r["action"] for r in records] == ["search", "read", "text", "related", "search_filter", "ask", "eval"]
    assert {r["surface"] for r in records} == {"cli"}
    assert {r["subject"] for r in records} == {OPERATOR}
    assert {tuple(r["principals"]) for r in records} == {("anna",)}
    assert records[0]["query"] == "Miete" and list(records[0]["document_ids"]) == shown
    assert records[0]["hit_count"] == len(json.loads(found.output)["hits"])
    assert {r["document_id"] for r in records[1:4]} == {contract}
    assert records[-1]["query"] == str(questions) and records[-1]["detail"] == "verdicts: 1 questions"
    assert trail("--user", "anna")[-len(records):] == records, "the principal read as finds them"
    assert trail("--user", OPERATOR)[-len(records):] == records, "so does the operator's account"


def test_reading_as_one_principal_is_not_listed_under_another(database: str, listed: dict[str, dict]) -> None:  # noqa: F811
    assert ki("search", "Miete", "--as", "carol").exit_code == 0
    assert ki("search", "Miete", "--as", "anna_b").exit_code == 0
    assert [r["principals"] for r in trail("--user", "carol")] == [["carol"]]
    assert [r["principals"] for r in trail("--user", "anna%b")] == [], "a LIKE wildcard matches no one"


def test_a_read_whose_record_cannot_be_written_shows_nothing(database: str, store: Path) -> None:  # noqa: F811
    ingested(store, "anna")
    assert ki("search", "Miete", "--as", "anna").exit_code == 0  # the trail is open and has its table
    with trail_table_gone():
        result = ki("search", "Miete", "--as", "anna")
        listing = ki("list", "--as", "anna")
    assert result.exit_code == 3, result.output
    assert "audit record could not be written" in result.output
    assert "mietvertrag" not in result.output.lower()
    assert listing.exit_code == 3 and "mietvertrag" not in listing.output.lower()
