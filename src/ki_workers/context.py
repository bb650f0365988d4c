"""What a worker process needs, built once from Settings: sessions, the index, the models.

Tasks carry ids only and reach everything else through `worker_context()`;
the embedded runtime (the CLI running tasks in-process) uses the same object.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from ki_core.config import Settings, get_settings
from ki_core.db import engine_from_settings, session_factory
from ki_core.embedding import Embedder, embedder_from_settings
from ki_core.search.index import SearchIndex, open_index
from ki_core.search.signature import bind_index_signature
from ki_core.store_identity import bind_index_to_store


@dataclass
class WorkerContext:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    _index: SearchIndex | None = None
    _embedder: Embedder | None = None
    _kept: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # The versions and drafts waiting for one shared index write, a stage's own state
    # (stages.embed_index.IndexWrites); None when every version is written at once.
    index_writes: Any = None
    # The versions waiting to be extracted in one transaction, a stage's own state
    # (stages.record_metadata.ExtractionBatch); None when each is extracted at once.
    extraction_batch: Any = None
    # The helper process of stages.rules_ahead, kept from one sync to the next; closed with the context.
    rules_helper: Any = None
    # In-process batch work (a folder sync) watches a long version's chunks being embedded: (version id, done, total).
    embed_progress: Callable[[str, int, int], None] | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> WorkerContext:
        engine = engine_from_settings(settings)
        return cls(settings=settings, engine=engine, sessions=session_factory(engine))

    def index(self) -> SearchIndex:
        """The writable index, opened and verified on first use (the embedded one takes the writer lock)."""
        with self._lock:
            if self._index is None:
                index = open_index(self.settings)
                try:
                    index.ensure()
                    bind_index_to_store(index, self.settings, self.sessions, claim=True)
                    bind_index_signature(index, self.settings, self.sessions, claim=True)
                except BaseException:
                    index.close()
                    raise
                self._index = index
            return self._index

    def embedder(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                self._embedder = embedder_from_settings(self.settings)
            return self._embedder

    def kept(self, key: str, make: Callable[[], Any]) -> Any:
        """An object a stage makes on first use and the context keeps for its life (the metadata
        extractor): made once, under the lock. The stage knows how; the context imports no stage."""
        with self._lock:
            if key not in self._kept:
                self._kept[key] = make()
            return self._kept[key]

    def close_index(self) -> None:
        """Release the index (the embedded writer lock); the next index() reopens it."""
        with self._lock:
            if self._index is not None:
                self._index.close()
                self._index = None

    def close(self) -> None:
        with self._lock:
            if self._index is not None:
                self._index.close()
                self._index = None
            closer = getattr(self._embedder, "close", None)
            if closer is not None:
                closer()
            self._embedder = None
            if self.rules_helper is not None:
                self.rules_helper.close()
                self.rules_helper = None
        self.engine.dispose()


@cache
def worker_context() -> WorkerContext:
    return WorkerContext.from_settings(get_settings())


def reset_worker_context() -> None:
    """Close and forget the process-wide context (tests, or after a settings change)."""
    if worker_context.cache_info().currsize:
        worker_context().close()
    worker_context.cache_clear()
