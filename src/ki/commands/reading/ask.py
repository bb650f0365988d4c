"""`ki ask QUESTION --as PRINCIPAL`: federated search over the statute corpora and the firm's index."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ki.commands.reading.trail import record_read
from ki.errors import cli_errors

if TYPE_CHECKING:
    from ki_query.federation.search import FederatedAnswer

EXCERPT_CHARS = 160


@cli_errors
def ask(
    question: Annotated[str, typer.Argument(help="The question, e.g. 'Kündigungsfrist für Wohnraum?'.")],
    principals: Annotated[list[str], typer.Option("--as", help="Principal asking (repeatable), e.g. user:anna.")],
    corpora: Annotated[list[str] | None, typer.Option("--corpus", help="Search only this corpus (repeatable).")] = None,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=100, help="Number of results.")] = 8,
    as_json: Annotated[bool, typer.Option("--json", help="Plain JSON.")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="Show corpus selection and diagnostics.")] = False,
) -> None:
    """Ask every selected corpus at once; hits show corpus, address, retrieval kinds and score."""
    from ki_query.federation.errors import check_question

    check_question(question)  # before settings, models and indexes: "" or "?" is a usage error (exit 2)

    from ki_core.config import load_settings
    from ki_query.federation.search import FederatedSearch, firm_service_from_settings

    settings = load_settings()
    firm_service = firm_service_from_settings(settings) if not corpora or "firm" in corpora else None
    search = FederatedSearch.from_settings(settings, firm_service=firm_service)
    try:
        answer = search.ask(question, principals, corpora=corpora, top_k=top_k, explain=explain)
    finally:
        search.close()
        closer = getattr(firm_service, "close", None)
        if closer is not None:
            closer()
    record_read("ask", principals, query=question, shown=answer.hits)
    if as_json:
        typer.echo(answer.model_dump_json(indent=2))
        return
    _print(answer)


def _print(answer: FederatedAnswer) -> None:
    console = Console(highlight=False)
    if answer.selection is not None:
        _print_selection(console, answer.selection)
    table = Table(title=f"{len(answer.hits)} hits for: {answer.question}")
    for column in ("#", "corpus", "address", "kinds", "rank", "score", "text"):
        table.add_column(column, overflow="fold")
    for number, hit in enumerate(answer.hits, start=1):
        rank = "-" if hit.rank_score is None else f"{hit.rank_score:.3f}"
        text = " ".join(hit.text.split())
        table.add_row(str(number), hit.corpus_id, hit.address or "-", ", ".join(hit.retrieval_kinds), rank,
                      f"{hit.score:.3f}", text[:EXCERPT_CHARS] + ("…" if len(text) > EXCERPT_CHARS else ""))
    console.print(table)
    console.print(escape(f"verdict: {answer.verdict.status} ({answer.verdict.reason})"), soft_wrap=True)
    if answer.candidates.cut_at_cap:
        console.print(f"[yellow]cut:[/] {answer.candidates.candidates} candidates, cut at the cap "
                      f"of {answer.candidates.cap}", soft_wrap=True)
    if answer.diagnostics is not None:
        console.print(json.dumps(answer.diagnostics, indent=2, ensure_ascii=False, default=str))


def _print_selection(console: Console, selection: dict) -> None:
    """Which corpora were asked, which were left out and why, and the steps a failing provider skipped."""
    console.print(f"corpora available {selection['available']}, routed {selection['routed']}, "
                  f"required {selection['required']}, selected {selection['selected']}", soft_wrap=True)
    if selection.get("always_selected"):
        console.print(f"always asked (outside the corpus cap): {selection['always_selected']}", soft_wrap=True)
    for corpus_id, why in (selection.get("left_out") or {}).items():
        console.print(escape(f"left out {corpus_id}: {why}"), soft_wrap=True)
    for step in selection.get("skipped") or ():
        console.print(f"[yellow]skipped:[/] {escape(step)}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("ask")(ask)
