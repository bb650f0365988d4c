"""MCP over Streamable HTTP, served by uvicorn on a real port: each request is authenticated like /v1.

The app is the query API with MCP mounted the way `ki.asgi` mounts it. Two API
keys over the one server see different results for the same search, because
WALLED may see the project but not the contract, and a request without a valid
credential is refused with 401 before any tool runs.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import anyio
import httpx
import httpx2
import pytest
import uvicorn
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from ki.asgi import with_mcp
from ki_core.audit import audit_log
from ki_core.grants import GrantEffect, GrantTarget, grant
from ki_query.api.http import create_query_app
from ki_query.identity import Identity
from ki_query.api.mcp_http import MCP_PATH
from ki_query.api.mcp_server import create_mcp_server
from tests.ki_query.credentials import (
    ANNA_KEY,
    FRONTEND_KEY,
    NOBODY_KEY,
    WALLED,
    WALLED_KEY,
    keyed_settings,
    signing_key,  # noqa: F401 - fixture
    user_token,
)
from tests.ki_query.retrieval_fixtures import MEMBER, FolderWorld, RecordingIndex, folder_world  # noqa: F401
from tests.ki_query.api.test_mcp import TOOLS, _payload

QUERY = {"query": "Mietvertrag Miete", "limit": 10}


@dataclass
class Served:
    url: str
    world: FolderWorld
    index: RecordingIndex


@pytest.fixture(scope="module")
def served(folder_world: FolderWorld, signing_key) -> Iterator[Served]:  # noqa: F811
    """One server per world; WALLED sees the project except the contract (a document deny wins)."""
    with folder_world.ctx.sessions() as session, session.begin():
        grant(session, GrantTarget.project(folder_world.project_id), WALLED, settings=folder_world.ctx.settings)
        grant(session, GrantTarget.document(folder_world.documents["mietvertrag"].id), WALLED,
              effect=GrantEffect.DENY, settings=folder_world.ctx.settings)
    service, index, _ = folder_world.service()
    settings = keyed_settings(folder_world, signing_key)
    app = with_mcp(create_query_app(settings, lambda: service), settings, lambda: service)
    with _uvicorn(app) as base:
        yield Served(f"{base}{MCP_PATH}", folder_world, index)


@pytest.fixture(autouse=True)
def _forget_requests(served: Served) -> None:
    served.index.requests.clear()


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:
        """The test's thread is not the main one; pytest keeps its own handlers."""


@contextmanager
def _uvicorn(app: object) -> Iterator[str]:
    """`app` served by uvicorn in a thread, on a port bound before it starts (no race for a free one)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = _Server(uvicorn.Config(app, lifespan="on", log_level="warning", ws="none", http="h11"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def _session(url: str, bearer: str, work, *, headers: dict | None = None, statuses: list[int] | None = None):
    """Run `work(client)` with the SDK client over HTTP, every request carrying `bearer` (and `headers`)."""

    async def record(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    async def run():
        sent = {"Authorization": f"Bearer {bearer}"} | (headers or {})
        async with httpx2.AsyncClient(headers=sent, timeout=30, event_hooks={"response": [record]}) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                return await work(client)

    return anyio.run(run)


def _call(url: str, bearer: str, tool: str, arguments: dict):
    return _session(url, bearer, lambda client: client.call_tool(tool, arguments))


def _hit_keys(result) -> list[str]:
    assert not result.is_error, result.content
    return [hit["citation"]["document"]["key"] for hit in _payload(result)["hits"]]


def test_two_keys_over_one_server_see_what_each_may_see(served: Served) -> None:
    anna = _hit_keys(_call(served.url, ANNA_KEY, "search", QUERY))
    walled = _hit_keys(_call(served.url, WALLED_KEY, "search", QUERY))
    assert "mietvertrag" in anna
    assert walled and "mietvertrag" not in walled


def test_the_walled_document_is_not_found_for_the_walled_key(served: Served) -> None:
    document_id = served.world.documents["mietvertrag"].id
    anna = _call(served.url, ANNA_KEY, "get_document", {"document_id": document_id})
    walled = _call(served.url, WALLED_KEY, "get_document", {"document_id": document_id})
    assert not anna.is_error and _payload(anna)["document"]["key"] == "mietvertrag"
    assert walled.is_error


def test_each_call_in_one_connection_acts_for_its_own_request(served: Served) -> None:
    """Not for whoever opened the connection: the SDK's session-wide token (python-sdk#2208) is not used."""

    async def run():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {ANNA_KEY}"}, timeout=30) as http:
            async with Client(streamable_http_client(served.url, http_client=http)) as client:
                first = await client.call_tool("search", QUERY)
                http.headers["Authorization"] = f"Bearer {WALLED_KEY}"
                return first, await client.call_tool("search", QUERY)

    as_anna, as_walled = anyio.run(run)
    assert "mietvertrag" in _hit_keys(as_anna)
    assert "mietvertrag" not in _hit_keys(as_walled)


def test_a_user_token_acts_as_its_subject(served: Served, signing_key) -> None:  # noqa: F811
    assert "mietvertrag" in _hit_keys(_call(served.url, user_token(signing_key), "search", QUERY))
    assert _hit_keys(_call(served.url, user_token(signing_key, sub="bob"), "search", QUERY)) == []


def test_a_key_without_grants_sees_nothing(served: Served) -> None:
    assert _hit_keys(_call(served.url, NOBODY_KEY, "search", QUERY)) == []


def test_on_behalf_of_is_refused_not_ignored(served: Served) -> None:
    result = _session(served.url, FRONTEND_KEY, lambda client: client.call_tool("search", QUERY),
                      headers={"X-KI-On-Behalf-Of": MEMBER})
    assert result.is_error
    assert served.index.requests == []


TOOL_CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", "arguments": QUERY}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer guess-0123456789", f"Basic {ANNA_KEY}", "Bearer a.b.c"],
    ids=["none", "unknown-key", "not-bearer", "forged-token"],
)
def test_a_request_without_a_valid_credential_is_401_and_runs_nothing(served: Served, authorization: str | None) -> None:
    headers = MCP_HEADERS | ({"Authorization": authorization} if authorization else {})
    response = httpx.post(served.url, json=TOOL_CALL, headers=headers, timeout=30)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert served.index.requests == []


def test_an_api_key_in_x_api_key_alone_is_401(served: Served) -> None:
    """MCP clients send Authorization: Bearer; a key elsewhere is not looked at."""
    response = httpx.post(served.url, json=TOOL_CALL, headers=MCP_HEADERS | {"X-API-Key": ANNA_KEY}, timeout=30)
    assert response.status_code == 401


def test_the_sdk_client_cannot_connect_with_a_bad_key(served: Served) -> None:
    statuses: list[int] = []
    with pytest.raises(Exception):  # the SDK wraps the refusal as a bare JSON-RPC error in task groups
        _session(served.url, "guess-0123456789", lambda client: client.list_tools(), statuses=statuses)
    assert statuses and set(statuses) == {401}
    assert served.index.requests == []


def test_the_tools_are_those_of_stdio(served: Served) -> None:
    async def listed(client):
        return {tool.name: (tool.description, tool.input_schema) for tool in (await client.list_tools()).tools}

    over_http = _session(served.url, ANNA_KEY, listed)
    stdio_server = create_mcp_server(lambda: None, Identity("test", (MEMBER,)), audit=audit_log(served.world.ctx.settings))

    async def in_process():
        async with Client(stdio_server) as client:
            return await listed(client)

    assert TOOLS <= set(over_http)
    assert over_http == anyio.run(in_process)
    assert not any("ctx" in str(schema) for _, schema in over_http.values())
