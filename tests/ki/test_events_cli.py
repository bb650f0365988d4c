"""`ki events replay | list | redrive | prune` as an operator runs them (embedded mode: SQLite, in-process tasks)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import typer
from sqlalchemy import select, update
from typer.testing import CliRunner

from ki.commands.storage import events
from ki_core.config import load_settings
from ki_core.db import make_engine, session_factory
from ki_core.models import DocumentVersion, EventStatus, IngestEvent
from ki_core.models.base import utcnow
from ki_workers.context import reset_worker_context
from tests.ki_workers.dms_support import SECRET, acl_changed, envelope, upserted

runner = CliRunner()


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> typer.Typer:
    monkeypatch.setenv("KI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KI_EMBEDDING__PROVIDER", "hashing")
    monkeypatch.setenv("KI_EMBEDDING__DIMENSIONS", "64")
    monkeypatch.setenv("KI_DMS__SOURCES__ACME__SECRET", SECRET)
    monkeypatch.setenv("COLUMNS", "200")
    reset_worker_context()
    app = typer.Typer()
    events.register(app)
    app.command("noop", hidden=True)(lambda: None)  # a group alone would become the root command
    yield app
    reset_worker_context()


def write_events(path: Path, *items: dict | str) -> Path:
    path.write_text("\n".join(item if isinstance(item, str) else json.dumps(item) for item in items) + "\n")
    return path


def rows() -> list[IngestEvent]:
    engine = make_engine(load_settings().database_url)
    try:
        with session_factory(engine)() as session:
            return list(session.scalars(select(IngestEvent).order_by(IngestEvent.received_at)))
    finally:
        engine.dispose()


def test_replay_processes_a_file_and_summarizes_per_type(cli, tmp_path: Path) -> None:
    file = write_events(
        tmp_path / "events.jsonl",
        upserted("A-1"),
        acl_changed("A-1", [{"principal": "bob"}]),
        '{"type": "acl.changed", "event_id": "x"',
        envelope("group.changed", 2, group="team", members=[]),
    )
    result = runner.invoke(cli, ["events", "replay", str(file), "--source", "acme"])
    assert result.exit_code == 1, "an invalid line is reported with a non-zero exit"
    assert "line 3" in result.output and "document.upserted" in result.output
    assert [(r.event_type, r.status) for r in rows()] == [
        ("document.upserted", EventStatus.DONE),
        ("acl.changed", EventStatus.DONE),
        ("group.changed", EventStatus.DONE),
    ]
    again = runner.invoke(cli, ["events", "replay", str(file), "--source", "acme"])
    assert len(rows()) == 3, "a second replay only finds duplicates"
    assert again.exit_code == 1


def test_list_and_redrive_a_parked_event(cli, tmp_path: Path) -> None:
    bad = upserted("A-1", content={"url": "a.txt", "sha256": "0" * 64})
    runner.invoke(cli, ["events", "replay", str(write_events(tmp_path / "e.jsonl", bad)), "--source", "acme"])
    listed = runner.invoke(cli, ["events", "list", "--status", "parked"])
    assert listed.exit_code == 0 and bad["event_id"] in listed.output and "content_base_url" in listed.output
    redriven = runner.invoke(cli, ["events", "redrive", bad["event_id"]])
    assert redriven.exit_code == 0 and "parked" in redriven.output
    assert rows()[0].attempts == 1, "attempts start over on a re-drive"


def test_a_replay_for_an_unconfigured_source_or_a_redrive_of_nothing_fails_cleanly(cli, tmp_path: Path) -> None:
    file = write_events(tmp_path / "e.jsonl", upserted("A-1"))
    result = runner.invoke(cli, ["events", "replay", str(file), "--source", "nobody"])
    assert result.exit_code == 1 and "no DMS source named 'nobody'" in result.output
    assert runner.invoke(cli, ["events", "redrive", "no-such-event"]).exit_code == 1
    assert not [r for r in rows() if r.status != EventStatus.DONE]


def test_replayed_content_lands_in_sql(cli, tmp_path: Path) -> None:
    runner.invoke(cli, ["events", "replay", str(write_events(tmp_path / "e.jsonl", upserted("A-1"))), "--source", "acme"])
    engine = make_engine(load_settings().database_url)
    try:
        with session_factory(engine)() as session:
            assert session.scalar(select(DocumentVersion.processing_state)) == "indexed"
    finally:
        engine.dispose()


def test_prune_dry_run_only_counts_and_prune_deletes_only_old_processed_events(cli, tmp_path: Path) -> None:
    parked = upserted("A-2", content={"url": "a.txt", "sha256": "0" * 64})
    runner.invoke(cli, ["events", "replay", str(write_events(tmp_path / "e.jsonl", upserted("A-1"), parked)), "--source", "acme"])
    engine = make_engine(load_settings().database_url)
    try:
        with session_factory(engine)() as session, session.begin():
            month_ago = utcnow() - timedelta(days=31)
            session.execute(update(IngestEvent).values(received_at=month_ago, finished_at=month_ago))
    finally:
        engine.dispose()

    dry = runner.invoke(cli, ["events", "prune", "--dry-run"])
    assert dry.exit_code == 0 and "1 processed event(s) finished more than 30 days ago would be deleted" in dry.output
    assert len(rows()) == 2, "a dry run deletes nothing"
    assert "0 processed event(s)" in runner.invoke(cli, ["events", "prune", "--older-than", "40", "--dry-run"]).output

    pruned = runner.invoke(cli, ["events", "prune"])
    assert pruned.exit_code == 0 and "deleted 1 processed event(s)" in pruned.output
    assert [(r.event_id, r.status) for r in rows()] == [(parked["event_id"], EventStatus.PARKED)]


def test_prune_refuses_a_window_a_signed_request_could_still_be_replayed_in(cli, monkeypatch) -> None:
    monkeypatch.setenv("KI_DMS__SIGNATURE_TOLERANCE_SECONDS", str(12 * 3600))
    monkeypatch.setenv("KI_SWEEP__PROCESSED_EVENT_RETENTION_DAYS", "2")
    result = runner.invoke(cli, ["events", "prune", "--older-than", "1"])
    assert result.exit_code == 2 and "dms.signature_tolerance_seconds" in result.output


def test_summary_counts_events_per_status_and_failed_or_parked_ones_per_reason(cli, tmp_path: Path) -> None:
    parked = upserted("A-1", content={"url": "a.txt", "sha256": "0" * 64})
    file = write_events(tmp_path / "e.jsonl", parked, upserted("A-2"), upserted("A-3"), upserted("A-4"))
    runner.invoke(cli, ["events", "replay", str(file), "--source", "acme"])
    engine = make_engine(load_settings().database_url)
    try:
        with session_factory(engine)() as session, session.begin():
            done = [r.id for r in session.scalars(select(IngestEvent).where(IngestEvent.status == EventStatus.DONE))]
            session.execute(update(IngestEvent).where(IngestEvent.id == done[0]).values(
                status=EventStatus.FAILED, transient=True, error="OperationalError: the server closed the connection"))
            session.execute(update(IngestEvent).where(IngestEvent.id == done[1]).values(
                status=EventStatus.PARKED, error="gave up after 12 attempts (last: ConnectError: refused)"))
    finally:
        engine.dispose()
    result = runner.invoke(cli, ["events", "summary"])
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.replace("│", " ").split()) for line in result.output.splitlines()]
    assert "done 1" in lines
    assert "failed OperationalError 1 the sweep retries it" in lines
    assert "parked gave up (ConnectError) 1 needs a person: ki events redrive" in lines
    assert "parked ContentRejected 1 needs a person: ki events redrive" in lines
