"""`ki ingest PATH --project NAME`, `ki worker`, `ki reindex`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import func, select

from ki.commands.store import prepare_store
from ki.errors import cli_errors
from ki_core.config import load_settings
from ki_core.models import Chunk


@cli_errors
def ingest(
    path: Path = typer.Argument(..., exists=True, file_okay=False, dir_okay=True, help="Folder to ingest (recursively)."),
    project: str = typer.Option(..., "--project", help="Project (client) the documents belong to; created if new."),
    matter: str | None = typer.Option(None, "--matter", help="Matter for files the manifest does not assign."),
) -> None:
    """Ingest every file under PATH: convert, extract metadata, chunk, embed, index.

    An optional ki-manifest.json at the folder root groups files into versions of
    one document (status draft/final/executed, dates, matters, relations).
    Running it twice reports the second time "unchanged".
    """
    from ki_workers.context import worker_context
    from ki_workers.folder_sync import sync_folder
    from ki_workers.sources.local_fs import iter_files

    settings = load_settings()
    prepare_store(settings)
    ctx = worker_context()
    console = Console()
    total = sum(1 for _ in iter_files(path))
    chunks_before = _chunk_count(ctx)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        files = progress.add_task("files", total=total, status="")
        errors = [0]

        def on_file(relative: str, result: dict | None) -> None:
            if result and result["outcome"] == "failed":
                errors[0] += 1
            outcome = result["outcome"] if result else "queued"
            progress.update(files, advance=1, status=f"{outcome}: {relative[-50:]}  errors: {errors[0]}")

        summary = sync_folder(ctx, path, project, matter, on_file=on_file)
    _print_summary(console, summary, _chunk_count(ctx) - chunks_before, settings.broker.eager)


def _chunk_count(ctx) -> int:
    with ctx.sessions() as session:
        return session.scalar(select(func.count()).select_from(Chunk)) or 0


def _print_summary(console: Console, summary, new_chunks: int, eager: bool) -> None:
    table = Table(title="ingest summary")
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("files", str(summary.files))
    for outcome, count in sorted(summary.outcomes.items()):
        table.add_row(outcome, str(count))
    table.add_row("chunks added", str(new_chunks) if eager else "(workers)")
    table.add_row("removed from folder", str(summary.pruned))
    table.add_row("manifest relations added", str(summary.relations))
    console.print(table)
    for relative, reason in summary.errors:
        console.print(f"[red]failed[/] {relative}: {reason}", highlight=False)


def worker(
    concurrency: int = typer.Option(1, help="Worker processes; the embedded index allows one writer."),
    queues: str = typer.Option("ki.ingest,ki.index,ki.access,ki.maintenance", help="Queues to consume."),
    loglevel: str = typer.Option("INFO", help="Log level."),
) -> None:
    """Start a Celery worker on the configured broker (`broker.eager` must be false)."""
    from ki_workers.app import app as celery_app

    pool = "solo" if concurrency == 1 else "prefork"
    celery_app.worker_main(["worker", f"--concurrency={concurrency}", f"--pool={pool}", f"--queues={queues}", f"--loglevel={loglevel}"])


@cli_errors
def reindex() -> None:
    """Rebuild the search index from SQL into a new index and switch to it.

    Stored vectors are reused while the embedder signature is unchanged; after
    switching embedders only chunks of the old model are embedded again.
    """
    from ki_workers.context import worker_context
    from ki_workers.reindex import rebuild_index

    settings = load_settings()
    prepare_store(settings)
    console = Console()
    with Progress(TextColumn("versions"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("versions", total=None)

        def on_progress(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        report = rebuild_index(worker_context(), on_progress=on_progress)
    console.print(
        f"rebuilt {report.target}: {report.versions} versions, {report.chunks} chunks, "
        f"{report.re_embedded_versions} versions re-embedded, "
        f"{report.caught_up_versions} written again after changing during the rebuild"
    )


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest)
    app.command("worker")(worker)
    app.command("reindex")(reindex)
