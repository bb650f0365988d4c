"""MCP tools over the retrieval service (official `mcp` SDK), with the same authorization as HTTP.

The server runs for one identity, resolved from an API key when it starts
(`ki mcp --api-key ...` or KI_MCP_API_KEY): an assistant connected over stdio
acts for that key's principals and nobody else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import MCPServer

from ki_core.models import RelationKind
from ki_query.identity import Identity
from ki_query.retrieval import RetrievalService
from ki_query.types import NewDecision, SearchRequest, parse_filters

INSTRUCTIONS = (
    "Search a law firm's documents (contracts, letters, memos, court decisions) within the "
    "caller's access rights. Every hit carries a citation (project, document, version, source). "
    "Paste case numbers (Aktenzeichen) or statute references verbatim: an identifier leg matches them."
)


def create_mcp_server(service: Callable[[], RetrievalService], identity: Identity) -> MCPServer:
    server = MCPServer(name="legalmemory-ki", instructions=INSTRUCTIONS)
    principals = identity.principals

    @server.tool()
    def search(query: str, filters: dict[str, Any] | None = None, offset: int = 0, limit: int = 10,
               explain: bool = False) -> dict:
        """Hybrid search. filters: project_id, matter_id, doc_type, version_status, language, date_from, date_to, clause_type, chunk_kind."""
        request = SearchRequest(query=query, filters=parse_filters(filters), offset=offset, limit=limit, explain=explain)
        return service().search(request, principals).model_dump(mode="json")

    @server.tool()
    def search_filter(filters: dict[str, Any] | None = None, offset: int = 0, limit: int = 10) -> dict:
        """Documents matching metadata filters only, newest first (no query text)."""
        return service().search_filter(parse_filters(filters), principals, offset, limit).model_dump(mode="json")

    @server.tool()
    def search_decisions(query: str, limit: int = 10) -> list[dict]:
        """Decision records (what changed and why) whose evidence the caller may see in full."""
        return [hit.model_dump(mode="json") for hit in service().search_decisions(query, principals, limit)]

    @server.tool()
    def get_document(document_id: str) -> dict:
        """A document with its visible versions and citable sources."""
        return service().get_document(document_id, principals).model_dump(mode="json")

    @server.tool()
    def traverse(document_id: str, kinds: list[str] | None = None, depth: int = 1) -> dict:
        """Follow relations (supersedes, annex_of, responds_to, references, thread) from a document."""
        return service().traverse(document_id, principals, _kinds(kinds), depth).model_dump(mode="json")

    @server.tool()
    def related_documents(document_id: str, kinds: list[str] | None = None) -> list[dict]:
        """Documents directly related to one document, each authorization-checked."""
        related = service().related_documents(document_id, principals, _kinds(kinds))
        return [item.model_dump(mode="json") for item in related]

    @server.tool()
    def add_decision(decision: dict[str, Any]) -> dict:
        """Record a decision (locus, change_summary, rationale, evidence); the caller must see all evidence."""
        return service().add_decision(NewDecision.model_validate(decision), principals).model_dump(mode="json")

    return server


def _kinds(kinds: list[str] | None) -> list[RelationKind] | None:
    return [RelationKind(kind) for kind in kinds] if kinds else None
