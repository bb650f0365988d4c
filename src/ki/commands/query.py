"""`ki search`, `ki get`, `ki related`, `ki decisions`, `ki serve`, `ki mcp`: the read side from a terminal."""

from __future__ import annotations

import json
from datetime import date
from enum import Enum
from functools import cache
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from ki.errors import cli_errors

if TYPE_CHECKING:
    from ki_core.search.types import SearchFilters

decisions_app = typer.Typer(help="Decision records: what changed, why, and on which evidence.", no_args_is_help=True)
console = Console()

AS_HELP = "Principal to search as (repeat for groups); results are limited to what these may see."


@cache
def _service():
    from ki_core.config import load_settings
    from ki_query.retrieval import retrieval_service_from_settings

    return retrieval_service_from_settings(load_settings())


def _project_id(name: str | None) -> str | None:
    if name is None:
        return None
    from sqlalchemy import select

    from ki_core.models import Project

    with _service()._session() as session:
        found = session.scalar(select(Project.id).where((Project.name == name) | (Project.id == name)))
    if found is None:
        raise typer.BadParameter(f"no project {name!r}", param_hint="--project")
    return found


def _matter_id(name: str | None, project_id: str | None) -> str | None:
    if name is None:
        return None
    from sqlalchemy import select

    from ki_core.models import Matter

    with _service()._session() as session:
        stmt = select(Matter.id).where((Matter.name == name) | (Matter.id == name))
        if project_id:
            stmt = stmt.where(Matter.project_id == project_id)
        found = session.scalars(stmt).all()
    if len(found) != 1:
        raise typer.BadParameter(f"{'no' if not found else 'more than one'} matter {name!r}", param_hint="--matter")
    return found[0]


def _filters(project, matter, doc_type, status, language, date_from, date_to, clause_type, chunk_kind) -> SearchFilters:
    from ki_core.search.types import SearchFilters

    project_id = _project_id(project)
    return SearchFilters(
        project_id=project_id, matter_id=_matter_id(matter, project_id), doc_type=doc_type, version_status=status,
        language=language, date_from=date_from, date_to=date_to, clause_type=clause_type, chunk_kind=chunk_kind,
    )


def _parse_date(value: str | None) -> date | None:
    return date.fromisoformat(value) if value else None


@cli_errors
def search(
    query: str = typer.Argument(..., help="Words, a pasted case number or a § reference."),
    as_: list[str] = typer.Option(..., "--as", help=AS_HELP),
    project: str | None = typer.Option(None, help="Project name or id."),
    matter: str | None = typer.Option(None, help="Matter name or id."),
    doc_type: str | None = typer.Option(None, "--doc-type", help="Ontology node, e.g. doc_type:contract (subtree)."),
    status: str | None = typer.Option(None, help="draft, final, executed or unknown."),
    language: str | None = typer.Option(None),
    date_from: str | None = typer.Option(None, "--date-from", help="YYYY-MM-DD"),
    date_to: str | None = typer.Option(None, "--date-to", help="YYYY-MM-DD"),
    clause_type: str | None = typer.Option(None, "--clause-type"),
    chunk_kind: str | None = typer.Option(None, "--chunk-kind", help="chunk, profile or clause."),
    offset: int = typer.Option(0, min=0),
    limit: int = typer.Option(10, min=1),
    explain: bool = typer.Option(False, help="Show legs, fused score, boost and the grant path per hit."),
    as_json: bool = typer.Option(False, "--json", help="Print the response as JSON."),
) -> None:
    """Search the index as a principal: access scope first, then the three legs, fusion and verification."""
    from ki_core.config import load_settings
    from ki_query.types import SearchRequest, check_query_length

    check_query_length(query, load_settings().retrieval.max_query_chars)  # before the index is opened
    filters = _filters(project, matter, doc_type, status, language, _parse_date(date_from), _parse_date(date_to), clause_type, chunk_kind)
    response = _service().search(SearchRequest(query=query, filters=filters, offset=offset, limit=limit, explain=explain), as_)
    if as_json:
        typer.echo(response.model_dump_json(indent=2))
        return
    print_hits(response.hits, title=f"{query!r} as {', '.join(as_)}", explain=explain)


def print_hits(hits, title: str, explain: bool = False) -> None:
    table = Table(title=title, show_lines=True)
    for column in ("#", "score", "document", "version", "excerpt"):
        table.add_column(column, overflow="fold")
    for n, hit in enumerate(hits, start=1):
        citation = hit.citation
        version = f"{citation.version.label or citation.version.id[:8]} ({citation.version.status})"
        ids = f"\n[cyan]{', '.join(hit.matched_identifiers)}[/]" if hit.matched_identifiers else ""
        table.add_row(str(n), f"{hit.score:.4f}", f"{citation.document.title or citation.document.key}\n[dim]{citation.project.name}[/]{ids}",
                      version, citation.excerpt[:240])
        if explain and hit.explain is not None:
            table.add_row("", "", "[dim]explain[/]", "", f"[dim]{_explain_line(hit.explain)}[/]")
    console.print(table if hits else f"{title}: no hits")


def _explain_line(explanation) -> str:
    data = explanation.model_dump(mode="json")
    return json.dumps(data, ensure_ascii=False)[:600]


@cli_errors
def search_filter_command(
    as_: list[str] = typer.Option(..., "--as", help=AS_HELP),
    project: str | None = typer.Option(None),
    matter: str | None = typer.Option(None),
    doc_type: str | None = typer.Option(None, "--doc-type"),
    status: str | None = typer.Option(None),
    date_from: str | None = typer.Option(None, "--date-from"),
    date_to: str | None = typer.Option(None, "--date-to"),
    offset: int = typer.Option(0, min=0),
    limit: int = typer.Option(10, min=1),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List documents by metadata only, newest first (no query text, no embedding)."""
    filters = _filters(project, matter, doc_type, status, None, _parse_date(date_from), _parse_date(date_to), None, None)
    response = _service().search_filter(filters, as_, offset, limit)
    if as_json:
        typer.echo(response.model_dump_json(indent=2))
        return
    print_hits(response.hits, title=f"filter {filters.model_dump(exclude_none=True)} as {', '.join(as_)}")


@cli_errors
def get(document_id: str, as_: list[str] = typer.Option(..., "--as", help=AS_HELP)) -> None:
    """Show one document with its visible versions and sources."""
    typer.echo(_service().get_document(document_id, as_).model_dump_json(indent=2))


@cli_errors
def related(
    document_id: str,
    as_: list[str] = typer.Option(..., "--as", help=AS_HELP),
    kind: list[str] = typer.Option([], help="Relation kinds to follow (default all)."),
    depth: int = typer.Option(1, min=1, max=3, help="Relation hops to follow (1 to 3)."),
) -> None:
    """Follow relations from a document; every neighbour is checked against the caller's access."""
    result = _service().traverse(document_id, as_, kind or None, depth)
    typer.echo(result.model_dump_json(indent=2))


@decisions_app.command("add")
@cli_errors
def decisions_add(
    project: str = typer.Option(..., help="Project name or id."),
    locus: str = typer.Option(..., help='Where, e.g. "§ 6 Haftung".'),
    change: str = typer.Option(..., "--change", help="What changed."),
    rationale: str = typer.Option("", help="Why."),
    evidence: list[str] = typer.Option(..., help="Evidence version id (repeat)."),
    as_: list[str] = typer.Option(..., "--as", help="The recording principal; must see all evidence."),
) -> None:
    """Record a decision with its evidence."""
    from ki_query.types import DecisionEvidenceRef, NewDecision

    decision = NewDecision(project_id=_project_id(project), locus=locus, change_summary=change, rationale=rationale,
                           evidence=tuple(DecisionEvidenceRef(version_id=v) for v in evidence), decided_by=as_[0])
    typer.echo(_service().add_decision(decision, as_).model_dump_json(indent=2))


@decisions_app.command("search")
@cli_errors
def decisions_search(query: str, as_: list[str] = typer.Option(..., "--as", help=AS_HELP), limit: int = 10) -> None:
    """Decision records matching the words, if the caller may see all of their evidence."""
    from ki_core.config import load_settings
    from ki_query.types import check_query_length

    check_query_length(query, load_settings().retrieval.max_query_chars)
    hits = _service().search_decisions(query, as_, limit)
    table = Table(title=f"decisions for {query!r}")
    for column in ("score", "locus", "change", "rationale"):
        table.add_column(column, overflow="fold")
    for hit in hits:
        table.add_row(f"{hit.score:.2f}", hit.locus, hit.change_summary, hit.rationale[:200])
    console.print(table if hits else "no decision records")


def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8000),
) -> None:
    """Serve the query API (/v1), MCP for AI assistants (/mcp) and the DMS webhook ingress in one process."""
    import uvicorn

    uvicorn.run("ki.asgi:create_all_in_one", factory=True, host=host, port=port)


class McpTransport(str, Enum):
    stdio = "stdio"
    http = "http"


@cli_errors
def mcp(
    transport: McpTransport = typer.Option(McpTransport.stdio, help="stdio (one API key) or http (many users)."),
    api_key: str | None = typer.Option(None, envvar="KI_MCP_API_KEY",
                                       help="stdio only: the API key whose principals the tools act for."),
    host: str = typer.Option("127.0.0.1", help="http only: interface to bind."),
    port: int = typer.Option(8001, help="http only: port; the endpoint is /mcp."),
) -> None:
    """Serve the MCP tools to AI assistants, over stdio or Streamable HTTP.

    --transport stdio (default): one assistant on this machine, acting as
    the principals of one API key (--api-key or KI_MCP_API_KEY).

    --transport http: http://HOST:PORT/mcp for many users at once. Every
    request must carry `Authorization: Bearer <API key or user JWT>`, the
    credentials of the HTTP API; each call acts for that caller's
    principals only, and a missing or unknown credential gets 401.
    `ki serve` and the `api` process serve the same at /mcp.
    """
    if transport is McpTransport.http:
        _serve_mcp_http(api_key, host, port)
        return
    from ki_core.config import load_settings
    from ki_query.identity import identity_from_api_key
    from ki_query.mcp_server import create_mcp_server

    if not api_key:
        raise typer.BadParameter("stdio serves one identity: give --api-key or KI_MCP_API_KEY", param_hint="--api-key")
    identity = identity_from_api_key(load_settings(), api_key)
    create_mcp_server(_service, identity).run("stdio")


def _serve_mcp_http(api_key: str | None, host: str, port: int) -> None:
    import uvicorn

    from ki_core.config import load_settings
    from ki_query.mcp_http import create_mcp_http_app

    if api_key:
        # Refused, not ignored: a server-wide key would suggest a shared identity that http never uses.
        raise typer.BadParameter("over http each request brings its own credential; drop --api-key", param_hint="--api-key")
    uvicorn.run(create_mcp_http_app(load_settings(), _service, host=host), host=host, port=port)


def register(app: typer.Typer) -> None:
    app.command("search")(search)
    app.command("list")(search_filter_command)
    app.command("get")(get)
    app.command("related")(related)
    app.add_typer(decisions_app, name="decisions")
    app.command("serve")(serve)
    app.command("mcp")(mcp)
