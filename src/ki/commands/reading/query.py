"""`ki search`, `ki get`, `ki related`, `ki decisions`, `ki serve`, `ki mcp`: the read side from a terminal."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from enum import Enum
from functools import cache
from typing import TYPE_CHECKING

import typer
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from ki.commands.reading.trail import record_read
from ki.errors import cli_errors

if TYPE_CHECKING:
    from ki_core.search.types import SearchFilters
    from ki_query.id_prefix import IdKind
    from ki_query.types import DocumentView, Hit, HitExplanation, SourceRef, TraversalResult, VersionRef

decisions_app = typer.Typer(help="Decision records: what changed, why, and on which evidence.", no_args_is_help=True)
console = Console()

AS_HELP = "Principal to search as (repeat for groups); results are limited to what these may see."
STRICT_HELP = "Exit 2 when an --as principal is unknown to this store (no grant, group, alias or API key names it)."


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


def warn_unknown(principals: list[str], strict: bool = False) -> None:
    """One stderr line naming --as principals the store knows nothing of: "no hits" then reads as a typo, not
    as an empty result. Exit 0 stays unless --strict (exit 2, a usage error)."""
    from ki_core.principals import unknown_warning

    unknown = _service().access.unknown_principals(principals)
    if unknown:
        typer.echo(unknown_warning(unknown), err=True)
        if strict:
            raise typer.Exit(2)


def _parse_date(value: str | None) -> date | None:
    return date.fromisoformat(value) if value else None


def _visible_id(kind: IdKind, reference: str, principals: list[str]) -> str:
    """The whole id of what the caller may see that REFERENCE (an id or a unique prefix) names."""
    from ki_core.principals import viewer_for
    from ki_query.id_prefix import resolve_visible_id

    service = _service()
    with service._session() as session:
        return resolve_visible_id(session, viewer_for(session, principals, service.settings), kind, reference)


def _matter_names(views: Iterable[DocumentView]) -> dict[str, str]:
    """{matter id: name} of the documents shown; a visible document's matter is no secret."""
    from sqlalchemy import select

    from ki_core.acl import in_set
    from ki_core.models import Matter

    ids = {view.matter_id for view in views if view.matter_id}
    if not ids:
        return {}
    with _service()._session() as session:
        return dict(session.execute(select(Matter.id, Matter.name).where(in_set(Matter.id, ids))).all())


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
    sort: str = typer.Option("relevance", help="relevance, date_desc (newest first) or date_asc."),
    as_json: bool = typer.Option(False, "--json", help="Print the response as JSON (with facets)."),
    strict: bool = typer.Option(False, "--strict", help=STRICT_HELP),
) -> None:
    """Search the index as a principal: access scope first, then the three legs, fusion and verification.

    Query language: "exact phrase", -exclude, NOT, OR, (parentheses), Kündig*, and the fields
    typ: projekt: mandat: datum:YYYY-MM-DD..YYYY-MM-DD gericht: az: norm:. A citation after - or
    NOT, or opening an operand in parentheses, is the citation (-§ 573c BGB, -Az.5U12/21,
    -(§ 573c BGB), (§ 573c BGB OR § 574 BGB)); norm:§§ 573, 574 means either section, in any law;
    norm:§§ 573-575 BGB the range (letter sections inside it too, at most 50 numbers); norm:DSGVO
    the act and every article of it."""
    from ki_core.config import load_settings
    from ki_query.query_language.parser import parse_query
    from ki_query.types import SearchRequest, check_query_length

    check_query_length(query, load_settings().retrieval.max_query_chars)  # before the index is opened
    parse_query(query)  # a malformed query is refused before the index is opened, too
    warn_unknown(as_, strict)
    filters = _filters(project, matter, doc_type, status, language, _parse_date(date_from), _parse_date(date_to), clause_type, chunk_kind)
    request = SearchRequest(query=query, filters=filters, offset=offset, limit=limit, explain=explain, sort=sort,
                            facets=as_json)  # fmt: skip
    response = _service().search(request, as_)
    record_read("search", as_, query=query, shown=response.hits)
    if as_json:
        typer.echo(response.model_dump_json(indent=2))
        return
    title = escape(f"{query!r} as {', '.join(as_)}")
    console.print(_hits_view(response.hits, title, ranked=True) if response.hits else f"{title}: no hits")
    console.print(_count_line(response.total, response.total_is_estimate, response.match))
    if explain:
        for n, hit in enumerate(response.hits, start=1):
            if hit.explain is not None:
                console.print(_explain_tree(n, hit, hit.explain))


# Below this many columns the five-column table squeezes the excerpt into a sliver: one block per hit instead.
WIDE_COLUMNS = 120


def _hits_view(hits: list[Hit], title: str, ranked: bool) -> Table | Group:
    return _hits_table(hits, title, ranked) if console.width >= WIDE_COLUMNS else _hits_blocks(hits, title, ranked)


def _hits_blocks(hits: Iterable[Hit], title: str, ranked: bool) -> Group:
    """The narrow layout: each hit as a few full-width lines (title and score, files, ids, version, excerpt)."""
    blocks: list[str] = [f"[bold]{title}[/]"]
    for n, hit in enumerate(hits, start=1):
        citation = hit.citation
        score = f"  [dim]score[/] {hit.score:.4f}" if ranked else ""
        files = ", ".join(_file_names(citation.source_objects)) or citation.document.key
        ids = f"\n   [cyan]{escape(', '.join(hit.matched_identifiers))}[/]" if hit.matched_identifiers else ""
        blocks.append(
            f"\n{n}. [bold]{escape(citation.document.title or citation.document.key)}[/]{score}\n"
            f"   {escape(files)} [dim]({escape(citation.project.name)})[/]\n"
            f"   {_version_cell(citation.version).replace(chr(10), ', ')}{ids}\n"
            f"   [dim]doc[/] {hit.document_id}\n   [dim]ver[/] {hit.version_id}\n"
            f"   {escape(citation.excerpt[:240])}"
        )
    return Group(*blocks)


def _count_line(total: int, estimate: bool, match: str) -> str:
    """"23 Treffer" (about, for a ranked query), and a warning when the best hit answers the query poorly."""
    count = f"{'about ' if estimate else ''}{total} documents match"
    return count if match == "strong" else f"{count} · no good match ({match})"


def _hits_table(hits: Iterable[Hit], title: str, ranked: bool) -> Table:
    """One row per hit; ids in full, since `ki get`, `ki related` and `ki access explain` take them."""
    table = Table(title=title, show_lines=True)
    columns = ("#", "score", "document", "version", "excerpt") if ranked else ("#", "document", "version", "excerpt")
    for column in columns:
        table.add_column(column, overflow="fold", min_width=36 if column == "document" else None)
    for n, hit in enumerate(hits, start=1):
        citation = hit.citation
        ids = f"\n[cyan]{escape(', '.join(hit.matched_identifiers))}[/]" if hit.matched_identifiers else ""
        document = _document_cell(citation.document.title, citation.document.key, citation.source_objects,
                                  citation.project.name, hit.document_id)
        score = (f"{hit.score:.4f}",) if ranked else ()
        table.add_row(str(n), *score, f"{document}\n[dim]ver[/] {hit.version_id}{ids}",
                      _version_cell(citation.version), escape(citation.excerpt[:240]))
    return table


def _document_cell(title: str | None, key: str, sources: Iterable[SourceRef], where: str, document_id: str) -> str:
    """Title, the file(s) it came from, project or matter, and its id: what a person finds it by."""
    files = ", ".join(_file_names(sources)) or key
    return f"[bold]{escape(title or key)}[/]\n{escape(files)}\n[dim]{escape(where)}[/]\n[dim]doc[/] {document_id}"


def _file_names(sources: Iterable[SourceRef]) -> list[str]:
    """A folder file's path, a DMS object's title (else its id): what a source calls the file."""
    names = (s.external_id if s.source_kind == "local_fs" else s.title or s.external_id for s in sources)
    return list(dict.fromkeys(names))


def _version_cell(version: VersionRef) -> str:
    """`v3 (executed)` over its date; a version without a label by its number, `#2 (final)`."""
    day = f"\n{version.doc_date}" if version.doc_date else ""
    return f"{escape(version.label or f'#{version.seq}')} ({version.status}){day}"


def _explain_tree(n: int, hit: Hit, explanation: HitExplanation) -> Tree:
    """Every part of the explanation, unabridged: legs, fusion and boost, the access rule and its grants."""
    files = ", ".join(_file_names(hit.citation.source_objects))
    tree = Tree(f"[bold]#{n}[/] {escape(hit.title or hit.citation.document.key)} [dim]({escape(files)})[/]")
    legs = Table("leg", "rank (0 = top)", "leg score", box=None, padding=(0, 2, 0, 0))
    for leg, ranked in explanation.legs.items():
        legs.add_row(leg, str(ranked.rank), f"{ranked.score:.6g}")
    tree.add(legs)
    rerank = "none" if explanation.rerank_score is None else f"{explanation.rerank_score:.6g}"
    tree.add(f"fused {explanation.fused_score:.6g} x boost {explanation.boost:g} ({hit.version_status}) = "
             f"{explanation.boosted_score:.6g}; rerank: {rerank}; score shown: {hit.score:.6g}")
    access = tree.add(f"access: {escape(explanation.access)}")
    for path in explanation.grant_paths:
        access.add(f"grant: {escape(path.describe())}")
    return tree


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
    strict: bool = typer.Option(False, "--strict", help=STRICT_HELP),
) -> None:
    """List documents by metadata only, newest first (no query text, no embedding)."""
    warn_unknown(as_, strict)
    filters = _filters(project, matter, doc_type, status, None, _parse_date(date_from), _parse_date(date_to), None, None)
    response = _service().search_filter(filters, as_, offset, limit)
    record_read("search_filter", as_, query=filters.model_dump_json(exclude_defaults=True), shown=response.hits)
    if as_json:
        typer.echo(response.model_dump_json(indent=2))
        return
    title = _listing_title(as_, project=project, matter=matter, doc_type=doc_type, status=status,
                           date_from=date_from, date_to=date_to)
    console.print(_hits_view(response.hits, title, ranked=False) if response.hits else f"{title}: none")


def _listing_title(principals: list[str], **given: str | None) -> str:
    """The filters as the user typed them (`matter 'A ./. B'`), not the ids they resolved to."""
    shown = ", ".join(f"{name.replace('_', ' ')} {value!r}" for name, value in given.items() if value)
    return escape(f"documents{f' ({shown})' if shown else ''} as {', '.join(principals)}, newest first")


DOCUMENT_ID = typer.Argument(..., help="Document id, or a unique prefix of one (at least 4 characters).")
JSON_HELP = "Print the raw response as JSON."


@cli_errors
def get(
    document_id: str = DOCUMENT_ID,
    as_: list[str] = typer.Option(..., "--as", help=AS_HELP),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    text: bool = typer.Option(False, "--text", help="Print the document's text (through a pager on a terminal)."),
    version: str | None = typer.Option(None, help="With --text: a visible version id or prefix (default: the cited one)."),
    section: str | None = typer.Option(None, help='With --text: one section, e.g. "§ 6" or "page:3".'),
    offset: int | None = typer.Option(None, min=0, help="With --text: characters to skip."),
    limit: int | None = typer.Option(None, min=1, help="With --text: characters to print (at most 100,000)."),
) -> None:
    """Show one document with its visible versions and the files they came from, or (--text) its text."""
    whole_id = _visible_id("document", document_id, as_)
    if text:
        _print_text(whole_id, as_, as_json, version and _visible_id("version", version, as_), section, offset, limit)
        return
    view = _service().get_document(whole_id, as_)
    record_read("read", as_, document_id=view.document.id)
    if as_json:
        typer.echo(view.model_dump_json(indent=2))
        return
    console.print(_document_header(view, _matter_names([view])))
    console.print(_versions_table(view))


def _print_text(document_id: str, principals: list[str], as_json: bool, version: str | None, section: str | None,
                offset: int | None, limit: int | None) -> None:
    """The asked-for part, or without a range the whole text, read part by part as the API serves it;
    a terminal gets a pager with the citation on top, a pipe the plain text alone."""
    from ki_query.reading import DEFAULT_TEXT_CHARS, TextRequest

    request = TextRequest(version=version, section=section, offset=offset or 0, limit=limit or DEFAULT_TEXT_CHARS)
    part = _service().read_text(document_id, request, principals)
    record_read("text", principals, document_id=part.document_id, detail=part.version_id)
    if as_json:
        typer.echo(part.model_dump_json(indent=2))
        return
    pieces = [part.text]
    # A section's offsets count from its start; next_offset counts from the text's.
    base = part.offset - request.offset if section is not None else 0
    while limit is None and part.next_offset is not None:
        part = _service().read_text(document_id, request.model_copy(update={"offset": part.next_offset - base}), principals)
        pieces.append(part.text)
    body = "".join(pieces)
    if not console.is_terminal:
        typer.echo(body)
        return
    with console.pager(styles=False):
        console.print(escape(part.citation), style="bold")
        console.print(escape(body), highlight=False)


def _document_header(view: DocumentView, matters: dict[str, str]) -> Table:
    header = Table.grid(padding=(0, 2))
    header.add_column(style="dim")
    header.add_column(overflow="fold")
    fields = {
        "title": view.document.title or view.document.key, "key": view.document.key, "project": view.project.name,
        "matter": matters.get(view.matter_id or ""), "type": view.doc_type,
        "identifiers": ", ".join(view.identifiers), "document id": view.document.id,
    }
    for name, value in fields.items():
        if value:
            header.add_row(name, escape(value))
    return header


def _versions_table(view: DocumentView) -> Table:
    table = Table(title="versions you may see", title_justify="left")
    for column in ("#", "version", "status", "date", "language", "file", "version id"):
        table.add_column(column, overflow="fold", no_wrap=column == "version id")
    for item in view.versions:
        version = item.version
        label = f"{escape(version.label or '')}{' [green](latest final)[/]' if item.is_latest_final else ''}"
        table.add_row(str(version.seq), label, version.status, str(version.doc_date or ""), item.language or "",
                      escape("\n".join(_file_names(item.source_objects))), version.id)
    return table


@cli_errors
def related(
    document_id: str = DOCUMENT_ID,
    as_: list[str] = typer.Option(..., "--as", help=AS_HELP),
    kind: list[str] = typer.Option([], help="Relation kinds to follow (default all)."),
    depth: int = typer.Option(1, min=1, max=3, help="Relation hops to follow (1 to 3)."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Follow relations from a document; every neighbour is checked against the caller's access."""
    result = _service().traverse(_visible_id("document", document_id, as_), as_, kind or None, depth)
    record_read("related", as_, document_id=result.start.document.id, hit_count=len(result.related))
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
        return
    start = result.start.document
    title = escape(f"related to {start.title or start.key} ({start.key}) as {', '.join(as_)}, {depth} hop(s)")
    console.print(_related_table(result, title) if result.related else f"{title}: nothing you may see")


def _related_table(result: TraversalResult, title: str) -> Table:
    """A row per reached document: the edge that reached it in both documents' keys, and where to cite it."""
    keys = {result.start.document.id: result.start.document.key}
    keys |= {item.document.document.id: item.document.document.key for item in result.related}
    matters = _matter_names([result.start, *(item.document for item in result.related)])
    table = Table(title=title, show_lines=True)
    for column in ("hop", "relation", "direction", "document", "status", "date"):
        table.add_column(column, overflow="fold", min_width=36 if column == "document" else None)
    for item in result.related:
        view, this = item.document, item.document.document
        edge = (this.id, item.via_document_id) if item.direction == "incoming" else (item.via_document_id, this.id)
        cited = view.cited_version
        where = " / ".join(filter(None, (view.project.name, matters.get(view.matter_id or ""))))
        table.add_row(str(item.depth), escape(f"{keys[edge[0]]} {item.kind} -> {keys[edge[1]]}"), item.direction,
                      _document_cell(this.title, this.key, cited.source_objects, where, this.id),
                      cited.version.status, str(cited.version.doc_date or ""))
    return table


@decisions_app.command("add")
@cli_errors
def decisions_add(
    project: str = typer.Option(..., help="Project name or id."),
    locus: str = typer.Option(..., help='Where, e.g. "§ 6 Haftung".'),
    change: str = typer.Option(..., "--change", help="What changed."),
    rationale: str = typer.Option("", help="Why."),
    evidence: list[str] = typer.Option(..., help="Evidence version id or a unique prefix of one (repeat)."),
    as_: list[str] = typer.Option(..., "--as", help="The recording principal; must see all evidence."),
) -> None:
    """Record a decision with its evidence."""
    from ki_query.types import DecisionEvidenceRef, NewDecision

    refs = tuple(DecisionEvidenceRef(version_id=_visible_id("version", v, as_)) for v in evidence)
    decision = NewDecision(project_id=_project_id(project), locus=locus, change_summary=change, rationale=rationale,
                           evidence=refs, decided_by=as_[0])
    typer.echo(_service().add_decision(decision, as_).model_dump_json(indent=2))


@decisions_app.command("search")
@cli_errors
def decisions_search(query: str, as_: list[str] = typer.Option(..., "--as", help=AS_HELP), limit: int = 10) -> None:
    """Decision records matching the words, if the caller may see all of their evidence."""
    from ki_core.config import load_settings
    from ki_query.types import check_query_length

    check_query_length(query, load_settings().retrieval.max_query_chars)
    hits = _service().search_decisions(query, as_, limit)
    record_read("search_decisions", as_, query=query, hit_count=len(hits))
    table = Table(title=f"decisions for {query!r}")
    for column in ("score", "locus", "change", "rationale"):
        table.add_column(column, overflow="fold")
    for hit in hits:
        table.add_row(f"{hit.score:.2f}", hit.locus, hit.change_summary, hit.rationale[:200])
    console.print(table if hits else "no decision records")


# How long `ki serve` waits for open requests after SIGTERM before it stops anyway.
SHUTDOWN_SECONDS = 5


@cli_errors
def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    port: int = typer.Option(8000),
) -> None:
    """Serve the query API (/v1), MCP for AI assistants (/mcp) and the DMS webhook ingress in one process.

    On the embedded store it holds the index's one writer from start to stop: while it runs, ki ingest
    and ki reindex are refused (exit 3, naming this server), or ki ingest --wait waits for it.
    """
    import uvicorn

    from ki.commands.storage.writer import hold_the_writer
    from ki_core.config import load_settings

    hold_the_writer(load_settings())

    # On SIGTERM uvicorn waits for open requests; a search is bounded by retrieval.query_budget_seconds,
    # so a few seconds more than that is enough, and a hung client cannot hold the shutdown.
    uvicorn.run("ki.asgi:create_all_in_one", factory=True, host=host, port=port, timeout_graceful_shutdown=SHUTDOWN_SECONDS)


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
    from ki_query.api.mcp_server import create_mcp_server
    from ki_core.audit import audit_log

    if not api_key:
        raise typer.BadParameter("stdio serves one identity: give --api-key or KI_MCP_API_KEY", param_hint="--api-key")
    settings = load_settings()
    identity = identity_from_api_key(settings, api_key)
    create_mcp_server(_service, identity, audit=audit_log(settings)).run("stdio")


def _serve_mcp_http(api_key: str | None, host: str, port: int) -> None:
    import uvicorn

    from ki_core.config import load_settings
    from ki_query.api.mcp_http import create_mcp_http_app

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
