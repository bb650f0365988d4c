"""`ki ingest PATH --project NAME` (a folder, or one file of it), `ki worker`, `ki reindex`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ki.commands import progress_report
from ki.commands.storage.writer import no_other_writer, take_the_writer
from ki.errors import cli_errors

if TYPE_CHECKING:
    from rich.console import Console

    from ki_workers.folder_sync import FolderFile, SyncSummary


@cli_errors
def ingest(
    path: Path = typer.Argument(
        ..., exists=True, file_okay=True, dir_okay=True,
        help="Folder to ingest (recursively), or one file: then only it, as part of its folder.",
    ),
    project: str = typer.Option(..., "--project", help="Project (client) the documents belong to; created if new."),
    matter: str | None = typer.Option(None, "--matter", help="Matter for files the manifest does not assign."),
    max_file_mb: float | None = typer.Option(
        None, "--max-file-mb", min=0.001,
        help="Skip (and list) files bigger than this many MB. Default: ingest.max_file_mb (50).",
    ),
    exclude: list[str] = typer.Option(
        [], "--exclude", metavar="GLOB",
        help="Leave out files whose relative path or name matches GLOB (repeatable), e.g. --exclude '*.log'. "
        "They are not read, and not removed from the index if an earlier run added them.",
    ),
    wait: float = typer.Option(
        0.0, "--wait", metavar="SECONDS", min=0,
        help="A running `ki serve` holds the embedded index's one writer from start to stop, so ingest is "
        "refused then (exit 3, naming the holder); wait this long for it instead. Either way nothing is "
        "written before the index is ours.",
    ),
) -> None:
    """Ingest every file under PATH: convert, extract metadata, chunk, embed, index.

    An optional ki-manifest.json at the folder root groups files into versions of
    one document (status draft/final/executed, dates, matters, relations).
    Running it twice reports the second time "unchanged". A document is
    searchable a few seconds after it is done, while the rest runs; Ctrl-C
    stops after the current step, keeping what is done (run it again to go on).
    Exits 1 when any file failed, listing each with its reason; files of a
    type ki does not read are skipped and counted in one line.

    PATH may be a single file: it is ingested as part of the nearest folder
    ingested before that holds it (else its own folder), with that folder's
    manifest, and the folder's other files are left as they are.
    """
    from rich.console import Console

    from ki.commands.storage.store import prepare_store
    from ki_core.config import load_settings
    from ki_workers.context import worker_context
    from ki_workers.folder_sync import FileSelection, sync_folder

    settings = load_settings()
    prepare_store(settings)
    selection = FileSelection.from_settings(settings, max_file_mb=max_file_mb, exclude=exclude)
    ctx = worker_context()
    if settings.broker.eager:
        take_the_writer(ctx, wait, Console(stderr=True))
    console, stderr = Console(), Console(stderr=True)
    root, only, files = _files_to_read(ctx, path, selection)
    _warn_about_large_files(stderr, files, selection)
    chunks_before = _chunk_count(ctx)
    errors = 0
    try:
        with progress_report(stderr, f"ingest {project}", "files", total=len(files)) as progress:

            def on_file(relative: str, result: dict | None) -> None:
                nonlocal errors
                errors += bool(result and result["outcome"] == "failed")
                outcome = result["outcome"] if result else "queued"
                progress.advance(current=f"{outcome}: {relative}" + (f" (errors: {errors})" if errors else ""))

            def on_chunks(relative: str, done: int, total: int) -> None:
                progress.update(progress.done, current=f"{relative}: {done}/{total} chunks embedded")

            summary = sync_folder(ctx, root, project, matter, on_file=on_file, selection=selection, on_chunks=on_chunks,
                                  only=only)
    except KeyboardInterrupt:
        stderr.print("interrupted: the files finished so far are searchable; run the same ki ingest again to go on",
                      markup=False, highlight=False)
        raise typer.Exit(130) from None
    _print_summary(console, summary, _chunk_count(ctx) - chunks_before, settings.broker.eager)
    if summary.errors:
        raise typer.Exit(1)


def _files_to_read(ctx, path: Path, selection) -> tuple[Path, list[str] | None, list[FolderFile]]:
    """(folder to sync, the relative paths to sync of it: None for all, the files it will read)."""
    from ki_workers.folder_sync import file_in_folder, folder_files

    root, only = path, None
    if not path.is_dir():
        root, relative = file_in_folder(ctx, path)
        only = [relative]
    files, excluded = folder_files(root, selection, only)
    if only and not files and not excluded:
        raise typer.BadParameter(f"{path} is hidden or the folder's manifest: a folder ingest does not read it either",
                                 param_hint="PATH")
    if only:
        typer.echo(f"{only[0]}: as part of folder {root}", err=True)
    return root, only, files


def _warn_about_large_files(console: Console, files: list[FolderFile], selection) -> None:
    """Name the files that will take a while (or be skipped) before the work starts, not after."""
    for file in files:
        megabytes = file.size / (1024 * 1024)
        if selection.too_large(file.size):
            console.print(f"skipping {file.relative}: {megabytes:.1f} MB is above --max-file-mb "
                          f"{selection.max_bytes / (1024 * 1024):g}", markup=False, highlight=False)
        elif file.size >= selection.large_bytes:
            console.print(f"large file {file.relative}: {megabytes:.1f} MB, this may take a while "
                          "(leave it out with --exclude or --max-file-mb)", markup=False, highlight=False)


def _chunk_count(ctx) -> int:
    from sqlalchemy import func, select

    from ki_core.models import Chunk

    with ctx.sessions() as session:
        return session.scalar(select(func.count()).select_from(Chunk)) or 0


def _print_summary(console: Console, summary: SyncSummary, new_chunks: int, eager: bool) -> None:
    from rich.table import Table

    table = Table(title="ingest summary")
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("files", str(summary.files))
    for outcome, count in sorted(summary.outcomes.items()):
        table.add_row(outcome, str(count))
    if summary.excluded:
        table.add_row("excluded (--exclude)", str(summary.excluded))
    table.add_row("chunks added", str(new_chunks) if eager else "(workers)")
    table.add_row("removed from folder", "(not checked: single file)" if summary.pruned is None else str(summary.pruned))
    table.add_row("manifest relations added", str(summary.relations))
    console.print(table)
    for relative, reason in summary.skipped:
        console.print(f"[yellow]skipped[/] {relative}: {reason}", highlight=False)
    if summary.unsupported:
        console.print(f"[yellow]skipped[/] {_unsupported_line(summary.unsupported)}", highlight=False)
    for relative, reason in summary.errors:
        console.print(f"[red]failed[/] {relative}: {reason}", highlight=False)
    if summary.errors:
        console.print(f"{len(summary.errors)} of {summary.files} files failed", highlight=False)


def _unsupported_line(files: list[str]) -> str:
    """`3 files of a type ki does not read: .log (2), LIESMICH (1)`: one line, however many there are."""
    from collections import Counter
    from pathlib import PurePosixPath

    kinds = Counter(PurePosixPath(f).suffix.lower() or PurePosixPath(f).name for f in files)
    shown = ", ".join(f"{kind} ({count})" for kind, count in kinds.most_common())
    return f"{len(files)} file(s) of a type ki does not read: {shown}"


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
def reindex(
    replace_index: bool = typer.Option(
        False, "--replace-index",
        help="Rebuild even though the live index was filled from another database (store): that store's "
        "searches find nothing afterwards until it is reindexed itself.",
    ),
) -> None:
    """Rebuild the search index from SQL into a new index and switch to it.

    Stored vectors are reused while the embedder signature is unchanged; after
    switching embedders only chunks of the old model are embedded again. An
    index another database filled is refused unless --replace-index.
    """
    from rich.console import Console

    from ki.commands.storage.store import prepare_store
    from ki_core.config import load_settings
    from ki_workers.context import worker_context
    from ki_workers.reindex import rebuild_index

    settings = load_settings()
    prepare_store(settings)
    console = Console()
    if settings.search.backend == "embedded":
        no_other_writer(settings, Console(stderr=True))  # a running ki serve writes it: refuse now
    with progress_report(Console(stderr=True), "reindex", "versions") as progress:
        report = rebuild_index(worker_context(), on_progress=progress.update, replace_foreign=replace_index)
    console.print(
        f"rebuilt {report.target}: {report.versions} versions, {report.chunks} chunks, "
        f"{report.re_embedded_versions} versions re-embedded, "
        f"{report.caught_up_versions} written again after changing during the rebuild, "
        f"{report.re_extracted_versions} versions' metadata extracted again "
        f"({report.metadata_changed_versions} changed)"
    )


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest)
    app.command("worker")(worker)
    app.command("reindex")(reindex)
