"""`ki audit`: the operator's view of the audit trail (who searched for what, who read which document).

An operator command on the store itself: it has no `--as`, and reading the trail
is not recorded (the operator holds the store's files anyway). Over HTTP and on
the web page only admin principals see it, and their looking is recorded.
"""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from ki.errors import cli_errors

if TYPE_CHECKING:
    from ki_core.audit import AuditEntry

console = Console()
CSV_COLUMNS = ("at", "subject", "principals", "surface", "action", "query", "hit_count", "document_id",
               "document_ids", "detail", "group", "member", "event_id")


def _moment(value: str | None, option: str) -> datetime | None:
    """An ISO date or time; without a zone it is UTC."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not an ISO date or time (2026-12-07 or 2026-12-07T14:30)",
                                 param_hint=option) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@cli_errors
def audit(
    user: str | None = typer.Option(None, "--user", help="Only this caller (a user, key:<name>, operator:<login>, "
                                    "source:<name>), records made as this principal, or its membership changes."),
    group: str | None = typer.Option(None, "--group", help="Only membership changes of this group (as stored)."),
    document: str | None = typer.Option(None, "--document", help="Only records naming this document id."),
    since: str | None = typer.Option(None, "--since", help="From this ISO date/time on (UTC unless it says)."),
    until: str | None = typer.Option(None, "--until", help="Before this ISO date/time."),
    limit: int = typer.Option(50, "--limit", min=1, max=100_000, help="At most this many, newest first."),
    csv_file: Path | None = typer.Option(None, "--csv", dir_okay=False, help="Write the records to this CSV file."),
    as_json: bool = typer.Option(False, "--json", help="Print the records as JSON lines."),
) -> None:
    """The newest audit records: time, caller, surface, action, query text or document id."""
    from ki_core.config import load_settings
    from ki_core.audit import AuditFilter, audit_log

    where = AuditFilter(user=user, document=document, group=group, since=_moment(since, "--since"), until=_moment(until, "--until"),
                        limit=limit)
    entries = audit_log(load_settings()).entries(where)
    if csv_file is not None:
        write_csv(csv_file, entries)
        console.print(f"{len(entries)} records written to {csv_file}")
    elif as_json:
        for entry in entries:
            typer.echo(entry.model_dump_json())
    else:
        _print_table(entries)


def write_csv(path: Path, entries: list[AuditEntry]) -> None:
    """One row per record; lists as JSON arrays, so the file reads back into the same records."""
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for entry in entries:
            row = entry.model_dump(mode="json")
            row["principals"], row["document_ids"] = json.dumps(row["principals"]), json.dumps(row["document_ids"])
            writer.writerow({k: "" if row[k] is None else row[k] for k in CSV_COLUMNS})


def _print_table(entries: list[AuditEntry]) -> None:
    table = Table("time (UTC)", "principal", "surface", "action", "query or document", "hits")
    for entry in entries:
        what = entry.query if entry.query is not None else (entry.document_id or _membership(entry))
        table.add_row(entry.at.strftime("%Y-%m-%d %H:%M:%S") if entry.at else "", entry.subject, entry.surface.value,
                      entry.action.value, what, "" if entry.hit_count is None else str(entry.hit_count))
    console.print(table if entries else "no audit records")


def _membership(entry: AuditEntry) -> str:
    """A sync's membership change as one cell: `partner +anna (event E-17)`."""
    if entry.group is None:
        return ""
    sign = "+" if entry.action.value == "member_added" else "-"
    return f"{entry.group} {sign}{entry.member} (event {entry.event_id})"


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)
