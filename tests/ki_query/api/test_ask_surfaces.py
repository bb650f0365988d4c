"""One federated call on every surface: `POST /v1/ask`, the MCP tool `ask` (stdio and HTTP) and `ki ask`.

The world is the fixture folder (firm's index, real RetrievalService and grants) with the statute excerpt
loaded beside it as corpus "statutes", served the way `ki.asgi.create_api` serves it: the query API and
MCP over one process-wide FederatedSearch. WALLED may see the project but not the contract (a document
deny wins); NOBODY has no grant at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
import pytest
from fastapi.testclient import TestClient
from mcp.client.client import Client
from typer.testing import CliRunner

from ki.asgi import with_mcp
from ki.cli import app as cli
from ki_core.audit import audit_log
from ki_core.db import make_engine, session_factory
from ki_core.embedding import embedder_from_settings
from ki_core.grants import GrantEffect, GrantTarget, grant
from ki_query.federation.corpus_loader import load_corpus
from ki_query.federation.retriever import ALL_HITS_CAP
from ki_query.federation.search import FederatedAnswer, FederatedSearchOnFirstUse
from ki_query.api.http import create_query_app
from ki_query.identity import Identity
from ki_query.api.mcp_http import MCP_PATH
from ki_query.api.mcp_server import create_mcp_server
from ki_query.retrieval import RetrievalService, retrieval_service_from_settings
from tests.ki_query.credentials import (
    ANNA_KEY,
    FRONTEND_KEY,
    NOBODY_KEY,
    WALLED,
    WALLED_KEY,
    keyed_settings,
    signing_key,  # noqa: F401 - fixture
)
from tests.ki_query.memory_corpora import FIXTURE
from tests.ki_query.retrieval_fixtures import DIMENSIONS, MEMBER, FolderWorld, folder_world  # noqa: F401
from tests.ki_query.api.test_mcp import _payload
from tests.ki_query.api.test_mcp_http import MCP_HEADERS, _call, _uvicorn

# Names no law (so no corpus is moved first); matches the contract, the annex and the tenant's letter as well
# as BGB § 546a and § 573c.
QUESTION = "Mietvertrag Heizung: Kündigung des Mietverhältnisses durch den Mieter"
ASK = {"question": QUESTION, "limit": 12}
WALLED_DOCUMENT = "mietvertrag"


@dataclass
class Served:
    base: str
    world: FolderWorld
    service: RetrievalService
    federated: FederatedSearchOnFirstUse

    @property
    def mcp(self) -> str:
        return f"{self.base}{MCP_PATH}"

    def walled_document_id(self) -> str:
        return self.world.documents[WALLED_DOCUMENT].id


@pytest.fixture(scope="module")
def served(folder_world: FolderWorld, signing_key) -> Iterator[Served]:  # noqa: F811
    """The statutes loaded as `ki corpus load` would, WALLED walled off the contract, the app of `ki.asgi`."""
    world = folder_world
    settings = world.ctx.settings
    load_corpus(settings, world.ctx.sessions, embedder_from_settings(settings), "statutes", [FIXTURE])
    with world.ctx.sessions() as session, session.begin():
        grant(session, GrantTarget.project(world.project_id), WALLED, settings=settings)
        grant(session, GrantTarget.document(world.documents[WALLED_DOCUMENT].id), WALLED,
              effect=GrantEffect.DENY, settings=settings)
    service = retrieval_service_from_settings(settings)
    federated = FederatedSearchOnFirstUse(lambda: service)
    keyed = keyed_settings(world, signing_key)
    app = with_mcp(create_query_app(keyed, lambda: service, federated=federated), keyed, lambda: service, federated)
    try:
        with _uvicorn(app) as base:
            yield Served(base, world, service, federated)
    finally:
        federated().close()
        service.close()


def _over_http(served: Served, key: str, body: dict | None = None, headers: dict | None = None) -> httpx.Response:
    return httpx.post(f"{served.base}/v1/ask", json=ASK if body is None else body,
                      headers={"X-API-Key": key} | (headers or {}), timeout=60)


def _answer_over_http(served: Served, key: str) -> dict:
    response = _over_http(served, key)
    assert response.status_code == 200, response.text
    return response.json()


def _answer_over_mcp(served: Served, key: str, arguments: dict = ASK) -> dict:
    result = _call(served.mcp, key, "ask", arguments)
    assert not result.is_error, result.content
    return _payload(result)


def _answer_over_stdio(served: Served, principals: tuple[str, ...], arguments: dict = ASK):
    server = create_mcp_server(lambda: served.service, Identity("stdio", principals), served.federated,
                               audit=audit_log(served.service.settings))

    async def run():
        async with Client(server) as client:
            return await client.call_tool("ask", arguments)

    return anyio.run(run)


def _answer_of_the_cli(served: Served, monkeypatch: pytest.MonkeyPatch, *principals: str) -> dict:
    """`ki ask --json` as an operator runs it against the same store (its own process-level wiring)."""
    settings = served.world.ctx.settings
    for name, value in {"KI_DATABASE__URL": settings.database_url, "KI_STATE_DIR": settings.state_dir,
                        "KI_EMBEDDING__PROVIDER": "hashing", "KI_EMBEDDING__DIMENSIONS": str(DIMENSIONS)}.items():
        monkeypatch.setenv(name, value)
    arguments = ["ask", QUESTION, "--top-k", str(ASK["limit"]), "--json"]
    for principal in principals:
        arguments += ["--as", principal]
    result = CliRunner().invoke(cli, arguments)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _firm(answer: dict) -> list[dict]:
    return [hit for hit in answer["hits"] if hit["corpus_id"] == "firm"]


def _statutes(answer: dict) -> list[dict]:
    return [hit for hit in answer["hits"] if hit["corpus_id"] == "statutes"]


def test_the_same_question_gives_the_same_hits_over_http_mcp_and_the_cli(served: Served, monkeypatch) -> None:
    over_http = _answer_over_http(served, ANNA_KEY)
    assert _firm(over_http) and _statutes(over_http), "the question reaches both the firm's index and the statutes"
    stdio = _answer_over_stdio(served, (MEMBER,))
    assert not stdio.is_error, stdio.content
    assert set(over_http) == set(FederatedAnswer.model_fields), "the answer serialized whole, whatever it holds"
    for other in (_answer_over_mcp(served, ANNA_KEY), _payload(stdio), _answer_of_the_cli(served, monkeypatch, MEMBER)):
        assert other["hits"] == over_http["hits"]  # ids, addresses, kinds, order and both scores
        assert other == over_http


def test_each_hit_names_its_corpus_citation_kinds_and_score(served: Served) -> None:
    answer = _answer_over_http(served, ANNA_KEY)
    [statute] = [hit for hit in _statutes(answer) if hit["address"] == "§ 573c Abs. 1 BGB"]
    metadata = statute["metadata"]
    assert (metadata["container_id"], metadata["section_id"], metadata["subsection"]) == ("BGB", "§ 573c", "1")
    assert "Kündigung" in statute["text"] and statute["rank_score"] is not None
    contract = served.world.documents[WALLED_DOCUMENT]
    [firm] = [hit for hit in _firm(answer) if hit["metadata"]["document_id"] == contract.id]
    assert firm["address"] == firm["metadata"]["title"]
    assert firm["metadata"]["project_id"] == served.world.project_id and firm["metadata"]["document_version_id"]
    for hit in answer["hits"]:
        assert hit["retrieval_kinds"] and isinstance(hit["score"], float)
    assert answer["selection"] is None and answer["diagnostics"] is None
    # The candidate cap is named in every answer, and whether it (not the caller's limit) cut the list.
    assert answer["candidates"]["cap"] == ALL_HITS_CAP and answer["candidates"]["cut_at_cap"] is False
    assert answer["candidates"]["limit"] == ASK["limit"]
    assert answer["candidates"]["returned"] == len(answer["hits"]) <= answer["candidates"]["candidates"]


def test_explain_shows_the_corpus_selection_on_every_surface(served: Served) -> None:
    explained = {**ASK, "explain": True}
    over_http = _over_http(served, ANNA_KEY, explained).json()
    assert set(over_http["selection"]["selected"]) == {"firm", "statutes"}
    assert over_http["diagnostics"]["federated"] is True
    assert _answer_over_mcp(served, ANNA_KEY, explained)["selection"] == over_http["selection"]


@pytest.mark.parametrize("key", [WALLED_KEY, NOBODY_KEY], ids=["document-deny", "no-project-grant"])
def test_a_walled_lawyer_gets_no_walled_firm_hit_and_every_statute_hit(served: Served, key: str) -> None:
    anna = _answer_over_http(served, ANNA_KEY)
    assert served.walled_document_id() in {hit["metadata"]["document_id"] for hit in _firm(anna)}
    firm_only = {**ASK, "corpora": ["firm"]}
    for walled, firm in ((_answer_over_http(served, key), _over_http(served, key, firm_only).json()),
                         (_answer_over_mcp(served, key), _answer_over_mcp(served, key, firm_only))):
        assert served.walled_document_id() not in {hit["metadata"]["document_id"] for hit in _firm(walled)}
        # The firm's hits the lawyer may not see leave room for more statutes, never other ones.
        assert _statutes(walled)[: len(_statutes(anna))] == _statutes(anna)
        # Asked of the firm alone: what the lawyer may see still comes (the annex, the letter); a stranger, nothing.
        documents = {hit["metadata"]["document_id"] for hit in firm["hits"]}
        assert served.walled_document_id() not in documents
        assert documents if key == WALLED_KEY else documents == set()


def test_a_firm_search_that_fails_gives_statute_hits_only(served: Served, tmp_path: Path, signing_key) -> None:  # noqa: F811
    """Fail closed: the firm's index answering with an error means no firm hits, never unfiltered ones."""
    service = served.service
    broken = RetrievalService(service.settings, session_factory(make_engine(f"sqlite:///{tmp_path}")),
                              service.index, service.embedder, service.access)
    federated = FederatedSearchOnFirstUse(lambda: broken)
    client = TestClient(create_query_app(keyed_settings(served.world, signing_key), lambda: broken,
                                         federated=federated))
    try:
        response = client.post("/v1/ask", json=ASK, headers={"X-API-Key": ANNA_KEY})
    finally:
        federated().close()
    assert response.status_code == 200, response.text
    hits = response.json()["hits"]
    assert hits and {hit["corpus_id"] for hit in hits} == {"statutes"}


def test_an_unknown_api_key_is_401_on_http_and_mcp(served: Served) -> None:
    response = _over_http(served, "guess-0123456789")
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask", "arguments": ASK}}
    refused = httpx.post(served.mcp, json=call, headers=MCP_HEADERS | {"Authorization": "Bearer guess-0123456789"},
                         timeout=30)
    assert refused.status_code == 401


@pytest.mark.parametrize("question", ["", "   "], ids=["empty", "blank"])
def test_an_empty_question_is_400_and_a_tool_error(served: Served, question: str) -> None:
    response = _over_http(served, ANNA_KEY, {"question": question})
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["question"]
    result = _call(served.mcp, ANNA_KEY, "ask", {"question": question})
    assert result.is_error and "question" in result.content[0].text


def test_a_question_of_punctuation_only_is_400_and_a_tool_error_naming_it(served: Served) -> None:
    """Not blank to the request model, but nothing to search for: the federation's own usage error."""
    response = _over_http(served, ANNA_KEY, {"question": "?"})
    assert response.status_code == 400 and "has no words to search for" in response.json()["detail"]
    result = _call(served.mcp, ANNA_KEY, "ask", {"question": "?"})
    assert result.is_error and "EmptyQuestion: " in result.content[0].text


def test_principals_in_the_body_are_refused_not_trusted(served: Served) -> None:
    response = _over_http(served, NOBODY_KEY, {**ASK, "principals": [MEMBER]})
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["principals"]


def test_only_a_front_end_key_may_ask_on_behalf_of_someone(served: Served) -> None:
    on_behalf = {"X-KI-On-Behalf-Of": MEMBER}
    assert _over_http(served, NOBODY_KEY, headers=on_behalf).status_code == 403
    allowed = _over_http(served, FRONTEND_KEY, headers=on_behalf)
    assert allowed.status_code == 200 and allowed.json()["hits"] == _answer_over_http(served, ANNA_KEY)["hits"]


def test_an_unknown_corpus_is_400_and_a_tool_error_naming_it(served: Served) -> None:
    response = _over_http(served, ANNA_KEY, {**ASK, "corpora": ["nope"]})
    assert response.status_code == 400 and "no corpus 'nope' is registered" in response.json()["detail"]
    result = _call(served.mcp, ANNA_KEY, "ask", {**ASK, "corpora": ["nope"]})
    assert result.is_error and "UnknownCorpus: no corpus 'nope' is registered" in result.content[0].text


def test_only_the_named_corpora_are_asked(served: Served) -> None:
    statutes = _over_http(served, ANNA_KEY, {**ASK, "corpora": ["statutes"]}).json()
    assert statutes["hits"] and {hit["corpus_id"] for hit in statutes["hits"]} == {"statutes"}
    firm = _answer_over_mcp(served, ANNA_KEY, {**ASK, "corpora": ["firm"]})
    assert firm["hits"] and {hit["corpus_id"] for hit in firm["hits"]} == {"firm"}
    assert _over_http(served, ANNA_KEY, {**ASK, "corpora": []}).status_code == 400


@pytest.mark.parametrize("limit", [0, 101])
def test_a_limit_outside_1_to_100_is_refused(served: Served, limit: int) -> None:
    assert _over_http(served, ANNA_KEY, {**ASK, "limit": limit}).status_code == 400
    assert _call(served.mcp, ANNA_KEY, "ask", {**ASK, "limit": limit}).is_error
