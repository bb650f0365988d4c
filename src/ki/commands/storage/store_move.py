"""`ki store migrate --to URL`, `ki store id`, `ki store pages`: what the store is, moving it to another
database, and the page offsets of PDFs converted before ingest kept them."""

from __future__ import annotations

import typer

from ki.errors import cli_errors

store_app = typer.Typer(help="The store: its id, moving it to another database, PDF page offsets.", no_args_is_help=True)


@store_app.command("migrate")
@cli_errors
def migrate(
    to: str = typer.Option(..., "--to", metavar="URL",
                           help="The target database, e.g. postgresql+psycopg://ki:…@db:5432/ki; it must be empty."),
) -> None:
    """Copy this store (database.url) into another, empty database: every row, in one transaction.

    The copy keeps the store id, so the search index still belongs to it. Then
    set database.url to the target; to move the index to OpenSearch as well, set
    search.backend and run `ki reindex` (the stored vectors are reused, nothing
    is embedded again). The source is left as it was. See docs/production.md.
    """
    from rich.console import Console

    from ki.commands.storage.store import prepare_store
    from ki_core.config import load_settings, mask_url_password
    from ki_core.store_move import move_store

    settings = load_settings()
    prepare_store(settings)
    console = Console(stderr=True, highlight=False)

    def on_table(name: str, rows: int) -> None:
        console.print(f"copied {name}: {rows} rows", markup=False)

    report = move_store(settings.database_url, to, on_table=on_table)
    Console(highlight=False).print(
        f"moved the store to {mask_url_password(to)} (revision {report.revision}, {sum(report.rows.values())} rows). "
        "Next: set database.url to it (KI_DATABASE__URL); to move the index too, set search.backend and run ki reindex.",
        markup=False,
    )


@store_app.command("id")
@cli_errors
def store_id() -> None:
    """The store id of the configured database and of its search index (they must be equal)."""
    from ki_core.config import load_settings
    from ki_core.db import make_engine, session_factory
    from ki_core.search.index import open_index
    from ki_core.store_identity import index_location, sql_store_id

    settings = load_settings()
    engine = make_engine(settings.database_url)
    index = open_index(settings, read_only=True)
    try:
        ours, theirs = sql_store_id(session_factory(engine)), index.store_id()
    finally:
        index.close()
        engine.dispose()
    typer.echo(f"database: {ours}")
    typer.echo(f"{index_location(settings)}: {theirs or '(not claimed yet)'}")


@store_app.command("pages")
@cli_errors
def pages() -> None:
    """Record the page offsets of PDF versions converted before ingest kept them (migration 0015), from
    their files where these are unchanged in their folders; the text view then serves them page by page."""
    from ki_core.config import load_settings
    from ki_core.db import make_engine, session_factory
    from ki_workers.stages.page_offsets import record_page_starts

    engine = make_engine(load_settings().database_url)
    try:
        with session_factory(engine)() as session, session.begin():
            outcome = record_page_starts(session)
    finally:
        engine.dispose()
    for reason in outcome.skipped:
        typer.echo(f"skipped {reason}")
    typer.echo(f"{outcome.recorded} PDF version(s) got page offsets, {len(outcome.skipped)} kept none")


def register(app: typer.Typer) -> None:
    app.add_typer(store_app, name="store")
