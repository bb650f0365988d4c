"""Typed inputs and outputs of the search index, shared by both backends and the query side.

No backend's wire format leaks past this module: callers speak in ScopeFilter,
SearchFilters, IndexChunk and LegHit; each backend translates them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, TypeVar, overload

import numpy as np

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ki_core.identifiers.whole_values import courts_of, value_occurrences
from ki_core.search.constraint import Constraint

T = TypeVar("T")

# Ranked paging re-ranks the whole window, so a deeper window is refused (spec: _MAX_RANKED_WINDOW).
MAX_RANKED_WINDOW = 500
# Per-leg ceiling: clears the deepest window a caller may ask for after collapse and re-verify.
MAX_LEG_SIZE = 2500
# Filter-only listings page at most this deep (OpenSearch's default index.max_result_window:
# from + size beyond it fails on a node), on both backends alike.
MAX_RESULT_WINDOW = 10_000


# Identity and filter columns of the spec's field table: untokenized keywords in both backends.
FILTER_KEYWORD_FIELDS = (
    "project_id",
    "document_id",
    "document_version_id",
    "matter_id",
    "doc_type",
    "doc_type_ancestors",
    "version_status",
    "language",
    "chunk_kind",
    "clause_type",
)
# Keyword fields derived from the identifiers (IndexChunk.identifier_values, .courts), filtered
# on by the query language's az:/norm:/gericht: in both backends.
DERIVED_KEYWORD_FIELDS = ("identifier_values", "courts")
# SearchFilters field -> the indexed field it is a term on, in every backend; doc_type is
# matched against the ancestors, so filtering by a type includes its subtypes.
TERM_FILTER_FIELDS = {
    "project_id": "project_id",
    "matter_id": "matter_id",
    "doc_type": "doc_type_ancestors",
    "version_status": "version_status",
    "language": "language",
    "clause_type": "clause_type",
    "chunk_kind": "chunk_kind",
}


def oversampled_window(n: int) -> int:
    """Hits each leg asks for when the caller wants n = offset + limit results."""
    return min(max(n * 5, 50), MAX_LEG_SIZE)


class Leg(enum.StrEnum):
    LEXICAL = "lexical"
    SEMANTIC = "semantic"
    IDENTIFIER = "identifier"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScopeFilter(_Frozen):
    """The compiled access scope in its compact form.

    A chunk is admitted when its project is in `project_ids` and its document
    is not in `excluded_document_ids`, or when its document is in
    `document_ids`. Fully visible projects cost one term each; a partly
    visible project lists its visible documents or its invisible ones,
    whichever is fewer. `match_none` admits nothing: an empty scope is never
    an unfiltered query.
    """

    match_none: bool = False
    project_ids: frozenset[str] = frozenset()
    excluded_document_ids: frozenset[str] = frozenset()
    document_ids: frozenset[str] = frozenset()

    @model_validator(mode="after")
    def _empty_means_match_none(self) -> ScopeFilter:
        if not self.project_ids and not self.document_ids and not self.match_none:
            object.__setattr__(self, "match_none", True)
        return self

    @classmethod
    def nothing(cls) -> ScopeFilter:
        return cls(match_none=True)

    def admits(self, project_id: str, document_id: str) -> bool:
        if self.match_none:
            return False
        if document_id in self.document_ids:
            return True
        return project_id in self.project_ids and document_id not in self.excluded_document_ids

    @property
    def term_count(self) -> int:
        """Number of ids the filter carries (what OpenSearch's max_terms_count limits)."""
        return len(self.project_ids) + len(self.excluded_document_ids) + len(self.document_ids)


class SearchFilters(_Frozen):
    """Metadata filters of the spec, appended to the same strict filter as the scope."""

    project_id: str | None = None
    matter_id: str | None = None
    # Subtree semantics: matched against doc_type_ancestors.
    doc_type: str | None = None
    version_status: str | None = None
    language: str | None = None
    date_from: date | None = None
    date_to: date | None = None
    clause_type: str | None = None
    chunk_kind: str | None = None

    @model_validator(mode="after")
    def _date_range_in_order(self) -> SearchFilters:
        if self.date_from and self.date_to and self.date_from > self.date_to:
            raise ValueError(f"date_from {self.date_from} is after date_to {self.date_to}")
        return self


class IndexChunk(_Frozen):
    """One document of the chunk index: every field of the spec's field table."""

    chunk_id: int
    text: str
    embedding: tuple[float, ...]
    project_id: str
    document_id: str
    document_version_id: str
    matter_id: str | None = None
    doc_type: str | None = None
    doc_type_ancestors: tuple[str, ...] = ()
    version_status: str = "unknown"
    language: str | None = None
    doc_date: date | None = None
    chunk_kind: str = "chunk"
    clause_type: str | None = None
    identifiers: tuple[str, ...] = ()
    allowed_principals: tuple[str, ...] = ()
    denied_principals: tuple[str, ...] = ()
    access_version: int = 0
    # Not indexed: source_object_id, kind, and for clause rows locus and clause_type.
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def identifiers_text(self) -> str:
        return " ".join(self.identifiers)

    @property
    def identifier_values(self) -> tuple[str, ...]:
        """Whole normalized identifiers with their ancestors, once per identifier they stand for:
        what `az:`/`norm:` filter on and the identifier leg ranks by (BM25, the count as term frequency)."""
        return value_occurrences(self.identifiers)

    @property
    def courts(self) -> tuple[str, ...]:
        """Casefolded courts named by the identifiers: what `gericht:` filters on."""
        return courts_of(self.identifiers)


class AccessProjection(_Frozen):
    """The access-only fields of every chunk of one version, updated without re-embedding."""

    document_id: str
    document_version_id: str
    chunk_ids: tuple[int, ...]
    allowed_principals: tuple[str, ...]
    denied_principals: tuple[str, ...]
    access_version: int


class MultiSearchRequest(_Frozen):
    """The three ranked legs under one strict filter, sent in one round-trip."""

    query_text: str
    query_vector: tuple[float, ...] | None
    scope: ScopeFilter
    filters: SearchFilters = SearchFilters()
    # Per-leg size; a ranked search asks every leg for the deepest window's oversampled size.
    size: int = Field(gt=0, le=MAX_LEG_SIZE)
    # The identifier leg's (value, weight) pairs: the identifiers found in the query text
    # (ki_core.identifiers.query_identifier_terms). None found: the leg does not run.
    identifier_terms: tuple[tuple[str, float], ...] = ()
    # Who asks (sorted): with the query and the index slice, what picks one shard copy for every
    # page of this query on a cluster with replicas (OpenSearch `preference`).
    principals: tuple[str, ...] = ()
    # A boolean query (amendments.md 6): every leg's hits satisfy it. The lexical leg then scores
    # the tree itself (or, with no text condition in it, lists the set in chunk id order).
    constraint: Constraint | None = None
    # With a constraint: also list every version in scope holding a chunk that satisfies it
    # (MultiSearchResult.versions), in the same round trip as the legs.
    collect_versions: bool = False

    def legs_to_send(self) -> list[Leg]:
        """Legs that can match: none of the text legs under match_none, no lexical leg for blank
        text, no identifier leg for a query that holds no identifier."""
        legs = [Leg.SEMANTIC] if self.query_vector is not None else []
        if self.scope.match_none:
            return legs
        if self.query_text.strip() or self.constraint is not None:
            legs = [Leg.LEXICAL, *legs]
        if self.identifier_terms:
            legs.append(Leg.IDENTIFIER)
        return legs


@dataclass(slots=True, kw_only=True)
class LegHit:
    """A ranked hit as read from the index, enough for fusion and boost without SQL.

    A slotted dataclass, not a pydantic model: a ranked search reads up to 2,500 hits per leg
    (3 x 2,500 per query), built by the backends from values they already typed, and a
    validated model per hit cost ~20 ms a leg and the garbage collector the rest. Fusion reads
    the columns of `LegHits` and builds a LegHit only for the hits it shows or verifies."""

    chunk_id: int
    document_id: str
    document_version_id: str
    project_id: str
    version_status: str
    chunk_kind: str
    identifiers: tuple[str, ...] = ()
    score: float
    rank: int


class RowSequence(Sequence[T]):
    """A sequence whose items are built on first read by `_item(position)`; len() says how many."""

    __slots__ = ()

    def _item(self, position: int) -> T:
        raise NotImplementedError

    @overload
    def __getitem__(self, position: int) -> T: ...
    @overload
    def __getitem__(self, position: slice) -> tuple[T, ...]: ...
    def __getitem__(self, position: int | slice) -> T | tuple[T, ...]:
        if isinstance(position, slice):
            return tuple(self._item(i) for i in range(*position.indices(len(self))))
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError(position)
        return self._item(position)

    def __iter__(self) -> Iterator[T]:
        return (self._item(i) for i in range(len(self)))


class LegHits(RowSequence[LegHit]):
    """One leg's ranked hits, best first: chunk ids, scores and version statuses as arrays for
    fusion, and a LegHit per row only when one is read (`row(i)`, built by the backend)."""

    __slots__ = ("chunk_ids", "scores", "statuses", "_row", "_documents")

    def __init__(
        self, chunk_ids: np.ndarray, scores: np.ndarray, statuses: np.ndarray, row: Callable[[int], LegHit],
        documents: Callable[[], dict[str, str]] | None = None,
    ) -> None:
        self.chunk_ids = np.asarray(chunk_ids, dtype=np.int64)
        self.scores = np.asarray(scores, dtype=np.float64)
        # Fixed-width text, not objects: fusion compares the column with each boosted status in C.
        self.statuses = np.asarray(statuses, dtype=str)
        self._row = row
        self._documents = documents

    def documents(self) -> dict[str, str]:
        """document id -> the version of its best hit, in rank order: what a search counts as matched.
        A backend may gather it from its columns (embedded) instead of building every row."""
        if self._documents is not None:
            return self._documents()
        found: dict[str, str] = {}
        for hit in self:
            found.setdefault(hit.document_id, hit.document_version_id)
        return found

    @classmethod
    def of(cls, hits: Sequence[LegHit]) -> LegHits:
        """From hits already built (OpenSearch's JSON, tests)."""
        if isinstance(hits, LegHits):
            return hits
        built = tuple(hits)
        return cls(
            np.fromiter((h.chunk_id for h in built), dtype=np.int64, count=len(built)),
            np.fromiter((h.score for h in built), dtype=np.float64, count=len(built)),
            np.array([h.version_status for h in built], dtype=str),
            built.__getitem__,
        )

    @classmethod
    def empty(cls) -> LegHits:
        return cls.of(())

    def __len__(self) -> int:
        return len(self.chunk_ids)

    def _item(self, position: int) -> LegHit:
        return self._row(position)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LegHits({len(self)} hits)"


@dataclass(frozen=True, slots=True)
class MultiSearchResult:
    legs: dict[Leg, LegHits]
    # A boolean query's whole set, however deep (ki_core.search.document_sets): version id -> document id
    # of every version in scope the query holds for. None for a ranked query.
    versions: dict[str, str] | None = None

    @property
    def document_count(self) -> int | None:
        """Documents in a boolean query's set (exact), None for a ranked query."""
        return None if self.versions is None else len(set(self.versions.values()))

    def hits(self, leg: Leg) -> LegHits:
        return self.legs.get(leg) or LegHits.empty()


class FilterHit(_Frozen):
    """A hit of the filter-only search (no ranking; doc_date descending)."""

    chunk_id: int
    document_id: str
    document_version_id: str
    project_id: str
    version_status: str
    chunk_kind: str
    doc_date: date | None = None


class BulkFailure(RuntimeError):
    """Some items of a bulk write failed; nothing degrades silently."""

    def __init__(self, failed: dict[int, str]):
        self.failed = failed
        shown = ", ".join(f"{cid}: {reason}" for cid, reason in list(failed.items())[:10])
        more = f" (+{len(failed) - 10} more)" if len(failed) > 10 else ""
        super().__init__(f"bulk write failed for {len(failed)} chunk(s): {shown}{more}")


class IndexMappingMismatch(RuntimeError):
    """The live index was built in a way this configuration cannot serve; `ki reindex` rebuilds it."""


class IndexDimensionMismatch(IndexMappingMismatch):
    """The live index holds vectors of another dimension than the configured embedder."""


class IndexSignatureMismatch(IndexMappingMismatch):
    """The index was built by another embedder or extractor than configured (ki_core.search.signature):
    searches and writes are refused until `ki reindex` (HTTP 503, CLI exit 1)."""


class ResultWindowTooDeep(ValueError):
    """A filter-only page past MAX_RESULT_WINDOW: a client error (narrow the filters), never a 503."""

    def __init__(self, offset: int, size: int) -> None:
        self.offset, self.size = offset, size
        super().__init__(
            f"offset + limit is {offset + size}, above the listing window of {MAX_RESULT_WINDOW} "
            "(OpenSearch index.max_result_window); narrow the filters (matter, project, dates) instead of paging deeper"
        )


def check_result_window(offset: int, size: int) -> None:
    """Both backends refuse the same depth, so a listing that works embedded works on OpenSearch."""
    if offset + size > MAX_RESULT_WINDOW:
        raise ResultWindowTooDeep(offset, size)


class SearchBackendError(RuntimeError):
    """The index is unreachable or a leg failed; a search never degrades silently."""
