"""`ki eval --corpus NAME --queries FILE`: nDCG@k, Recall@k and Recall@100 of a corpus's retrieval.

Query embeddings and chunk vectors come from the on-disk embedding cache, so a second run
takes seconds. `--legs` may be repeated to compare runs (lexical, semantic, the hybrid).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from ki.errors import cli_errors

if TYPE_CHECKING:
    from ki_query.federation.evaluation import EvalReport

HYBRID = "lexical,semantic,identifier"


@cli_errors
def eval_command(
    corpus: Annotated[str, typer.Option("--corpus", help="The corpus to evaluate (ki corpus list).")],
    queries: Annotated[Path, typer.Option("--queries", exists=True, dir_okay=False, help="Eval queries (.jsonl).")],
    k: Annotated[int, typer.Option("--k", min=1, max=100, help="Cutoff of nDCG and Recall.")] = 10,
    legs: Annotated[list[str] | None, typer.Option(
        "--legs", help="Comma-separated legs of one run (repeatable): lexical, semantic, identifier.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Plain JSON with per-query scores.")] = False,
) -> None:
    """Score a corpus's ranking, overall and per query type; exclude_ids are removed first."""
    from ki_core.config import load_settings
    from ki_core.db import engine_from_settings, session_factory
    from ki_core.embedding import embedder_from_settings
    from ki_query.federation.registry import CorpusRegistry
    from ki_query.federation.evaluation import evaluate, load_queries

    settings = load_settings()
    runs = legs or [HYBRID]
    try:
        labels = [run_label(run) for run in runs]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--legs") from None
    loaded = load_queries(queries)
    engine = engine_from_settings(settings)
    registry = CorpusRegistry(settings, session_factory(engine), embedder_from_settings(settings))
    try:
        retriever = registry.retriever(corpus)
        reports = [evaluate(retriever, loaded, label=label, k=k, legs=run) for label, run in zip(labels, runs, strict=True)]
    finally:
        registry.close()
        engine.dispose()
    if as_json:
        typer.echo(json.dumps({"corpus": corpus, "runs": [r.as_dict() for r in reports]}, indent=2))
        return
    _print(corpus, reports, k)


def run_label(legs: str) -> str:
    """'lexical', 'semantic', 'lexical+semantic', ...; all three legs are 'hybrid'."""
    from ki_query.federation.corpus_retriever import parse_legs

    chosen = parse_legs(legs)
    if chosen == parse_legs(None):
        return "hybrid"
    return "+".join(sorted(leg.value for leg in chosen))


def _print(corpus: str, reports: list[EvalReport], k: int) -> None:
    from ki_query.federation.evaluation import table_header, table_rows

    table = Table(title=f"retrieval eval of corpus {corpus} ({reports[0].count()} queries)")
    for column in table_header(k):
        table.add_column(column, justify="left" if column in ("legs", "type") else "right")
    for row in table_rows(reports):
        table.add_row(*row)
    console = Console()
    console.print(table)
    console.print(", ".join(f"{r.label}: {r.seconds:.1f} s" for r in reports), style="dim")


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
