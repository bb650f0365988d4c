"""MCP tools over the retrieval service (official `mcp` SDK), with the same authorization as HTTP.

One set of tools serves both transports; only where a call's principals come
from differs. On stdio the server runs for one identity, resolved from an API
key when it starts (`ki mcp --api-key ...` or KI_MCP_API_KEY). Over Streamable
HTTP (ki_query.api.mcp_http) every request carries its own credential and each call
acts for that caller alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, ValidationError

from ki_core.audit import AuditAction, AuditLog, Surface, record, shown_documents
from ki_core.models import RelationKind
from ki_query.federation.search import FederatedSearch, FederatedSearchOnFirstUse
from ki_query.identity import Identity
from ki_query.api.refusals import REFUSALS, refusal_reason
from ki_query.reading import DEFAULT_TEXT_CHARS, TextRequest
from ki_query.retrieval import RetrievalService
from ki_query.types import NewDecision, QueryText, RecordId, SearchRequest, parse_filters

SERVER_NAME = "legalmemory-ki"
INSTRUCTIONS = (
    "Search a law firm's documents (contracts, letters, memos, court decisions) within the "
    "caller's access rights. Every hit carries a citation (project, document, version, source). "
    "Paste case numbers (Aktenzeichen) or statute references verbatim: an identifier leg matches them. "
    "`read_document` reads a hit's document on (by range or section) to quote or check it. "
    "`ask` puts the statutes (law, §, Absatz) next to the firm's documents in one ranked list."
)

# Whom one tool call acts for; raises rather than return a default.
IdentityOf = Callable[[Context], Identity]


def create_mcp_server(
    service: Callable[[], RetrievalService],
    identity: Identity,
    federated: Callable[[], FederatedSearch] | None = None,
    *,
    audit: AuditLog,
) -> MCPServer:
    """The stdio server: every call acts for the one identity resolved at start-up."""
    server = MCPServer(name=SERVER_NAME, instructions=INSTRUCTIONS)
    return add_retrieval_tools(server, service, lambda _ctx: identity, federated, audit=audit)


def refusals_as_tool_errors(tool: Callable) -> Callable:
    """A refusal (bad argument, window, depth, unknown document, an unavailable backend) reaches the
    assistant as a tool error with its reason; the SDK would otherwise say only "Error executing tool"."""

    @functools.wraps(tool)
    def run(*args, **kwargs):
        try:
            return tool(*args, **kwargs)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors())
            raise ToolError(f"invalid arguments: {problems}") from None
        except REFUSALS as exc:
            raise ToolError(f"{type(exc).__name__}: {refusal_reason(exc)}") from None

    return run


def add_retrieval_tools(
    server: MCPServer,
    service: Callable[[], RetrievalService],
    identity_of: IdentityOf,
    federated: Callable[[], FederatedSearch] | None = None,
    *,
    audit: AuditLog,
) -> MCPServer:
    """The tools, defined once for every transport. `ctx` is injected by the SDK and is not a tool argument.

    `federated` gives the FederatedSearch behind `ask`; by default one beside `service`, built on first use.
    """
    federated = federated or FederatedSearchOnFirstUse(service)

    @server.tool()
    @refusals_as_tool_errors
    def search(query: QueryText, filters: dict[str, Any] | None = None, offset: int = 0, limit: int = 10,
               explain: bool = False, *, ctx: Context) -> dict:
        """Hybrid search. filters: project_id, matter_id, doc_type, version_status, language, date_from, date_to, clause_type, chunk_kind."""
        request = SearchRequest(query=query, filters=parse_filters(filters), offset=offset, limit=limit, explain=explain)
        who = identity_of(ctx)
        answer = service().search(request, who.principals)
        record(audit, who, Surface.MCP, AuditAction.SEARCH, query=query, hit_count=len(answer.hits),
               document_ids=shown_documents(answer.hits))
        return answer.model_dump(mode="json")

    @server.tool()
    @refusals_as_tool_errors
    def ask(question: QueryText, corpora: Annotated[list[RecordId], Field(min_length=1)] | None = None,
            limit: Annotated[int, Field(gt=0, le=100)] = 8, explain: bool = False, *, ctx: Context) -> dict:
        """Statutes and other registered corpora beside the firm's documents, one ranked list: each hit names its
        corpus, address (law, §, Absatz, or the firm document), kinds and score. corpora: only these ids ("firm")."""
        who = identity_of(ctx)
        answer = federated().ask(question, who.principals, corpora=corpora, top_k=limit, explain=explain)
        record(audit, who, Surface.MCP, AuditAction.ASK, query=question, hit_count=len(answer.hits),
               document_ids=shown_documents(answer.hits))
        return answer.model_dump(mode="json")

    @server.tool()
    @refusals_as_tool_errors
    def search_filter(filters: dict[str, Any] | None = None, offset: int = 0, limit: int = 10, *, ctx: Context) -> dict:
        """Documents matching metadata filters only, newest first (no query text)."""
        who, parsed = identity_of(ctx), parse_filters(filters)
        answer = service().search_filter(parsed, who.principals, offset, limit)
        record(audit, who, Surface.MCP, AuditAction.SEARCH_FILTER, query=parsed.model_dump_json(exclude_defaults=True),
               hit_count=len(answer.hits), document_ids=shown_documents(answer.hits))
        return answer.model_dump(mode="json")

    @server.tool()
    @refusals_as_tool_errors
    def search_decisions(query: QueryText, limit: int = 10, *, ctx: Context) -> list[dict]:
        """Decision records (what changed and why) whose evidence the caller may see in full."""
        who = identity_of(ctx)
        hits = service().search_decisions(query, who.principals, limit)
        record(audit, who, Surface.MCP, AuditAction.SEARCH_DECISIONS, query=query, hit_count=len(hits))
        return [hit.model_dump(mode="json") for hit in hits]

    @server.tool()
    @refusals_as_tool_errors
    def get_document(document_id: RecordId, *, ctx: Context) -> dict:
        """A document with its visible versions and citable sources."""
        who = identity_of(ctx)
        view = service().get_document(document_id, who.principals)
        record(audit, who, Surface.MCP, AuditAction.READ, document_id=view.document.id)
        return view.model_dump(mode="json")

    @server.tool()
    @refusals_as_tool_errors
    def read_document(document_id: RecordId, version: RecordId | None = None, offset: int = 0,
                      limit: int = DEFAULT_TEXT_CHARS, section: str | None = None, *, ctx: Context) -> dict:
        """The text of a visible document version (default: the version a citation names), from offset for limit
        characters (at most 100,000), or one section ("§ 6", "page:3"; see `sections`). Returns text, offset,
        total_chars, next_offset (read on from there), sections and the German citation to quote it by."""
        who = identity_of(ctx)
        request = TextRequest(version=version, offset=offset, limit=limit, section=section)
        text = service().read_text(document_id, request, who.principals)
        record(audit, who, Surface.MCP, AuditAction.TEXT, document_id=text.document_id, detail=text.version_id)
        return text.model_dump(mode="json")

    @server.tool()
    @refusals_as_tool_errors
    def traverse(document_id: RecordId, kinds: list[str] | None = None, depth: int = 1, *, ctx: Context) -> dict:
        """Follow relations (supersedes, annex_of, responds_to, references, thread) from a document."""
        return service().traverse(document_id, identity_of(ctx).principals, _kinds(kinds), depth).model_dump(mode="json")

    @server.tool()
    @refusals_as_tool_errors
    def related_documents(document_id: RecordId, kinds: list[str] | None = None, *, ctx: Context) -> list[dict]:
        """Documents directly related to one document, each authorization-checked."""
        who = identity_of(ctx)
        related = service().related_documents(document_id, who.principals, _kinds(kinds))
        record(audit, who, Surface.MCP, AuditAction.RELATED, document_id=document_id, hit_count=len(related))
        return [item.model_dump(mode="json") for item in related]

    @server.tool()
    @refusals_as_tool_errors
    def add_decision(decision: dict[str, Any], *, ctx: Context) -> dict:
        """Record a decision (locus, change_summary, rationale, evidence); the caller must see all evidence."""
        return service().add_decision(NewDecision.model_validate(decision), identity_of(ctx).principals).model_dump(mode="json")

    return server


def _kinds(kinds: list[str] | None) -> list[RelationKind] | None:
    return [RelationKind(kind) for kind in kinds] if kinds else None
