"""`ki demo`: ingest the example corpus into a store of its own and run the self-checking tour."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from ki.errors import cli_errors

if TYPE_CHECKING:
    from ki_core.config import Settings

# The repository's examples/ (editable install, `make demo`), else ./examples.
_REPO_EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
REPO_EXAMPLES = _REPO_EXAMPLES if _REPO_EXAMPLES.is_dir() else Path("examples")


@cli_errors
def demo(
    examples: Path = typer.Option(REPO_EXAMPLES, help="Folder with demo.json and the project folders."),
    state_dir: Path = typer.Option(Path(".ki-demo"), help="Where the demo keeps its own store and index."),
) -> None:
    """Ingest examples/ (two clients behind an ethical wall) and run a tour that checks its own claims.

    Exits non-zero if any claim fails: the walled lawyer sees a walled document,
    a pasted case number does not rank first, the executed contract loses the collapse, ...
    """
    from ki.commands.storage.store import prepare_store
    from ki.demo import run_tour
    from ki_core.config import get_settings
    from ki_workers.context import reset_worker_context, worker_context

    if not (examples / "demo.json").is_file():
        raise typer.BadParameter(f"{examples} has no demo.json", param_hint="--examples")
    os.environ["KI_STATE_DIR"] = str(state_dir)
    os.environ.pop("KI_DATABASE__URL", None)
    get_settings.cache_clear()
    reset_worker_context()
    settings = get_settings()
    console = Console()
    console.print(f"[bold]LegalMemory knowledge index demo[/] — store {state_dir}/, embedder {settings.embedding.label()}")
    started = time.perf_counter()
    prepare_store(settings)
    rebuild_an_outdated_index(settings, console)
    failures = run_tour(worker_context(), examples, console)
    reset_worker_context()
    elapsed = time.perf_counter() - started
    if failures:
        console.print(f"[bold red]{len(failures)} claim(s) failed[/] in {elapsed:.0f} s")
        raise typer.Exit(1)
    console.print(f"[bold green]all claims held[/] in {elapsed:.0f} s")


def rebuild_an_outdated_index(settings: Settings, console: Console) -> None:
    """The demo's store is its own: an index an older release built (another extractor or model) is
    rebuilt here, where `ki search` would refuse it and ask for `ki reindex`."""
    from ki_core.search.signature import configured_signature, recorded_signature
    from ki_workers.context import worker_context
    from ki_workers.reindex import rebuild_index

    recorded = recorded_signature(settings)
    configured = configured_signature(settings)
    if recorded is None or recorded == configured:
        return
    console.print(f"the demo index was built as \"{recorded.text()}\": rebuilding it as \"{configured.text()}\"")
    rebuild_index(worker_context())


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
