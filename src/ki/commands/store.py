"""`ki init`: create or upgrade the SQL schema (and the state directory)."""

from __future__ import annotations

import typer
from rich.console import Console

from ki.errors import cli_errors
from ki_core.config import load_settings, mask_url_password
from ki_core.migrate import current_revision, upgrade_to_head


@cli_errors
def init() -> None:
    """Create the database schema, or upgrade it to the newest revision. Safe to repeat."""
    settings = load_settings()
    url = settings.database_url
    before = current_revision(url)
    upgrade_to_head(url)
    after = current_revision(url)
    console = Console()
    where = mask_url_password(url)
    if before == after:
        console.print(f"database {where} is up to date (revision {after})")
    else:
        console.print(f"database {where}: {before or 'empty'} -> revision {after}")


def register(app: typer.Typer) -> None:
    app.command("init")(init)
