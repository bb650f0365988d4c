"""Which backend answers: `open_index` from the configuration (`search.backend`), and the
signature that names an index after its embedder.

The contract itself (`SearchIndex`, the bulk operations) lives in `ki_core.search.contract`,
which the backends import; its names are re-exported here for callers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ki_core.search.contract import (
    IDENTIFIER_TOKEN_PATTERN,
    BulkOperation,
    DeleteOp,
    IndexOp,
    SearchIndex,
    UpdateAccessOp,
    update_access_ops,
)

if TYPE_CHECKING:
    from ki_core.config import Settings

__all__ = [
    "IDENTIFIER_TOKEN_PATTERN",
    "BulkOperation",
    "DeleteOp",
    "IndexOp",
    "SearchIndex",
    "UpdateAccessOp",
    "index_signature",
    "open_index",
    "update_access_ops",
]


def index_signature(settings: Settings) -> str:
    """Embedding model and dimension (vectors of two signatures cannot share one index) and the
    identifier extractor's version (indexed identifiers and the query's must come from one)."""
    from ki_core.search.signature import configured_signature

    return configured_signature(settings).text()


def open_index(
    settings: Settings, index_name: str | None = None, *, read_only: bool = False
) -> SearchIndex:
    """The configured backend, not yet ensured.

    index_name: OpenSearch alias (default retrieval.index_name); for the embedded backend a
    subdirectory of the index path. read_only: embedded readers take no writer lock and
    reopen after the writer commits; OpenSearch ignores it.
    """
    from ki_core.search.signature import configured_signature

    # The store's own index keeps its signature; a corpus (index_name) is checked by its registry
    # entry's embedding signature and rebuilt by `ki corpus load`, not `ki reindex`.
    expected = configured_signature(settings) if index_name is None else None
    if settings.search.backend == "opensearch":
        from ki_core.search.opensearch import OpenSearchIndex, make_client

        return OpenSearchIndex(
            make_client(settings.search.opensearch),
            alias=index_name or settings.retrieval.index_name,
            dimensions=settings.effective_embedding_dimensions,
            signature=index_signature(settings),
            retrieval=settings.retrieval,
            opensearch=settings.search.opensearch,
            expected_signature=expected,
        )
    from ki_core.search.embedded import EmbeddedIndex

    path = settings.embedded_index_path
    return EmbeddedIndex(
        path / index_name if index_name else path,
        dimensions=settings.effective_embedding_dimensions,
        read_only=read_only,
        commit_batch_chunks=settings.search.embedded.commit_batch_chunks,
        expected_signature=expected,
    )
