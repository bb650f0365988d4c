"""Reading a document (issue 38): its text and its original over HTTP and MCP, on SQLite with the embedded
index and on PostgreSQL with OpenSearch. One world per test (some revoke): the fixture folder, plus a long
text and a two-page PDF; the project is granted to the group of `anna`, and `carla` (WALLED) is granted the
project but denied the lease, so for her the lease must read exactly like a document that does not exist."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp.client.client import Client

from ki.commands.storage.store import prepare_store
from ki_core.audit import audit_log
from ki_core.config import get_settings
from ki_core.embedding import HashingEmbedder
from ki_core.grants import GrantTarget, grant, revoke
from ki_core.models import DocumentVersion, GrantEffect
from ki_query.api.http import create_query_app
from ki_query.api.mcp_server import create_mcp_server
from ki_query.identity import Identity
from ki_query.reading import MAX_TEXT_CHARS
from ki_query.retrieval import RetrievalService
from ki_query.scope import AccessService
from ki_query.types import SearchRequest
from ki_workers.context import WorkerContext, reset_worker_context, worker_context
from ki_workers.folder_sync import sync_folder
from tests.conftest import _KEEP_ENV as KEEP_ENV
from tests.conftest import create_database, drop_database, service_unavailable
from tests.ki_core.search.backends import OPENSEARCH_URL
from tests.ki_query.credentials import ANNA_KEY, WALLED, WALLED_KEY, keyed_settings, signing_key  # noqa: F401
from tests.ki_query.retrieval_fixtures import GROUP, MEMBER, FolderWorld, build_folder_world
from tests.ki_workers.conftest import FOLDER, CountingEmbedder
from tests.ki_workers.stages.test_convert import make_pdf

# A long brief: 30 numbered sections of about 4,000 characters each, 120,000 characters in all.
LONG_SECTIONS = 30
LONG_TEXT = "Schriftsatz zur Klageerwiderung\n\n" + "\n\n".join(
    f"§ {n} Abschnitt {n}\n" + " ".join(f"Satz {n}.{i} des Vortrags zur Mietminderung." for i in range(90))
    for n in range(1, LONG_SECTIONS + 1)
)
PDF_PAGES = [["Protokoll der Übergabe", "Zähler abgelesen"], ["Seite zwei: Schlüssel übergeben"]]


BACKENDS = ["sqlite+embedded", "postgresql+opensearch"]
T = TypeVar("T")


@contextmanager
def _store(request: pytest.FixtureRequest, root: Path, build: Callable[[WorkerContext], T]) -> Iterator[T]:
    """A migrated store of the backend pair `request.param` with the hashing embedder, filled by `build`
    (under the store's environment: the pipeline's tasks read their settings from it)."""
    name = alias = None
    with pytest.MonkeyPatch.context() as env:
        for variable in [v for v in os.environ if v.startswith("KI_") and v not in KEEP_ENV]:
            env.delenv(variable)
        if request.param.startswith("sqlite"):
            url = f"sqlite:///{root / 'ki.db'}"
        else:
            if not OPENSEARCH_URL:
                service_unavailable("opensearch", "KI_TEST_OPENSEARCH_URL is not set (CI sets it)")
            name = f"ki_read_{uuid.uuid4().hex[:12]}"
            url = create_database(name, template=request.getfixturevalue("pg_template"))
            alias = f"ki-read-{uuid.uuid4().hex[:10]}"
            env.setenv("KI_SEARCH__BACKEND", "opensearch")
            env.setenv("KI_SEARCH__OPENSEARCH__HOSTS", f'["{OPENSEARCH_URL}"]')
            env.setenv("KI_SEARCH__OPENSEARCH__NUMBER_OF_REPLICAS", "0")
            env.setenv("KI_RETRIEVAL__INDEX_NAME", alias)
        env.setenv("KI_DATABASE__URL", url)
        env.setenv("KI_STATE_DIR", str(root / "state"))
        env.setenv("KI_EMBEDDING__PROVIDER", "hashing")
        env.setenv("KI_EMBEDDING__DIMENSIONS", "64")
        get_settings.cache_clear()
        reset_worker_context()
        prepare_store(get_settings())
        context = worker_context()
        context._embedder = CountingEmbedder(HashingEmbedder(dimensions=64, model=get_settings().embedding.model))
        built = build(context)
        # Ours alone from here on: another test's reset_worker_context() must not close it.
        worker_context.cache_clear()
        get_settings.cache_clear()
    try:
        yield built
    finally:
        context.close()
        if name is not None:
            drop_database(name)
            _drop_indices(alias)


@pytest.fixture(scope="module", params=BACKENDS)
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FolderWorld]:
    """One world per module and backend pair; a test that changes it puts it back."""
    root = tmp_path_factory.mktemp("reading")

    def build(context: WorkerContext) -> FolderWorld:
        folder = root / "ordner"
        shutil.copytree(FOLDER, folder)
        (folder / "schriftsatz-lang.txt").write_text(LONG_TEXT, encoding="utf-8")
        (folder / "übergabe-protokoll.pdf").write_bytes(make_pdf(PDF_PAGES))
        built = build_folder_world(context, folder)
        with context.sessions() as session, session.begin():
            grant(session, GrantTarget.project(built.project_id), WALLED, settings=context.settings)
            grant(session, GrantTarget.document(built.documents["mietvertrag"].id), WALLED, effect=GrantEffect.DENY,
                  settings=context.settings)
        return built

    with _store(request, root, build) as built:
        yield built


def _drop_indices(alias: str) -> None:
    from ki_core.config import OpenSearchSettings
    from ki_core.search.opensearch import make_client

    client = make_client(OpenSearchSettings(hosts=[OPENSEARCH_URL]))
    names = sorted(client.indices.get(index=f"{alias}*"))
    if names:
        client.indices.delete(index=",".join(names))
    client.close()


@pytest.fixture
def client(world: FolderWorld, signing_key) -> TestClient:  # noqa: F811
    service, _, _ = world.service()
    return TestClient(create_query_app(keyed_settings(world, signing_key), lambda: service))


ANNA = {"X-API-Key": ANNA_KEY}
CARLA = {"X-API-Key": WALLED_KEY}


def _lease(world: FolderWorld) -> str:
    return world.documents["mietvertrag"].id


def _text(client: TestClient, document_id: str, headers: dict, **params) -> object:
    return client.get(f"/v1/documents/{document_id}/text", params=params, headers=headers)


# ------------------------------------------------------------------ text


def test_the_text_of_the_cited_version_by_default_with_its_sections(client: TestClient, world: FolderWorld) -> None:
    response = _text(client, _lease(world), ANNA)
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    executed = world.version("mietvertrag/v3")
    assert body["version_id"] == executed.id  # the executed version is the latest final one
    assert body["offset"] == 0 and body["total_chars"] == len(body["text"]) > 0
    assert body["text"] == _stored_text(world, executed.id)
    assert [s["id"] for s in body["sections"]] == ["§ 1", "§ 2", "§ 3", "§ 4"]
    assert body["next_offset"] is None
    assert body["citation"].startswith("Mietvertrag") and "Version v3 (unterzeichnet)" in body["citation"]


def test_a_section_and_an_earlier_version_by_id(client: TestClient, world: FolderWorld) -> None:
    draft = world.version("mietvertrag/v1")
    body = _text(client, _lease(world), ANNA, version=draft.id, section="§ 2").json()
    assert body["version_id"] == draft.id
    assert body["text"].startswith("§ 2 ") and "§ 3" not in body["text"]
    section = next(s for s in body["sections"] if s["id"] == "§ 2")
    assert body["offset"] == section["start"] and _stored_text(world, draft.id)[section["start"]:section["end"]] == body["text"]


def test_a_long_text_comes_in_pages_that_add_up_to_the_whole(client: TestClient, world: FolderWorld) -> None:
    document_id = world.documents["schriftsatz-lang"].id
    pieces, offset = [], 0
    while offset is not None:
        body = _text(client, document_id, ANNA, offset=offset, limit=50_000).json()
        assert len(body["text"]) <= 50_000
        pieces.append(body["text"])
        offset = body["next_offset"]
    assert "".join(pieces) == LONG_TEXT and body["total_chars"] == len(LONG_TEXT)
    assert len(pieces) == 3 and len(body["sections"]) == LONG_SECTIONS


def test_bad_ranges_are_refused_with_their_reason_and_a_range_past_the_end_is_empty(
    client: TestClient, world: FolderWorld
) -> None:
    document_id = _lease(world)
    too_much = _text(client, document_id, ANNA, limit=MAX_TEXT_CHARS + 1)
    assert too_much.status_code == 400 and "100,000" in too_much.json()["detail"]
    assert _text(client, document_id, ANNA, offset="zehn").status_code == 400
    assert _text(client, document_id, ANNA, offset=-1).status_code == 400
    assert _text(client, document_id, ANNA, section="§ 99").status_code == 400
    past = _text(client, document_id, ANNA, offset=10_000_000)
    assert past.status_code == 200 and past.json()["text"] == "" and past.json()["total_chars"] > 0


def test_pdf_pages_are_sections_at_the_converters_offsets(client: TestClient, world: FolderWorld) -> None:
    document_id = world.documents["übergabe-protokoll"].id
    body = _text(client, document_id, ANNA, section="page:2").json()
    assert body["text"] == "Seite zwei: Schlüssel übergeben"
    pages = [s for s in body["sections"] if s["kind"] == "page"]
    assert [p["id"] for p in pages] == ["page:1", "page:2"]


def test_a_version_of_another_document_is_not_found(client: TestClient, world: FolderWorld) -> None:
    annex_version = world.version("anlage-1/v1")
    response = _text(client, _lease(world), ANNA, version=annex_version.id)
    assert response.status_code == 404


def test_a_walled_document_reads_exactly_like_one_that_does_not_exist(client: TestClient, world: FolderWorld) -> None:
    lease = _lease(world)
    assert _text(client, world.documents["anlage-1"].id, CARLA).status_code == 200  # she sees the project
    for suffix in ("", "/text", "/original"):
        walled = client.get(f"/v1/documents/{lease}{suffix}", headers=CARLA)
        missing = client.get(f"/v1/documents/{'0' * 32}{suffix}", headers=CARLA)
        assert walled.status_code == missing.status_code == 404
        assert walled.json()["detail"].replace(lease, "ID") == missing.json()["detail"].replace("0" * 32, "ID")
        assert walled.headers.keys() == missing.headers.keys()


def test_after_a_revocation_text_and_original_are_gone_on_the_very_next_request(
    client: TestClient, world: FolderWorld
) -> None:
    lease = _lease(world)
    assert _text(client, lease, ANNA).status_code == 200
    assert client.get(f"/v1/documents/{lease}/original", headers=ANNA).status_code == 200
    with world.ctx.sessions() as session, session.begin():
        revoke(session, GrantTarget.project(world.project_id), GROUP, settings=world.ctx.settings)
    try:
        assert _text(client, lease, ANNA).status_code == 404
        assert client.get(f"/v1/documents/{lease}/original", headers=ANNA).status_code == 404
    finally:
        with world.ctx.sessions() as session, session.begin():
            grant(session, GrantTarget.project(world.project_id), GROUP, settings=world.ctx.settings)


# ------------------------------------------------------------------ original


def test_the_original_is_the_files_bytes_with_its_name_and_type(client: TestClient, world: FolderWorld) -> None:
    document_id = world.documents["übergabe-protokoll"].id
    response = client.get(f"/v1/documents/{document_id}/original", headers=ANNA)
    assert response.status_code == 200
    version = world.versions["übergabe-protokoll/v1"]
    assert hashlib.sha256(response.content).hexdigest() == version.content_hash
    assert response.headers["content-type"] == "application/pdf"
    disposition = response.headers["content-disposition"]
    assert disposition.startswith('attachment; filename="ubergabe-protokoll.pdf"')
    assert "filename*=UTF-8''%C3%BCbergabe-protokoll.pdf" in disposition
    assert response.headers["cache-control"] == "no-store"


def test_a_changed_file_is_a_409_naming_it(client: TestClient, world: FolderWorld) -> None:
    path = Path(world.ctx.settings.state_dir).parent / "ordner" / "vertrag" / "v3-unterzeichnet.txt"
    before = path.read_bytes()
    path.write_text("geändert", encoding="utf-8")
    try:
        response = client.get(f"/v1/documents/{_lease(world)}/original", headers=ANNA)
    finally:
        path.write_bytes(before)
    assert response.status_code == 409
    assert "v3-unterzeichnet.txt" in response.json()["detail"]


# ------------------------------------------------------------------ MCP


def _mcp(world: FolderWorld, principals: tuple[str, ...], arguments: dict):
    service, _, _ = world.service()
    server = create_mcp_server(lambda: service, Identity("test", principals), audit=audit_log(world.ctx.settings))

    async def run():
        async with Client(server) as client:
            return await client.call_tool("read_document", arguments)

    return anyio.run(run)


def _payload(result) -> dict:
    content = result.structured_content
    if content is not None:
        return content.get("result", content)
    return json.loads(result.content[0].text)


def test_mcp_reads_on_from_a_hit_with_the_citation(world: FolderWorld) -> None:
    result = _mcp(world, (MEMBER,), {"document_id": _lease(world), "section": "§ 3"})
    assert not result.is_error
    body = _payload(result)
    assert body["text"].startswith("§ 3 Haftung") and body["citation"]
    first = _payload(_mcp(world, (MEMBER,), {"document_id": world.documents["schriftsatz-lang"].id, "limit": 1000}))
    more = _payload(_mcp(world, (MEMBER,), {"document_id": world.documents["schriftsatz-lang"].id,
                                            "offset": first["next_offset"], "limit": 1000}))
    assert first["text"] + more["text"] == LONG_TEXT[:2000]


def test_mcp_refuses_a_range_above_the_cap_with_its_reason(world: FolderWorld) -> None:
    result = _mcp(world, (MEMBER,), {"document_id": _lease(world), "limit": MAX_TEXT_CHARS + 1})
    assert result.is_error and "100,000" in result.content[0].text


def test_mcp_reading_a_walled_document_is_reading_one_that_does_not_exist(world: FolderWorld) -> None:
    lease = _lease(world)
    walled = _mcp(world, (WALLED,), {"document_id": lease})
    missing = _mcp(world, (WALLED,), {"document_id": "0" * 32})
    assert walled.is_error and missing.is_error
    assert walled.content[0].text.replace(lease, "ID") == missing.content[0].text.replace("0" * 32, "ID")
    revoked_version = _mcp(world, (WALLED,), {"document_id": lease, "version": world.version("mietvertrag/v1").id})
    assert revoked_version.content[0].text.replace(lease, "ID") == missing.content[0].text.replace("0" * 32, "ID")


def _stored_text(world: FolderWorld, version_id: str) -> str:
    return _stored_text_of(world.ctx, version_id)


def _stored_text_of(context: WorkerContext, version_id: str) -> str:
    with context.sessions() as session:
        return session.get(DocumentVersion, version_id).text


# ------------------------------------------------------------------ excerpts on the demo


REPO = Path(__file__).resolve().parents[2]
DEMO_QUERIES = ["Haftungsbegrenzung", "Rahmenliefervertrag Nordbau", "Kündigung aus wichtigem Grund",
                "Vertraulichkeit Studiendaten", "Mietminderung Formularklausel", "Gewährleistung Mängel",
                "Datenschutz DSGVO", "Stadtwerke Nordheide Lieferverzug", "Dr. Vogt Arbeitsvertrag",
                "Bebauungsplan Festsetzungen"]
PROFILE_LABELS = ("Titel:", "Dokumenttyp:", "Sache:", "Zeichen:", "Parteien:", "Kennungen:", "Datum:")


@pytest.fixture(scope="module", params=BACKENDS)
def demo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerContext]:
    """The demo's two client folders (examples/), ingested as `ki demo` does, for an admin to search."""
    root = tmp_path_factory.mktemp("demo")

    def build(context: WorkerContext) -> WorkerContext:
        for project in ("nordbau", "hanse"):
            folder = root / project
            shutil.copytree(REPO / "examples" / f"kanzlei-mandant-{project}", folder)
            sync_folder(context, folder, project)
        return context

    with _store(request, root, build) as context:
        yield context


def test_no_excerpt_of_any_hit_of_ten_demo_queries_shows_a_profile_line(demo: WorkerContext) -> None:
    service = RetrievalService(demo.settings, demo.sessions, demo.index(), demo.embedder(),
                               AccessService(demo.sessions, demo.settings))
    kinds, shown = set(), 0
    for query in DEMO_QUERIES:
        for hit in service.search(SearchRequest(query=query, limit=20), ["role:admin"]).hits:
            kinds.add(hit.chunk_kind)
            shown += 1
            own = " ".join(_stored_text_of(demo, hit.version_id).split())
            # The document's own words ("Unser Zeichen: 0117/23" is a letter's), never the profile's lines.
            assert hit.excerpt.strip("…") in own, (query, hit.chunk_kind, hit.excerpt)
            assert not [label for label in PROFILE_LABELS if label in hit.excerpt and label not in own]
            assert hit.citation.passage_start is not None and hit.citation.cite_as
    assert shown >= 60 and "profile" in kinds  # profile rows do win hits: their excerpts were the problem
