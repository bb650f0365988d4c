"""`ki reindex`: a rebuild from SQL that reuses stored vectors and survives an embedder change."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from ki_core.config import get_settings
from ki_core.embedding import HashingEmbedder
from ki_core.models import Chunk
from ki_core.search.index import open_index
from ki_core.search.types import IndexDimensionMismatch
from ki_workers.context import reset_worker_context, worker_context
from ki_workers.folder_sync import sync_folder
from ki_workers.reindex import rebuild_index
from tests.ki_workers.conftest import CountingEmbedder


def test_rebuild_reuses_stored_vectors(ctx, folder: Path) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    before = ctx.index().count()
    embedded = ctx.embedder().passages
    report = rebuild_index(ctx)
    assert report.chunks == before and report.re_embedded_versions == 0
    assert ctx.embedder().passages == embedded
    assert ctx.index().count() == before


def test_a_new_embedder_dimension_needs_reindex_and_reindex_fixes_it(ctx, folder: Path, monkeypatch) -> None:
    sync_folder(ctx, folder, "kontorwerk")
    count = ctx.index().count()
    reset_worker_context()
    monkeypatch.setenv("KI_EMBEDDING__DIMENSIONS", "32")
    get_settings.cache_clear()
    with pytest.raises(IndexDimensionMismatch, match="ki reindex"):
        open_index(get_settings()).ensure()
    new_ctx = worker_context()
    new_ctx._embedder = CountingEmbedder(HashingEmbedder(dimensions=32, model=get_settings().embedding.model))
    report = rebuild_index(new_ctx)
    assert report.re_embedded_versions == 5
    assert new_ctx.index().count() == count
    with new_ctx.sessions() as session:
        signatures = set(session.scalars(select(Chunk.embedding_signature)))
    assert signatures == {f"hashing:{get_settings().embedding.model}:32"}
