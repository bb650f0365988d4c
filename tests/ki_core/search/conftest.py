"""The contract suite's fixtures: both backends (tests/ki_core/search/backends.py) loaded with one fixture.

Fixture chunks are real BGB Absätze (tests/fixtures/search_chunks.jsonl) spread over three
projects, nine versions and every filter field; vectors are hashed unit vectors of the text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from ki_core.search.index import IndexOp, SearchIndex
from ki_core.search.types import IndexChunk, ScopeFilter, SearchFilters
from tests.ki_core.search.backends import CONTRACT_BACKENDS, DIMS, OPENSEARCH_URL, Backend, make_backend

FIXTURE = Path(__file__).parents[2] / "fixtures" / "search_chunks.jsonl"


def unit_vector(seed: str, dims: int = DIMS) -> tuple[float, ...]:
    """A deterministic unit vector per seed (the hashing embedder of the tests)."""
    rng = np.random.default_rng(int(hashlib.sha256(seed.encode()).hexdigest()[:16], 16))
    vector = rng.standard_normal(dims)
    return tuple(float(x) for x in vector / np.linalg.norm(vector))


def load_fixture_chunks() -> list[IndexChunk]:
    chunks = []
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        source = row.pop("source")
        row["doc_date"] = date.fromisoformat(row["doc_date"]) if row["doc_date"] else None
        row["embedding"] = unit_vector(row["text"])
        row["meta"] = {"source": source, "kind": row["chunk_kind"]}
        row["allowed_principals"] = (f"group:{row['project_id']}",)
        chunks.append(IndexChunk(**row))
    return chunks


FIXTURE_CHUNKS = load_fixture_chunks()


def admits(chunk: IndexChunk, scope: ScopeFilter | None, filters: SearchFilters | None) -> bool:
    """The oracle: the spec's filter table written out plainly, row by row."""
    if scope is not None and not scope.admits(chunk.project_id, chunk.document_id):
        return False
    if filters is None:
        return True
    terms = {
        "project_id": chunk.project_id,
        "matter_id": chunk.matter_id,
        "version_status": chunk.version_status,
        "language": chunk.language,
        "clause_type": chunk.clause_type,
        "chunk_kind": chunk.chunk_kind,
    }
    if any(getattr(filters, name) not in (None, value) for name, value in terms.items()):
        return False
    if filters.doc_type is not None and filters.doc_type not in chunk.doc_type_ancestors:
        return False
    if filters.date_from or filters.date_to:
        if chunk.doc_date is None:
            return False
        if filters.date_from and chunk.doc_date < filters.date_from:
            return False
        if filters.date_to and chunk.doc_date > filters.date_to:
            return False
    return True


def admitted_ids(scope: ScopeFilter | None, filters: SearchFilters | None) -> set[int]:
    return {c.chunk_id for c in FIXTURE_CHUNKS if admits(c, scope, filters)}


def chunk_ids_of(**fields: object) -> set[int]:
    return {c.chunk_id for c in FIXTURE_CHUNKS if all(getattr(c, k) == v for k, v in fields.items())}


EVERYTHING = ScopeFilter(project_ids=frozenset({c.project_id for c in FIXTURE_CHUNKS}))


@pytest.fixture(params=CONTRACT_BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    chosen, cleanup = make_backend(request.param, tmp_path / "index")
    try:
        yield chosen
    finally:
        chosen.close_all()
        cleanup()


@pytest.fixture
def search_index(backend: Backend) -> SearchIndex:
    index = backend.open()
    index.ensure()
    return index


def write_fixture(index: SearchIndex) -> SearchIndex:
    index.bulk(IndexOp(chunk) for chunk in FIXTURE_CHUNKS)
    index.refresh()
    return index


@pytest.fixture
def loaded_index(search_index: SearchIndex) -> SearchIndex:
    return write_fixture(search_index)


@pytest.fixture(scope="module", params=CONTRACT_BACKENDS)
def shared_loaded_index(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearchIndex]:
    """One loaded index per module for read-only property tests (hypothesis runs many examples)."""
    chosen, cleanup = make_backend(request.param, tmp_path_factory.mktemp("shared") / "index")
    try:
        index = chosen.open()
        index.ensure()
        yield write_fixture(index)
    finally:
        chosen.close_all()
        cleanup()
