"""`ki audit` as an operator runs it: the newest records, filters, and exports that read back the same."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ki.cli import app
from ki.commands.permissions.audit import CSV_COLUMNS
from ki_core.config import load_settings
from ki_core.audit import AuditAction, AuditEntry, Surface, audit_log

runner = CliRunner(env={"COLUMNS": "200"})
START = datetime(2026, 12, 1, 9, tzinfo=UTC)


@pytest.fixture
def trail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[AuditEntry]:
    """60 records: anna searches every hour, and tom read document d-7 once."""
    monkeypatch.setenv("KI_STATE_DIR", str(tmp_path / "state"))
    log = audit_log(load_settings())
    entries = [AuditEntry(at=START + timedelta(hours=n), subject="anna.berg", principals=("anna.berg", "group:partner"),
                          surface=Surface.WEB, action=AuditAction.SEARCH, query=f"Kündigung {n}", hit_count=2,
                          document_ids=("d-1", f"d-{n}")) for n in range(59)]
    entries.append(AuditEntry(at=START + timedelta(hours=30, minutes=5), subject="tom.krause", principals=("tom.krause",),
                              surface=Surface.HTTP, action=AuditAction.READ, document_id="d-7"))
    for entry in entries:
        log.record(entry)
    return sorted(entries, key=lambda e: e.at, reverse=True)


def test_the_newest_fifty_are_listed(trail) -> None:
    result = runner.invoke(app, ["audit", "--json"])
    assert result.exit_code == 0, result.output
    shown = [AuditEntry.model_validate_json(line) for line in result.output.splitlines()]
    assert shown == trail[:50]


def test_the_table_names_time_principal_surface_action_and_query(trail) -> None:
    result = runner.invoke(app, ["audit", "--user", "tom.krause"])
    assert result.exit_code == 0, result.output
    assert "2026-12-02 15:05:00" in result.output and "tom.krause" in result.output and "d-7" in result.output
    assert "anna.berg" not in result.output


def test_filters_by_document_and_time(trail) -> None:
    result = runner.invoke(app, ["audit", "--document", "d-7", "--json"])
    shown = [AuditEntry.model_validate_json(line) for line in result.output.splitlines()]
    assert [(e.subject, e.action) for e in shown] == [("tom.krause", AuditAction.READ), ("anna.berg", AuditAction.SEARCH)]
    result = runner.invoke(app, ["audit", "--since", "2026-12-01T10:00", "--until", "2026-12-01T12:00", "--json"])
    assert [AuditEntry.model_validate_json(line).query for line in result.output.splitlines()] == ["Kündigung 2", "Kündigung 1"]


def test_the_csv_export_round_trips(trail, tmp_path: Path) -> None:
    target = tmp_path / "audit.csv"
    result = runner.invoke(app, ["audit", "--limit", "1000", "--csv", str(target)])
    assert result.exit_code == 0, result.output
    with target.open(encoding="utf-8", newline="") as rows:
        reader = csv.DictReader(rows)
        assert tuple(reader.fieldnames or ()) == CSV_COLUMNS
        read_back = [AuditEntry.model_validate({k: (json.loads(v) if k in ("principals", "document_ids") else v or None)
                                                for k, v in row.items()}) for row in reader]
    assert read_back == trail


def test_a_bad_time_is_one_line_and_exit_2(trail) -> None:
    result = runner.invoke(app, ["audit", "--since", "yesterday"])
    assert result.exit_code == 2
    assert "ISO date" in result.output
