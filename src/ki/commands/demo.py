"""`ki demo`: the guided tour of the product on the embedded default.

Today it initialises the embedded store and lists the tour; the retrieval
issue turns each step into a real, self-checking search.
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from ki.errors import cli_errors
from ki_core.config import load_settings, mask_url_password
from ki_core.migrate import upgrade_to_head

TOUR = [
    ("ingest", "examples/ into the embedded store (SQLite + tantivy/faiss), with progress bars"),
    ("ethical wall", "the same query as two lawyers; the walled one sees no walled document"),
    ("case number", "a pasted Aktenzeichen finds its decision first"),
    ("filter only", "documents of one matter by date, no query text"),
    ("traversal", "from the contract to its annex and the reply letter"),
    ("explain", "legs, fused score, boost and the grant path behind one hit"),
]


@cli_errors
def demo() -> None:
    """Set up the embedded store and run the tour of the product."""
    settings = load_settings()
    upgrade_to_head(settings.database_url)
    console = Console()
    console.print(f"[bold]store ready:[/] {mask_url_password(settings.database_url)}")
    table = Table(title="The tour (steps arrive with the ingestion and retrieval issues)")
    table.add_column("step")
    table.add_column("what it will show")
    for step, what in TOUR:
        table.add_row(step, what)
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
