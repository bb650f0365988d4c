"""A worker context on a fresh database (SQLite or PostgreSQL) with the hashing embedder."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ki.commands.storage.store import prepare_store
from ki_core.audit import close_audit_logs
from ki_core.config import get_settings
from ki_core.embedding import EmbedderWrapper, HashingEmbedder
from ki_workers.context import reset_worker_context, worker_context
from tests.conftest import create_database, drop_database
from tests.ki_core.search.backends import CONTRACT_BACKENDS, OPENSEARCH_URL

FOLDER = Path(__file__).parents[1] / "fixtures" / "folder"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database of this test's own, committed data visible to every session."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ki.db'}"
        return
    template = request.getfixturevalue("pg_template")
    name = f"ki_test_{uuid.uuid4().hex[:12]}"
    url = create_database(name, template=template)
    try:
        yield url
    finally:
        reset_worker_context()
        close_audit_logs()  # its pooled connections to this database, before the database goes
        drop_database(name)


@pytest.fixture(params=CONTRACT_BACKENDS)
def search_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, database_url: str) -> Iterator[str]:
    """Each search backend for the worker context built after it (OpenSearch: an alias of this
    test's own on the node, deleted afterwards). Request it before `ctx`."""
    alias = f"ki-w-{uuid.uuid4().hex[:10]}"
    if request.param == "opensearch":
        monkeypatch.setenv("KI_SEARCH__BACKEND", "opensearch")
        monkeypatch.setenv("KI_SEARCH__OPENSEARCH__HOSTS", f'["{OPENSEARCH_URL}"]')
        monkeypatch.setenv("KI_SEARCH__OPENSEARCH__NUMBER_OF_REPLICAS", "0")
        monkeypatch.setenv("KI_RETRIEVAL__INDEX_NAME", alias)
    yield request.param
    if request.param == "opensearch":
        from ki_core.config import OpenSearchSettings
        from ki_core.search.opensearch import make_client

        client = make_client(OpenSearchSettings(hosts=[OPENSEARCH_URL]))
        names = sorted(client.indices.get(index=f"{alias}*"))
        if names:
            client.indices.delete(index=",".join(names))
        client.close()


@pytest.fixture
def ctx(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KI_DATABASE__URL", database_url)
    monkeypatch.setenv("KI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KI_EMBEDDING__PROVIDER", "hashing")
    monkeypatch.setenv("KI_EMBEDDING__DIMENSIONS", "64")
    get_settings.cache_clear()
    reset_worker_context()
    prepare_store(get_settings())
    context = worker_context()
    context._embedder = CountingEmbedder(HashingEmbedder(dimensions=64, model=get_settings().embedding.model))
    yield context
    reset_worker_context()


class CountingEmbedder(EmbedderWrapper):
    """The hashing embedder, counting every text it is asked to embed."""

    def __init__(self, inner: HashingEmbedder):
        super().__init__(inner)
        self.passages = 0
        self.queries = 0

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        self.passages += len(texts)
        return self.inner.embed_passages(texts)

    def embed_query(self, text: str) -> np.ndarray:
        self.queries += 1
        return self.inner.embed_query(text)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of the fixture folder the test may change."""
    target = tmp_path / "ordner"
    shutil.copytree(FOLDER, target)
    return target
