"""The MCP tools, through the official SDK's in-process client, with the server's one identity."""

from __future__ import annotations

import json

import anyio
from mcp.client.client import Client

from ki_core.audit import audit_log
from ki_query.identity import Identity
from ki_query.api.mcp_server import create_mcp_server
from tests.ki_query.retrieval_fixtures import MEMBER, FolderWorld, folder_world  # noqa: F401

TOOLS = {"search", "ask", "search_filter", "search_decisions", "get_document", "traverse", "related_documents",
         "add_decision"}


def _call(world: FolderWorld, principals: tuple[str, ...], tool: str, arguments: dict):
    service, _, _ = world.service()
    server = create_mcp_server(lambda: service, Identity("test", principals), audit=audit_log(world.ctx.settings))

    async def run():
        async with Client(server) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            return names, await client.call_tool(tool, arguments)

    return anyio.run(run)


def _payload(result) -> object:
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content) if isinstance(content, dict) else content
    return json.loads(result.content[0].text)


def test_the_server_offers_the_retrieval_tools(folder_world: FolderWorld) -> None:  # noqa: F811
    names, _ = _call(folder_world, (MEMBER,), "search", {"query": "Miete"})
    assert TOOLS <= names


def test_search_acts_for_the_servers_identity_only(folder_world: FolderWorld) -> None:  # noqa: F811
    _, allowed = _call(folder_world, (MEMBER,), "search", {"query": "Heizung Minderung", "limit": 5})
    assert not allowed.is_error and _payload(allowed)["hits"]
    _, outsider = _call(folder_world, ("someone-else",), "search", {"query": "Heizung Minderung", "limit": 5})
    assert not outsider.is_error and _payload(outsider)["hits"] == []


def test_a_window_above_500_is_a_tool_error_with_its_reason(folder_world: FolderWorld) -> None:  # noqa: F811
    _, result = _call(folder_world, (MEMBER,), "search", {"query": "Miete", "offset": 495, "limit": 10})
    assert result.is_error and "WindowTooDeep: offset + limit is 505" in result.content[0].text


def test_an_unknown_document_and_a_bad_decision_are_tool_errors_with_their_reason(folder_world: FolderWorld) -> None:  # noqa: F811
    _, missing = _call(folder_world, (MEMBER,), "get_document", {"document_id": "no-such-document"})
    assert missing.is_error and "DocumentNotFound: " in missing.content[0].text
    _, invalid = _call(folder_world, (MEMBER,), "add_decision", {"decision": {"project_id": "p", "locus": ""}})
    assert invalid.is_error and "invalid arguments: " in invalid.content[0].text
    assert "locus" in invalid.content[0].text and "evidence" in invalid.content[0].text


def test_related_documents_tool(folder_world: FolderWorld) -> None:  # noqa: F811
    document_id = folder_world.documents["mietvertrag"].id
    _, result = _call(folder_world, (MEMBER,), "related_documents", {"document_id": document_id})
    assert not result.is_error
    keys = {item["document"]["document"]["key"] for item in _payload(result)}
    assert "anlage-1" in keys


def test_a_nul_or_a_lone_surrogate_in_a_tool_argument_is_a_tool_error_naming_it(folder_world: FolderWorld) -> None:  # noqa: F811
    for tool, arguments, name in (
        ("get_document", {"document_id": "a\x00b"}, "document_id"),
        ("traverse", {"document_id": "\ud800"}, "document_id"),
        ("related_documents", {"document_id": "x\x00"}, "document_id"),
        ("search_decisions", {"query": "Haftung\x00"}, "query"),
        ("search", {"query": "\udfff"}, "query"),
    ):
        _, result = _call(folder_world, (MEMBER,), tool, arguments)
        assert result.is_error, tool
        text = result.content[0].text
        assert name in text and any(w in text for w in ("NUL", "surrogate", "valid string")), (tool, text)
