"""Both search backends as test handles: embedded in a tmp dir, OpenSearch when KI_TEST_OPENSEARCH_URL is set.

Under KI_REQUIRE_SERVICES=1 (CI) the OpenSearch parameter is always there and a node that does
not answer fails its tests, never drops them.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session

from ki_core.config import OpenSearchSettings, RetrievalSettings
from ki_core.db import make_engine
from ki_core.search.embedded import EmbeddedIndex
from ki_core.search.index import SearchIndex

DIMS = 32
OPENSEARCH_URL = os.environ.get("KI_TEST_OPENSEARCH_URL")
CONTRACT_BACKENDS = ["embedded", *(["opensearch"] if OPENSEARCH_URL else [])]


@dataclass
class Backend:
    """Opens handles on one index of one backend; `cosine` turns a semantic score into a cosine."""

    name: str
    opener: Callable[[int], SearchIndex]
    cosine: Callable[[float], float]
    opened: list[SearchIndex] = field(default_factory=list)
    # A handle as another process's reader holds it (embedded: read-only, no writer lock).
    reader: Callable[[int], SearchIndex] | None = None

    def open(self, dims: int = DIMS) -> SearchIndex:
        index = self.opener(dims)
        self.opened.append(index)
        return index

    def open_reader(self, dims: int = DIMS) -> SearchIndex:
        index = (self.reader or self.opener)(dims)
        self.opened.append(index)
        return index

    def close_all(self) -> None:
        for index in self.opened:
            index.close()
        self.opened.clear()


def embedded_backend(path: Path) -> Backend:
    return Backend(
        "embedded", lambda dims: EmbeddedIndex(path, dimensions=dims), lambda score: score,
        reader=lambda dims: EmbeddedIndex(path, dimensions=dims, read_only=True),
    )


def opensearch_backend() -> tuple[Backend, Callable[[], None]]:
    from ki_core.search.opensearch import OpenSearchIndex, cosine_from_knn_score, make_client

    settings = OpenSearchSettings(hosts=[OPENSEARCH_URL], number_of_replicas=0)
    alias = f"ki-test-{uuid.uuid4().hex[:10]}"
    client = make_client(settings)

    def opener(dims: int) -> SearchIndex:
        return OpenSearchIndex(
            make_client(settings), alias=alias, dimensions=dims, signature=f"hashing:test:{dims}",
            retrieval=RetrievalSettings(), opensearch=settings,
        )  # fmt: skip

    def cleanup() -> None:
        names = sorted(client.indices.get(index=f"{alias}*"))
        if names:
            client.indices.delete(index=",".join(names))
        client.close()

    return Backend("opensearch", opener, lambda s: cosine_from_knn_score(s, "cosinesimil")), cleanup


def make_backend(name: str, path: Path) -> tuple[Backend, Callable[[], None]]:
    if name == "embedded":
        return embedded_backend(path), lambda: None
    return opensearch_backend()


@contextmanager
def store_beside_index(
    name: str, sqlite_template: Path, root: Path, dims: int = DIMS, database_url: str | None = None
) -> Iterator[tuple[Session, SearchIndex]]:
    """A copy of the migrated SQLite template in ROOT (or the migrated database at DATABASE_URL, which
    the caller drops) and an empty index of backend NAME beside it, both closed (and the OpenSearch
    index deleted) on exit: the world of a module-scoped retrieval fixture."""
    if database_url is None:
        shutil.copyfile(sqlite_template, root / "ki.db")
    engine = make_engine(database_url or f"sqlite:///{root / 'ki.db'}")
    session = Session(bind=engine)
    backend, cleanup = make_backend(name, root / "index")
    try:
        index = backend.open(dims)
        index.ensure()
        yield session, index
    finally:
        backend.close_all()
        cleanup()
        session.close()
        engine.dispose()
