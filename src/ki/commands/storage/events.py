"""`ki events replay | list | redrive | prune`: the DMS event inbox for operators.

Replay feeds a file of events through the webhook's validation and processing
path (without HTTP and signatures: the file is the operator's own), so a
DMS export, a captured stream or a hand-written fix goes the same way.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Literal

import typer
from rich.console import Console
from rich.table import Table

from ki.commands.storage.store import prepare_store
from ki.errors import cli_errors

# The values of ki_core.models.EventStatus, spelled out so the CLI need not import the ORM (SQLAlchemy,
# ~0.5 s) to build its options; tests/ki/test_cli_startup.py keeps the two equal.
EventStatusName = Literal["received", "queued", "processing", "done", "failed", "parked"]

events_app = typer.Typer(help="The inbox of DMS events: replay a file, list, re-drive, prune.", no_args_is_help=True)
console = Console()
SHOWN_INVALID = 10


@events_app.command("replay")
@cli_errors
def replay(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="JSON Lines: one event per line."),
    source: str = typer.Option(..., "--source", help="The configured DMS source (dms.sources.<name>) the events are from."),
) -> None:
    """Validate, store and process every event of FILE; print a summary per event type.

    Event ids already in the inbox count as duplicates and are not processed
    again. With `broker.eager` (the embedded default) processing happens here;
    otherwise the workers do it and the summary shows the events as queued.
    """
    from ki_core.config import load_settings
    from ki_workers.context import worker_context
    from ki_workers.event_inbox import submit_event
    from ki_workers.sources.dms_events import EventSchemaError

    settings = load_settings()
    prepare_store(settings)
    ctx = worker_context()
    outcomes: Counter[tuple[str, str]] = Counter()
    row_ids: list[str] = []
    invalid: list[str] = []
    with file.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            event_type = "?"
            try:
                data = json.loads(line)
                event_type = str(data.get("type", "?")) if isinstance(data, dict) else "?"
                accepted = submit_event(settings, ctx.sessions, source, data)
            except (json.JSONDecodeError, EventSchemaError) as exc:
                outcomes[(event_type, "invalid")] += 1
                invalid.append(f"line {number}: {exc}")
                continue
            outcomes[(event_type, str(accepted.outcome))] += 1
            row_ids.append(accepted.row_id)
    _print_replay(ctx, outcomes, row_ids, invalid)
    if invalid:
        raise typer.Exit(1)


def _print_replay(ctx, outcomes: Counter, row_ids: list[str], invalid: list[str]) -> None:
    from sqlalchemy import select

    from ki_core.models import EventStatus, IngestEvent

    statuses: Counter[tuple[str, str]] = Counter()
    with ctx.sessions() as session:
        for start in range(0, len(row_ids), 500):
            batch = row_ids[start : start + 500]
            for event_type, status in session.execute(
                select(IngestEvent.event_type, IngestEvent.status).where(IngestEvent.id.in_(batch))
            ):
                statuses[(event_type, str(status))] += 1
    table = Table(title="replay summary")
    columns = ["accepted", "duplicate", "invalid", *(s.value for s in EventStatus)]
    table.add_column("type")
    for column in columns:
        table.add_column(column, justify="right")
    types = sorted({t for t, _ in outcomes} | {t for t, _ in statuses})
    for event_type in types:
        cells = [outcomes[(event_type, c)] for c in columns[:3]] + [statuses[(event_type, s.value)] for s in EventStatus]
        table.add_row(event_type, *(str(c) for c in cells))
    console.print(table)
    for problem in invalid[:SHOWN_INVALID]:
        console.print(f"[red]invalid[/] {problem}", highlight=False)
    if len(invalid) > SHOWN_INVALID:
        console.print(f"... and {len(invalid) - SHOWN_INVALID} more invalid lines")


@events_app.command("list")
@cli_errors
def list_(
    status: EventStatusName | None = typer.Option(None, "--status", help="Only events in this status."),
    event_type: str | None = typer.Option(None, "--type", help="Only events of this type."),
    limit: int = typer.Option(50, help="How many, newest first."),
) -> None:
    """Events in the inbox, newest first, with attempts and the last error or note."""
    from ki_core.config import load_settings
    from ki_core.models import EventStatus
    from ki_workers.context import worker_context
    from ki_workers.event_inbox import list_events

    load_settings()
    wanted = EventStatus(status) if status else None
    with worker_context().sessions() as session:
        found = list_events(session, status=wanted, event_type=event_type, limit=limit)
    table = Table(title="events")
    for column in ("id", "source", "event id", "type", "status", "attempts", "received", "error / note"):
        table.add_column(column, overflow="fold")
    for row, source_name in found:
        table.add_row(row.id, source_name, row.event_id, row.event_type, row.status.value, str(row.attempts),
                      row.received_at.strftime("%Y-%m-%d %H:%M:%S"), row.error or "")
    console.print(table if found else "no events")


@events_app.command("summary")
@cli_errors
def summary() -> None:
    """How many events are in each status, and why the failed and parked ones stopped."""
    from ki_core.config import load_settings
    from ki_core.models import EventStatus
    from ki_workers.context import worker_context
    from ki_workers.event_inbox import event_counts

    load_settings()
    with worker_context().sessions() as session:
        counts = event_counts(session)
    table = Table(title="events by status and reason")
    for column in ("status", "reason", "count", "next"):
        table.add_column(column, overflow="fold")
    for c in counts:
        after = {EventStatus.FAILED: "the sweep retries it" if c.transient else "needs a person: ki events redrive",
                 EventStatus.PARKED: "needs a person: ki events redrive"}.get(c.status, "")
        table.add_row(c.status.value, c.reason, str(c.count), after)
    console.print(table if counts else "no events")


@events_app.command("redrive")
@cli_errors
def redrive(reference: str = typer.Argument(..., help="Row id (from `ki events list`) or event id.")) -> None:
    """Send a failed, parked or stuck event through processing again (attempts start over)."""
    from ki_core.config import load_settings
    from ki_workers.context import worker_context
    from ki_workers.event_inbox import redrive_event

    console.print("event " + redrive_event(load_settings(), worker_context().sessions, reference))


@events_app.command("prune")
@cli_errors
def prune(
    older_than: int | None = typer.Option(
        None, "--older-than", min=1, help="Days since the event finished (default: sweep.processed_event_retention_days)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only count what would be deleted."),
) -> None:
    """Delete processed (done) events finished more than DAYS ago; open, failed and parked events stay.

    The sweep does the same every run with the configured retention; this is for
    a backlog or a shorter window now.
    """
    from ki_core.config import load_settings
    from ki_workers.context import worker_context
    from ki_workers.event_retention import count_prunable, prunable_before, prune_processed_events

    settings = load_settings()
    days = older_than or settings.sweep.processed_event_retention_days
    cutoff = prunable_before(settings.dms, timedelta(days=days))
    ctx = worker_context()
    if dry_run:
        with ctx.sessions() as session:
            count = count_prunable(session, cutoff)
        console.print(f"{count} processed event(s) finished more than {days} days ago would be deleted (dry run)")
        return
    count = prune_processed_events(ctx.sessions, cutoff)
    console.print(f"deleted {count} processed event(s) finished more than {days} days ago")


def register(app: typer.Typer) -> None:
    app.add_typer(events_app, name="events")
