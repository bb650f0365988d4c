"""`ki eval`: nDCG@k, Recall@k and Recall@100 of a corpus's retrieval or of the federated path,
and the verdict (found / weak / nothing relevant) on a question set.

    ki eval --corpus statutes --queries FILE [--legs ...]     one corpus retriever
    ki eval --federated --queries FILE [--baseline statutes]  every corpus (--corpus: only these; the
                                                              firm's index with --as), one corpus alone
                                                              beside it
    ki eval --verdict QUESTIONS [--corpus C ...]              the verdict of each question

Query embeddings and chunk vectors come from the on-disk embedding cache, so a second run
takes seconds. `--legs` may be repeated to compare runs (lexical, semantic, the hybrid).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from ki.errors import cli_errors

if TYPE_CHECKING:
    from ki_core.config import Settings
    from ki_query.federation.evaluation import EvalReport, FederatedEvalReport, VerdictReport
    from ki_query.federation.search import FederatedSearch

HYBRID = "lexical,semantic,identifier"


@cli_errors
def eval_command(
    corpus: Annotated[list[str] | None, typer.Option(
        "--corpus", help="The corpus to evaluate (ki corpus list); with --federated or --verdict the corpora "
                         "asked (repeatable; default all).")] = None,
    baseline: Annotated[str | None, typer.Option(
        "--baseline", help="With --federated: this corpus alone, scored beside the federation.")] = None,
    queries: Annotated[Path | None, typer.Option(
        "--queries", exists=True, dir_okay=False, help="Eval queries (.jsonl).")] = None,
    k: Annotated[int, typer.Option("--k", min=1, max=100, help="Cutoff of nDCG and Recall.")] = 10,
    legs: Annotated[list[str] | None, typer.Option(
        "--legs", help="Comma-separated legs of one run (repeatable): lexical, semantic, identifier.")] = None,
    federated: Annotated[bool, typer.Option(
        "--federated", help="Score the federated path (anchors, Verweise, quota, named first).")] = False,
    verdict: Annotated[Path | None, typer.Option(
        "--verdict", exists=True, dir_okay=False,
        help="Questions {question, expected: found | nothing relevant} (.jsonl): the verdict of each.")] = None,
    principals: Annotated[list[str] | None, typer.Option(
        "--as", help="Principal (repeatable): the firm's index joins --federated and --verdict as them.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Plain JSON with per-query scores.")] = False,
    rerank: Annotated[bool, typer.Option(
        "--rerank/--no-rerank", help="Reorder the hybrid's top with the offline reranker as configured "
                                     "(retrieval.rerank_*), or score the fused order alone.")] = True,
) -> None:
    """Score a ranking, overall and per query type (exclude_ids are removed first), or the verdicts."""
    from ki_core.config import load_settings

    settings = load_settings()
    if verdict is not None:
        _verdicts(settings, verdict, corpus, principals or [], as_json)
        return
    if queries is None:
        raise typer.BadParameter("--queries is required (or --verdict QUESTIONS)", param_hint="--queries")
    if federated:
        _federated(settings, queries, corpus, baseline, principals or [], k, as_json, rerank)
        return
    if not corpus or len(corpus) != 1:
        raise typer.BadParameter("name one corpus (or use --federated)", param_hint="--corpus")
    _single(settings, corpus[0], queries, legs, k, as_json, rerank)


def _single(
    settings: Settings, corpus: str, queries: Path, legs: list[str] | None, k: int, as_json: bool, rerank: bool = True
) -> None:
    from ki_core.db import engine_from_settings, session_factory
    from ki_core.embedding import embedder_from_settings
    from ki_query.federation.evaluation import evaluate, load_queries
    from ki_query.federation.registry import CorpusRegistry

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
        reports = [
            evaluate(retriever, loaded, label=label, k=k, legs=run, rerank=rerank)
            for label, run in zip(labels, runs, strict=True)
        ]
    finally:
        registry.close()
        engine.dispose()
    if as_json:
        typer.echo(json.dumps({"corpus": corpus, "rerank": rerank, "runs": [r.as_dict() for r in reports]}, indent=2))
        return
    _print(f"retrieval eval of corpus {corpus}{'' if rerank else ', no reranking'}", reports, k)
    _print_fusion_pays(reports, k)


def _federated(
    settings: Settings, queries: Path, corpora: list[str] | None, baseline: str | None, principals: list[str],
    k: int, as_json: bool, rerank: bool = True,
) -> None:
    from ki_query.federation.evaluation import evaluate, evaluate_federated, load_queries
    from ki_query.federation.ranking import calibration_for

    loaded = load_queries(queries)
    _record_eval(principals, queries, len(loaded), "federated")
    with open_search(settings, principals) as search:
        scale = calibration_for(search.registry.embedder.signature)
        report = evaluate_federated(lambda **wiring: search.retriever(corpora, **wiring), loaded, scale=scale, k=k,
                                    principals=principals, rerank=rerank)
        alone = [
            evaluate(search.registry.retriever(b), loaded, label=f"{b} alone", k=k, rerank=rerank)
            for b in [baseline] if b
        ]
        available = [c for c in search.registry.available() if not corpora or c in corpora]
    if as_json:
        typer.echo(json.dumps({"corpora": available, "rerank": rerank, "federated": report.as_dict(),
                               "alone": [r.as_dict() for r in alone]}, indent=2))
        return
    title = f"retrieval eval of the federation over {', '.join(available)}{'' if rerank else ', no reranking'}"
    _print(title, [report.federated, *alone], k)
    _print_effects(report, len(loaded), k)


def _verdicts(
    settings: Settings, questions: Path, corpus: list[str] | None, principals: list[str], as_json: bool
) -> None:
    from ki_query.federation.evaluation import evaluate_verdicts, load_verdict_questions

    loaded = load_verdict_questions(questions)
    _record_eval(principals, questions, len(loaded), "verdicts")
    with open_search(settings, principals) as search:
        report = evaluate_verdicts(lambda q: search.ask(q, principals, corpora=corpus), loaded)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
        return
    _print_verdicts(report)


def _record_eval(principals: list[str], path: Path, count: int, kind: str) -> None:
    """Questions run through the firm's index as principals are reads as them: one record per run, before it."""
    if principals:
        from ki.commands.reading.trail import record_read

        record_read("eval", principals, query=str(path), detail=f"{kind}: {count} questions")


@contextmanager
def open_search(settings: Settings, principals: list[str]) -> Iterator[FederatedSearch]:
    """A FederatedSearch (with the firm's index when principals are given), closed afterwards."""
    from ki_query.federation.search import FederatedSearch, firm_service_from_settings

    firm = firm_service_from_settings(settings) if principals else None
    search = FederatedSearch.from_settings(settings, firm_service=firm)
    try:
        yield search
    finally:
        search.close()
        closer = getattr(firm, "close", None)
        if closer is not None:
            closer()


def run_label(legs: str) -> str:
    """'lexical', 'semantic', 'lexical+semantic', ...; all three legs are 'hybrid'."""
    from ki_query.federation.corpus_retriever import parse_legs

    chosen = parse_legs(legs)
    if chosen == parse_legs(None):
        return "hybrid"
    return "+".join(sorted(leg.value for leg in chosen))


def _print(title: str, reports: list[EvalReport], k: int) -> None:
    from ki_query.federation.evaluation import table_header, table_rows

    table = Table(title=f"{title} ({reports[0].count()} queries)")
    for column in table_header(k):
        table.add_column(column, justify="left" if column in ("legs", "type") else "right")
    for row in table_rows(reports):
        table.add_row(*row)
    console = Console()
    console.print(table)
    console.print(", ".join(f"{r.label}: {r.seconds:.1f} s" for r in reports), style="dim")


def _print_fusion_pays(reports: list[EvalReport], k: int) -> None:
    """With the hybrid and at least two single legs among the runs: how often the hybrid is at or above the better."""
    from ki_query.federation.evaluation import at_or_above_better_leg

    single = [r for r in reports if "+" not in r.label and r.label != "hybrid"]
    hybrid = [r for r in reports if r not in single]
    if len(single) < 2:
        return
    for report in hybrid:
        wins, total = at_or_above_better_leg(report, single)
        Console().print(f"{report.label}: nDCG@{k} at or above the better of {', '.join(r.label for r in single)} "
                        f"on {wins} of {total} queries ({wins / max(total, 1):.0%})")


def _print_effects(report: FederatedEvalReport, queries: int, k: int) -> None:
    table = Table(title=f"what each mechanism does to the federated top {k}")
    for column in ("turned off", f"top {k} changed", f"ndcg@{k} without", f"recall@{k} without"):
        table.add_column(column, justify="left" if column == "turned off" else "right")
    for effect in report.effects:
        means = effect.report.means()
        table.add_row(effect.mechanism, f"{effect.changed} of {queries}", f"{means[f'ndcg@{k}']:.3f}",
                      f"{means[f'recall@{k}']:.3f}")
    console = Console()
    console.print(table)
    counts = ", ".join(f"{name}: {n}" for name, n in sorted(report.top_k_hits.items()) if n)
    console.print(f"hits in the federated top {k} of all queries: {counts}", style="dim")


def _print_verdicts(report: VerdictReport) -> None:
    table = Table(title="verdicts")
    for column in ("expected", "verdict", "best cosine", "question"):
        table.add_column(column, overflow="fold")
    for r in report.results:
        cosine = "-" if r.best_cosine is None else f"{r.best_cosine:.3f}"
        style = None if r.agrees else "bold red"
        table.add_row(r.expected, r.status, cosine, r.question, style=style)
    console = Console()
    console.print(table)
    for expected in sorted({r.expected for r in report.results}):
        agreeing, total = report.agreeing(expected)
        counts = ", ".join(f"{status} {n}" for status, n in report.counts(expected).most_common())
        console.print(f"expected {expected}: {agreeing} of {total} agree ({counts})")
    suggested = report.suggested_null_cosine()
    if suggested is not None:
        console.print(f"null cosine that separates this set best: {suggested:.3f} (ranking.NULL_COSINES)", style="dim")


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
