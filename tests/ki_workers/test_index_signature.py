"""Never a mixed index (amendments.md 7): an index built by one embedder or extractor refuses a process
configured with another, same dimension included, on both backends, until `ki reindex` rebuilds it."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from ki_core.config import SecuritySettings, get_settings
from ki_core.embedding import HashingEmbedder
from ki_core.models import Chunk
from ki_core.search.signature import configured_signature
from ki_core.search.types import IndexSignatureMismatch
from ki_query.api.http import create_query_app
from ki_query.retrieval import retrieval_service_from_settings
from ki_query.types import SearchRequest
from ki_workers.context import reset_worker_context, worker_context
from ki_workers.folder_sync import sync_folder
from ki_workers.reindex import rebuild_index
from tests.ki_workers.conftest import CountingEmbedder

KEY = "key-signature-0123456789"
QUERY = "Mietvertrag Kaution"
ADMIN = "role:admin"  # security.admin_principals: every version is visible


def searched(settings) -> int:
    """Hits of a fresh query process under `settings`."""
    service = retrieval_service_from_settings(settings)
    try:
        return len(service.search(SearchRequest(query=QUERY, limit=20), [ADMIN]).hits)
    finally:
        service.close()


def switch(monkeypatch: pytest.MonkeyPatch, **env: str):
    """The same store under a new configuration, as a restarted process would read it."""
    reset_worker_context()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    ctx = worker_context()
    ctx._embedder = CountingEmbedder(HashingEmbedder(dimensions=64, model=get_settings().embedding.model))
    return ctx


def assert_refused_naming_both(error: pytest.ExceptionInfo, old: str, new: str) -> None:
    message = str(error.value)
    assert f"\"{old}\"" in message and f"\"{new}\"" in message and "`ki reindex`" in message, message


def test_a_same_dimension_model_switch_refuses_search_and_ingest_until_reindex(
    search_backend: str, ctx, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    old = configured_signature(get_settings()).text()
    assert searched(get_settings()) > 0

    new_ctx = switch(monkeypatch, KI_EMBEDDING__MODEL="another-model")  # 64 dimensions, as before
    new = configured_signature(get_settings()).text()
    assert new != old and "dim=64" in new and "dim=64" in old
    with pytest.raises(IndexSignatureMismatch) as refused_search:
        searched(get_settings())
    assert_refused_naming_both(refused_search, old, new)
    (folder / "neu.txt").write_text("Nachtrag: Die Kaution beträgt drei Monatsmieten.\n" * 5, encoding="utf-8")
    with pytest.raises(IndexSignatureMismatch) as refused_ingest:
        sync_folder(new_ctx, folder, "kontorwerk")
    assert_refused_naming_both(refused_ingest, old, new)

    report = rebuild_index(new_ctx)

    assert report.re_embedded_versions >= 5
    assert new_ctx.index().recorded_signature() == configured_signature(get_settings())
    with new_ctx.sessions() as session:
        assert set(session.scalars(select(Chunk.embedding_signature))) == {"hashing:another-model:64"}
    assert searched(get_settings()) > 0
    sync_folder(new_ctx, folder, "kontorwerk")  # ingest serves again


def test_a_new_identifier_extractor_is_refused_until_reindex(
    search_backend: str, ctx, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ki_core.identifiers

    sync_folder(ctx, folder, "kontorwerk")
    old = configured_signature(get_settings()).text()
    monkeypatch.setattr(ki_core.identifiers, "EXTRACTOR_VERSION", ki_core.identifiers.EXTRACTOR_VERSION + 1)
    new_ctx = switch(monkeypatch)
    new = configured_signature(get_settings()).text()
    with pytest.raises(IndexSignatureMismatch) as refused:
        new_ctx.index()
    assert_refused_naming_both(refused, old, new)

    report = rebuild_index(new_ctx)

    assert report.re_extracted_versions >= 5 and report.re_embedded_versions == 0
    assert searched(get_settings()) > 0


def test_a_process_of_the_old_configuration_answers_503_naming_both_after_reindex(
    search_backend: str, ctx, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ki reindex` with the new configuration while the old processes serve, then restart them:
    until they restart they refuse (never answer from the other model's vectors)."""
    from ki_query.identity import key_digest

    sync_folder(ctx, folder, "kontorwerk")
    old_settings = get_settings()
    security = SecuritySettings.model_validate(
        old_settings.security.model_dump(mode="python")
        | {"api_keys": {"ops": {"sha256": key_digest(KEY), "principals": [ADMIN]}}}
    )
    service = retrieval_service_from_settings(old_settings)
    client = TestClient(create_query_app(old_settings.model_copy(update={"security": security}), lambda: service))
    assert client.post("/v1/search", json={"query": QUERY}, headers={"X-API-Key": KEY}).status_code == 200

    new_ctx = switch(monkeypatch, KI_EMBEDDING__MODEL="another-model")
    rebuild_index(new_ctx)
    response = client.post("/v1/search", json={"query": QUERY}, headers={"X-API-Key": KEY})

    assert response.status_code == 503
    detail = response.json()["detail"]
    assert configured_signature(get_settings()).text() in detail and "ki reindex" in detail
    assert configured_signature(old_settings).text() in detail
    service.close()


def test_the_demo_rebuilds_its_own_index_when_an_older_extractor_built_it(
    ctx, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ki demo` keeps a store of its own: after an update it rebuilds that index instead of refusing."""
    import ki_core.identifiers
    from rich.console import Console

    from ki.commands.corpora.demo import rebuild_an_outdated_index

    sync_folder(ctx, folder, "kontorwerk")
    monkeypatch.setattr(ki_core.identifiers, "EXTRACTOR_VERSION", ki_core.identifiers.EXTRACTOR_VERSION + 1)
    new_ctx = switch(monkeypatch)
    with pytest.raises(IndexSignatureMismatch):
        new_ctx.index()
    console = Console(record=True, width=200)

    rebuild_an_outdated_index(get_settings(), console)

    assert "rebuilding it" in console.export_text()
    assert new_ctx.index().recorded_signature() == configured_signature(get_settings())
    assert searched(get_settings()) > 0
    rebuild_an_outdated_index(get_settings(), console := Console(record=True, width=200))
    assert console.export_text() == ""  # an index of this configuration is left as it is
