"""`ki init`: create or upgrade the SQL schema and seed the ontology; `ki status`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from ki.errors import cli_errors

if TYPE_CHECKING:
    from ki_core.config import Settings


def prepare_store(settings: Settings) -> tuple[str | None, str | None]:
    """Migrate to head and seed the ontology; returns (revision before, revision after)."""
    from ki_core.db import make_engine, session_factory
    from ki_core.migrate import current_revision, upgrade_to_head
    from ki_core.ontology import seed_ontology

    url = settings.database_url
    before = current_revision(url)
    upgrade_to_head(url)
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session, session.begin():
            seed_ontology(session)
    finally:
        engine.dispose()
    return before, current_revision(url)


@cli_errors
def init() -> None:
    """Create the database schema, or upgrade it to the newest revision, and seed the ontology. Safe to repeat."""
    from ki_core.config import load_settings, mask_url_password

    settings = load_settings()
    before, after = prepare_store(settings)
    where = mask_url_password(settings.database_url)
    if before == after:
        Console().print(f"database {where} is up to date (revision {after})")
    else:
        Console().print(f"database {where}: {before or 'empty'} -> revision {after}")


@cli_errors
def status(errors: int = typer.Option(10, help="How many of the latest errors to show.")) -> None:
    """Counts of versions per processing state, chunks, and the latest errors."""
    from ki_core.config import load_settings
    from ki_core.models import ProcessingState

    counts, chunks, failed = _store_counts(load_settings(), errors)
    console = Console()
    table = Table(title="versions by processing state")
    table.add_column("state")
    table.add_column("versions", justify="right")
    for state in ProcessingState:
        table.add_row(state.value, str(counts.get(state, 0)))
    console.print(table)
    console.print(f"chunks in SQL: {chunks}")
    if failed:
        errors_table = Table(title="latest errors")
        errors_table.add_column("version")
        errors_table.add_column("reason")
        for version_id, reason in failed:
            errors_table.add_row(version_id, reason or "")
        console.print(errors_table)


def _store_counts(settings: Settings, errors: int) -> tuple[dict, int | None, list]:
    """(versions per processing state, chunks, the latest `errors` failed versions with their reason)."""
    from sqlalchemy import func, select

    from ki_core.db import make_engine, session_factory
    from ki_core.models import Chunk, DocumentVersion, ProcessingState

    engine = make_engine(settings.database_url)
    try:
        with session_factory(engine)() as session:
            state = DocumentVersion.processing_state
            counts = dict(session.execute(select(state, func.count()).group_by(state)).all())
            chunks = session.scalar(select(func.count()).select_from(Chunk))
            failed = session.execute(
                select(DocumentVersion.id, DocumentVersion.last_error)
                .where(state == ProcessingState.FAILED)
                .order_by(DocumentVersion.updated_at.desc())
                .limit(errors)
            ).all()
    finally:
        engine.dispose()
    return counts, chunks, list(failed)


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("status")(status)
