"""`ki corpus load|list|remove`: statute, contract and guideline corpora for the federation.

A corpus is registered in SQL (id, kind, index name, default container, embedding
signature and metric) and gets its own search index; `load` reads statute-format
JSON lines (plain or .gz), one Absatz per line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ki.commands import progress_report
from ki.errors import cli_errors

# The values of ki_core.models.corpora.CorpusKind, spelled out so the CLI need not import the ORM
# (SQLAlchemy, ~0.5 s) to build its options; tests/ki/test_cli_startup.py keeps the two equal.
CorpusKindName = Literal["statutes", "contracts", "guidelines"]

corpus_app = typer.Typer(help="Statute, contract and guideline corpora searched next to the firm's index.",
                         no_args_is_help=True)


@corpus_app.command("load")
@cli_errors
def load(
    name: Annotated[str, typer.Argument(help="Corpus id, e.g. 'statutes' or 'hilfsmittel-rv'.")],
    files: Annotated[list[Path], typer.Argument(help="Statute-format .jsonl or .jsonl.gz files.", exists=True,
                                                dir_okay=False)],
    kind: Annotated[CorpusKindName, typer.Option(help="What the corpus holds.")] = "statutes",
    default_container: Annotated[str | None, typer.Option(
        "--default-container", help="The container a bare '§ 10' means (default: the only one, if one).")] = None,
    title: Annotated[str | None, typer.Option(help="Name shown in answers and matched in questions.")] = None,
) -> None:
    """Register NAME and (re)load the containers in FILES into its own index. Safe to repeat."""
    from ki_core.config import load_settings
    from ki_core.db import engine_from_settings, session_factory
    from ki_core.embedding import embedder_from_settings
    from ki_core.migrate import upgrade_to_head
    from ki_core.models.corpora import CorpusKind
    from ki_query.federation.corpus_loader import load_corpus

    settings = load_settings()
    upgrade_to_head(settings.database_url)
    engine = engine_from_settings(settings)
    embedder = embedder_from_settings(settings)
    try:
        stderr = Console(stderr=True)
        with progress_report(stderr, f"embedding and indexing {name}", "units", transient=True) as progress:
            report = load_corpus(
                settings, session_factory(engine), embedder, name, files, kind=CorpusKind(kind),
                default_container=default_container, title=title, progress=progress.update,
            )  # fmt: skip
    finally:
        engine.dispose()
    Console().print(
        f"corpus [bold]{report.corpus_id}[/]: {report.records} records -> {report.units} units "
        f"({report.repealed_units} repealed) in {', '.join(report.containers)}; "
        f"{report.deleted_units} stale units removed; index {report.index_name}"
    )
    if report.merged_ids:
        shown = ", ".join(report.merged_ids[:5]) + (" …" if len(report.merged_ids) > 5 else "")
        stderr.print(f"{len(report.merged_ids)} record ids occur more than once and were merged: {shown}")


@corpus_app.command("list")
@cli_errors
def list_corpora(as_json: Annotated[bool, typer.Option("--json", help="Plain JSON.")] = False) -> None:
    """The registered corpora: kind, units, embedder, index, and whether each can answer now."""
    from ki_core.config import load_settings
    from ki_core.db import engine_from_settings, session_factory
    from ki_core.embedding import embedder_from_settings
    from ki_query.federation.registry import CorpusRegistry

    settings = load_settings()
    engine = engine_from_settings(settings)
    try:
        registry = CorpusRegistry(settings, session_factory(engine), embedder_from_settings(settings))
        diagnostics = registry.diagnostics()
    finally:
        engine.dispose()
    if as_json:
        typer.echo(json.dumps(diagnostics, indent=2, ensure_ascii=False))
        return
    _print_corpora(diagnostics)


def _print_corpora(diagnostics: dict) -> None:
    table = Table(title=f"corpora (questions are embedded with {diagnostics['query_embedder']})")
    for column in ("id", "kind", "containers", "units", "embedding", "index", "can answer now"):
        table.add_column(column, overflow="fold")
    for spec in diagnostics["corpora"]:
        answers = "yes" if spec["can_answer_now"] else f"no ({spec['cannot_answer_because']})"
        table.add_row(spec["id"], spec["kind"], ", ".join(spec["containers"]), str(spec["unit_count"]),
                      f"{spec['embedding_signature']} ({spec['metric']})", spec["index_name"], escape(answers))
    console = Console()
    console.print(table)
    if not diagnostics["corpora"]:
        console.print("no corpus is registered: ki corpus load NAME FILE... registers one")
    if diagnostics["embedding_warning"]:
        console.print(f"[yellow]warning:[/] {escape(diagnostics['embedding_warning'])}")


@corpus_app.command("remove")
@cli_errors
def remove(
    name: Annotated[str, typer.Argument(help="Corpus id, as ki corpus list shows it.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Remove corpus NAME: its search index, its units and its registration."""
    from ki_core.config import load_settings
    from ki_core.db import engine_from_settings, session_factory
    from ki_query.federation.corpus_loader import registered_corpus, remove_corpus

    settings = load_settings()
    engine = engine_from_settings(settings)
    try:
        sessions = session_factory(engine)
        target = registered_corpus(sessions, name)
        if not yes:
            typer.confirm(f"remove corpus {name} ({target.unit_count} units, index {target.index_name})?", abort=True)
        report = remove_corpus(settings, sessions, name)
    finally:
        engine.dispose()
    index = f"index {report.index_name} deleted" if report.index_removed else f"index {report.index_name} was not there"
    Console().print(f"corpus [bold]{report.corpus_id}[/] removed: {report.units} units; {index}", highlight=False,
                    soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.add_typer(corpus_app, name="corpus")
