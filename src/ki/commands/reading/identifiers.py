"""`ki identifiers TEXT`: show the legal identifiers found in a text.

A quick way to see what the search index's identifier leg will match on:
statute references, case numbers, ECLIs, register numbers and EU references,
each with its normalized form and where it was written.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from ki_core.identifiers import Identifier


def identifiers(
    text: Annotated[str, typer.Argument(help="Text to scan; '-' reads standard input.")],
    law: Annotated[
        str | None, typer.Option("--law", help="Law a bare '§ 5' refers to, e.g. BGB (the law being read).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of a table.")] = False,
) -> None:
    """Find and normalize statute references, case numbers, ECLIs, register numbers and EU references."""
    from ki_core.identifiers import extract

    if text == "-":
        text = sys.stdin.read()
    found = extract(text, context_law=law)
    if as_json:
        typer.echo(json.dumps([i.model_dump(exclude_none=True) for i in found], ensure_ascii=False, indent=2))
        return
    console = Console(highlight=False)
    if not found:
        console.print("no identifiers found")
        return
    console.print(_table(found))


def _table(found: list[Identifier]) -> Table:
    table = Table(title=f"{len(found)} identifier{'s' if len(found) != 1 else ''}")
    table.add_column("kind")
    table.add_column("normalized", overflow="fold")
    table.add_column("as written", overflow="fold")
    table.add_column("span", justify="right", no_wrap=True)
    for item in found:
        table.add_row(item.kind, item.normalized, " ".join(item.as_written.split()), f"{item.start}-{item.end}")
    return table


def register(app: typer.Typer) -> None:
    app.command("identifiers")(identifiers)
