"""The one contract both search backends keep: `SearchIndex` and its three bulk operations.

Callers (the pipeline's index stage, access reindex, retrieval) speak only in these and
the typed models of `ki_core.search.types`. The backends import this module and never the
factory (`ki_core.search.index`), which imports them: the dependency runs one way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ki_core.search.constraint import Constraint
from ki_core.search.signature import IndexSignature
from ki_core.search.types import (
    AccessProjection,
    FilterHit,
    IndexChunk,
    MultiSearchRequest,
    MultiSearchResult,
    ScopeFilter,
    SearchFilters,
)

# How identifiers_text is cut into tokens, identically in both backends (tantivy regex
# tokenizer, OpenSearch pattern tokenizer): a token starts and ends with a letter or digit
# and may contain "/ . : -" inside, so "VIII ZR 123/20" gives viii|zr|123/20, "§ 573c BGB"
# gives §|573c|bgb and "ECLI:DE:BGH:2020:..." stays whole. The standard analyzer would split
# 123/20 into 123|20 (matching every "123") and drop "§"; a plain whitespace tokenizer would
# keep the trailing comma of "123/20," and miss. The exact identifier then outranks a near
# miss ("124/20", "§ 573") because it matches one more, rare token.
IDENTIFIER_TOKEN_PATTERN = r"[\p{L}\p{N}](?:[\p{L}\p{N}/.:\-]*[\p{L}\p{N}])?|§+"


@dataclass(frozen=True, slots=True)
class IndexOp:
    """Write (or overwrite) one chunk with all its fields, vector included."""

    chunk: IndexChunk

    @property
    def chunk_ids(self) -> tuple[int, ...]:
        return (self.chunk.chunk_id,)


@dataclass(frozen=True, slots=True)
class UpdateAccessOp:
    """Replace the access projection of existing chunks; text and vector stay untouched."""

    projection: AccessProjection

    @property
    def chunk_ids(self) -> tuple[int, ...]:
        return self.projection.chunk_ids


@dataclass(frozen=True, slots=True)
class DeleteOp:
    """Remove one chunk; deleting a chunk that is not there is not an error (idempotent tasks)."""

    chunk_id: int

    @property
    def chunk_ids(self) -> tuple[int, ...]:
        return (self.chunk_id,)


BulkOperation = IndexOp | UpdateAccessOp | DeleteOp


@runtime_checkable
class SearchIndex(Protocol):
    """A chunk index that ranks inside a strict filter. Both backends pass one contract suite.

    Writes become visible to searches after `refresh()`; `bulk` raises BulkFailure naming
    every failed chunk id after writing the others.
    """

    def ensure(self) -> None:
        """Create the index or verify it: add missing fields, raise IndexDimensionMismatch."""
        ...

    def bulk(self, operations: Iterable[BulkOperation]) -> None: ...

    def update_access(self, projections: Iterable[AccessProjection]) -> None:
        """Access-only reindex, through the same bulk path."""
        ...

    def delete_document(self, document_id: str) -> None:
        """Remove every chunk of every version of one document."""
        ...

    def multi_search(self, request: MultiSearchRequest) -> MultiSearchResult:
        """Run request.legs_to_send() in one round-trip; a failed leg raises SearchBackendError."""
        ...

    def version_sets(
        self, scope: ScopeFilter, filters: SearchFilters, conditions: Sequence[Constraint]
    ) -> list[dict[str, str]]:
        """Per condition, every version in scope holding a chunk that satisfies it (version id ->
        document id), however many: what a boolean query's document-level algebra combines."""
        ...

    def search_filter(
        self, scope: ScopeFilter, filters: SearchFilters, size: int, offset: int = 0
    ) -> list[FilterHit]:
        """Filter-only hits, one per version (its lowest chunk id), doc_date descending.

        Ties break on version id, then chunk id; chunks without doc_date come last.
        Deduplication happens in the index so that offset counts versions, as the caller pages.
        """
        ...

    def count(self, scope: ScopeFilter | None = None, filters: SearchFilters | None = None) -> int:
        """Chunks admitted by scope and filters (all chunks when both are None)."""
        ...

    def stored_fields(self, chunk_id: int) -> dict[str, Any] | None:
        """Every indexed field of one chunk except text and vector, or None (inspection, export)."""
        ...

    def stored_fields_of(self, chunk_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """stored_fields of many chunks in a few round trips (the reconcile checks every version);
        chunks the index does not hold are absent from the result."""
        ...

    def store_id(self) -> str | None:
        """The id of the SQL store this index was filled from (ki_core.store_identity); None before
        a writer claimed it (a new index, or one built before stores had ids)."""
        ...

    def claim_store(self, store_id: str) -> None:
        """Record which SQL store fills this index (the writer, on first use; `ki reindex`)."""
        ...

    def recorded_signature(self) -> IndexSignature | None:
        """What built this index's vectors and identifiers (ki_core.search.signature); None before it
        was recorded. Searches and writes of a process configured otherwise raise IndexSignatureMismatch."""
        ...

    def record_signature(self, signature: IndexSignature) -> None: ...

    def refresh(self) -> None: ...

    def close(self) -> None: ...


def update_access_ops(projections: Iterable[AccessProjection]) -> list[BulkOperation]:
    return [UpdateAccessOp(projection) for projection in projections]
