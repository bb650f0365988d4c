"""Indexed worlds for the retrieval tests: the fixture folder through the real pipeline.

`folder_world` ingests tests/fixtures/folder once per module and database
(SQLite and PostgreSQL) with the hashing embedder, grants the project to the
group `team:miete` (member `anna`), and hands out a context the read-only
tests share; tests that change SQL or the index use `fresh_world`, built on
the pipeline's own `ctx` and `folder` fixtures. Import the fixtures you use
into the test module.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ki.commands.storage.store import prepare_store
from ki_core.config import Settings, get_settings
from ki_core.embedding import HashingEmbedder
from ki_core.grants import GrantTarget, grant, replace_group_members
from ki_core.models import Document, DocumentVersion, Project, Source
from ki_core.search.types import (
    FilterHit,
    MultiSearchRequest,
    MultiSearchResult,
    ScopeFilter,
    SearchFilters,
)
from ki_query.retrieval import RetrievalService
from ki_query.scope import AccessService
from ki_workers.context import WorkerContext, reset_worker_context, worker_context
from ki_workers.folder_sync import sync_folder
from tests.conftest import _KEEP_ENV as KEEP_ENV
from tests.conftest import create_database, drop_database
from tests.ki_workers.conftest import (  # noqa: F401 - fixtures
    FOLDER,
    CountingEmbedder,
    ctx,
    database_url,
    folder,
)

PROJECT = "kontorwerk"
GROUP = "team:miete"
MEMBER = "anna"
ADMIN = "role:admin"
DIMENSIONS = 64


class RecordingIndex:
    """The real index, remembering what it was asked (tests read the requests, results stay real)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.requests: list[MultiSearchRequest] = []
        self.filter_calls: list[tuple[ScopeFilter, SearchFilters, int, int]] = []

    def multi_search(self, request: MultiSearchRequest) -> MultiSearchResult:
        self.requests.append(request)
        return self.inner.multi_search(request)

    def search_filter(self, scope: ScopeFilter, filters: SearchFilters, size: int, offset: int = 0) -> list[FilterHit]:
        self.filter_calls.append((scope, filters, size, offset))
        return self.inner.search_filter(scope, filters, size, offset)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class FolderWorld:
    ctx: WorkerContext
    project_id: str
    source_id: str
    documents: dict[str, Document]
    # "mietvertrag/v1" ... by document key and version label (or "v1" where the manifest names none)
    versions: dict[str, DocumentVersion]

    def service(self, *, gateway: Any = None, **retrieval: Any) -> tuple[RetrievalService, RecordingIndex, CountingEmbedder]:
        """A fresh service over the world, with its own recording index and counting embedder."""
        settings = self.settings(**retrieval)
        index = RecordingIndex(self.ctx.index())
        embedder = CountingEmbedder(HashingEmbedder(dimensions=DIMENSIONS))
        access = AccessService(self.ctx.sessions, settings)
        return RetrievalService(settings, self.ctx.sessions, index, embedder, access, gateway), index, embedder

    def settings(self, **retrieval: Any) -> Settings:
        base = self.ctx.settings
        return base.model_copy(update={"retrieval": base.retrieval.model_copy(update=retrieval)})

    def version(self, name: str) -> DocumentVersion:
        return self.versions[name]


def build_folder_world(ctx: WorkerContext, folder: Path) -> FolderWorld:
    sync_folder(ctx, folder, PROJECT)
    with ctx.sessions() as session, session.begin():
        project = session.scalar(select(Project).where(Project.name == PROJECT))
        source = session.scalar(select(Source).where(Source.name.like("local:%")))
        grant(session, GrantTarget.project(project.id), GROUP, settings=ctx.settings)
        replace_group_members(session, source.id, GROUP, [MEMBER], settings=ctx.settings)
    with ctx.sessions() as session:
        documents = {d.key: d for d in session.scalars(select(Document))}
        versions = {}
        for document in documents.values():
            for version in session.scalars(select(DocumentVersion).where(DocumentVersion.document_id == document.id)):
                versions[f"{document.key}/{version.version_label or f'v{version.seq}'}"] = version
    return FolderWorld(ctx, project.id, source.id, documents, versions)


@pytest.fixture
def fresh_world(ctx: WorkerContext, folder: Path) -> FolderWorld:
    """A world of this test's own: change SQL or the index at will."""
    return build_folder_world(ctx, folder)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def folder_world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FolderWorld]:
    """One ingested world per module and database, shared by tests that only read it."""
    root = tmp_path_factory.mktemp("folder-world")
    name = None
    if request.param == "sqlite":
        url = f"sqlite:///{root / 'ki.db'}"
    else:
        name = f"ki_rt_{uuid.uuid4().hex[:12]}"
        url = create_database(name, template=request.getfixturevalue("pg_template"))
    shutil.copytree(FOLDER, root / "ordner")
    with pytest.MonkeyPatch.context() as env:
        for variable in [v for v in os.environ if v.startswith("KI_") and v not in KEEP_ENV]:
            env.delenv(variable)
        env.chdir(root)
        env.setenv("KI_DATABASE__URL", url)
        env.setenv("KI_STATE_DIR", str(root / "state"))
        env.setenv("KI_EMBEDDING__PROVIDER", "hashing")
        env.setenv("KI_EMBEDDING__DIMENSIONS", str(DIMENSIONS))
        get_settings.cache_clear()
        reset_worker_context()
        prepare_store(get_settings())
        context = worker_context()
        context._embedder = CountingEmbedder(HashingEmbedder(dimensions=DIMENSIONS))
        world = build_folder_world(context, root / "ordner")
        # Ours alone from here on: another test's reset_worker_context() must not close it.
        worker_context.cache_clear()
        get_settings.cache_clear()
    try:
        yield world
    finally:
        context.close()
        if name is not None:
            drop_database(name)
