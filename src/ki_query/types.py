"""The query side's boundary models: requests, hits with citations, documents, relations, decisions.

Everything a surface (HTTP, MCP, CLI) hands to RetrievalService or gets back
from it is one of these frozen pydantic models; the errors at the bottom are
the precise exceptions the surfaces map to status codes and exit codes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from ki_core.models import ChunkKind, RelationKind, VersionStatus
from ki_core.search.types import MAX_RANKED_WINDOW, SearchFilters

__all__ = [
    "MAX_RANKED_WINDOW",
    "Citation",
    "DecisionEvidenceRef",
    "DecisionHit",
    "DocumentNotFound",
    "DocumentRef",
    "DocumentView",
    "GrantPath",
    "Hit",
    "HitExplanation",
    "InvalidDecision",
    "InvalidFilters",
    "LegRank",
    "NewDecision",
    "ProjectRef",
    "RelatedDocument",
    "RelationEdge",
    "SearchFilters",
    "SearchRequest",
    "SearchResponse",
    "SourceRef",
    "StepTimings",
    "TraversalResult",
    "VersionRef",
    "VersionView",
    "WindowTooDeep",
    "check_filters",
    "check_window",
    "parse_filters",
]

# The first page a caller gets when it does not say (the federation asks for 8 too).
DEFAULT_LIMIT = 8


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ------------------------------------------------------------------ errors


class WindowTooDeep(ValueError):
    """offset + limit exceeds MAX_RANKED_WINDOW: ranked paging re-ranks the whole window."""

    def __init__(self, offset: int, limit: int) -> None:
        self.offset, self.limit = offset, limit
        super().__init__(
            f"offset + limit is {offset + limit}, above the ranked window of {MAX_RANKED_WINDOW}; "
            "narrow the query or the filters instead of paging deeper"
        )


class InvalidFilters(ValueError):
    """A filter value no document can carry (unknown status or chunk kind, dates out of order)."""


class DocumentNotFound(LookupError):
    """The same answer for a document that does not exist and one the caller may not see."""

    def __init__(self, document_id: str) -> None:
        self.document_id = document_id
        super().__init__(f"no document {document_id!r}")


class TraversalTooDeep(ValueError):
    """A relation traversal deeper than MAX_TRAVERSAL_DEPTH hops, or of no hop: refused, never clamped."""

    def __init__(self, depth: int, limit: int) -> None:
        self.depth, self.limit = depth, limit
        super().__init__(f"traversal depth must be 1 to {limit} hops (got {depth}); beyond {limit} a "
                         "neighbourhood is most of a matter: search within the matter instead")


class InvalidDecision(ValueError):
    """A decision record names evidence that does not exist or says nothing."""


class QueryTooLong(ValueError):
    """A query longer than retrieval.max_query_chars (HTTP 400, CLI exit 2)."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(
            f"query is {length:,} characters, more than retrieval.max_query_chars = {limit:,}; "
            "search for the passage's key terms or an identifier instead"
        )


class QueryOverBudget(RuntimeError):
    """A search ran past retrieval.query_budget_seconds (HTTP 503, retry): stopped between steps
    rather than holding a worker and the caller any longer."""

    def __init__(self, step: str, elapsed: float, budget: float) -> None:
        super().__init__(
            f"the search took {elapsed:.1f} s by the end of its {step} step, more than "
            f"retrieval.query_budget_seconds = {budget:g}; the service is busy, retry"
        )


def check_query_length(query: str, limit: int) -> None:
    if len(query) > limit:
        raise QueryTooLong(len(query), limit)


def check_window(offset: int, limit: int) -> None:
    if offset + limit > MAX_RANKED_WINDOW:
        raise WindowTooDeep(offset, limit)


_STATUSES = frozenset(s.value for s in VersionStatus)
_CHUNK_KINDS = frozenset(k.value for k in ChunkKind)


def check_filters(filters: SearchFilters) -> SearchFilters:
    """Refuse values no indexed row can carry: a typo would otherwise look like "nothing found"."""
    if filters.version_status is not None and filters.version_status not in _STATUSES:
        raise InvalidFilters(
            f"version_status {filters.version_status!r} is not one of {', '.join(sorted(_STATUSES))}"
        )
    if filters.chunk_kind is not None and filters.chunk_kind not in _CHUNK_KINDS:
        raise InvalidFilters(f"chunk_kind {filters.chunk_kind!r} is not one of {', '.join(sorted(_CHUNK_KINDS))}")
    return filters


def parse_filters(raw: Mapping[str, Any] | None) -> SearchFilters:
    """SearchFilters from a surface's plain data, or InvalidFilters naming each bad key."""
    try:
        filters = SearchFilters.model_validate(dict(raw or {}))
    except ValidationError as exc:
        problems = [f"{'.'.join(map(str, e['loc'])) or 'filters'}: {e['msg']}" for e in exc.errors(include_url=False)]
        raise InvalidFilters("invalid filters: " + "; ".join(problems)) from None
    return check_filters(filters)


# ------------------------------------------------------------------ search


def _storable(value: str) -> str:
    """No NUL and no lone surrogate (JSON's "\\ud800"): text no embedder or database can take."""
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("contains a lone surrogate (not valid Unicode text)") from None
    return value


def _query_text(value: str) -> str:
    """A query is text a person typed: not blank (a listing without words is search_filter)."""
    if not value.strip():
        raise ValueError("must not be blank; a listing without query words is /v1/search/filter (ki list)")
    return _storable(value)


QueryText = Annotated[str, AfterValidator(_query_text)]
# Text that is stored or compared in SQL (a decision's fields, an external id).
StoredText = Annotated[str, AfterValidator(_storable)]
# The id of a row (a document, version, project...): ours are 32 hex digits; anything else is simply not found.
RecordId = Annotated[str, Field(min_length=1, max_length=300), AfterValidator(_storable)]


SortOrder = Literal["relevance", "date_desc", "date_asc"]
MatchLevel = Literal["none", "weak", "strong"]


class SearchRequest(_Model):
    """A semantic query. The window (offset + limit) is checked by the service, which raises WindowTooDeep."""

    query: QueryText
    filters: SearchFilters = SearchFilters()
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=DEFAULT_LIMIT, gt=0)
    explain: bool = False
    # relevance (the hybrid's order), or by the version's date, newest or oldest first (undated last).
    sort: SortOrder = "relevance"
    # Counts per document type, project, year and court over the result set (SearchResponse.facets).
    facets: bool = False

    @property
    def window(self) -> int:
        return self.offset + self.limit


class ProjectRef(_Model):
    id: str
    name: str
    title: str | None = None


class DocumentRef(_Model):
    id: str
    key: str
    title: str | None = None
    # The ontology node of its type ("doc_type:decision.judgment"), where known.
    doc_type: str | None = None


class VersionRef(_Model):
    id: str
    seq: int
    label: str | None = None
    status: str
    doc_date: date | None = None


class SourceRef(_Model):
    """A source object the caller may see the version through: what a citation points at."""

    source_object_id: str
    source: str
    source_kind: str
    external_id: str
    uri: str | None = None
    title: str | None = None


class Citation(_Model):
    project: ProjectRef
    document: DocumentRef
    version: VersionRef
    source_objects: tuple[SourceRef, ...]
    # Text around the match, at most EXCERPT_CHARS (ki_query.verification) plus ellipses.
    excerpt: str
    locus: str | None = None
    # Where the excerpt's passage lies in the version's text, [start, end) in characters (the body
    # chunk shown; a profile or clause hit shows its version's best body chunk): GET …/text reads it.
    passage_start: int | None = None
    passage_end: int | None = None
    # A copyable German citation: "BGH, Urteil vom 12.03.2020 – VII ZR 123/19", or title, version, date, reference.
    cite_as: str = ""


class LegRank(_Model):
    rank: int
    score: float


class GrantPath(_Model):
    """A grant that made a version visible, and the membership path that reached its principal."""

    scope: str
    target_id: str
    principal: str
    via: tuple[str, ...]

    def describe(self) -> str:
        group = f" via {' -> '.join(self.via)}" if len(self.via) > 1 else ""
        return f"allow to {self.principal!r} on {self.scope} {self.target_id}{group}"


class HitExplanation(_Model):
    legs: dict[str, LegRank]
    fused_score: float
    boost: float
    boosted_score: float
    rerank_score: float | None = None
    # Why SQL let the version through: the deciding rule in words, and the grants behind it.
    access: str
    grant_paths: tuple[GrantPath, ...] = ()


class Hit(_Model):
    document_id: str
    version_id: str
    chunk_id: int
    score: float
    version_status: str
    chunk_kind: str
    matched_identifiers: tuple[str, ...] = ()
    citation: Citation
    explain: HitExplanation | None = None
    # Other versions of the same document the search also found, folded into this row.
    other_versions: tuple[str, ...] = ()

    @property
    def project_id(self) -> str:
        return self.citation.project.id

    @property
    def title(self) -> str | None:
        return self.citation.document.title

    @property
    def excerpt(self) -> str:
        return self.citation.excerpt


class StepTimings(_Model):
    """Milliseconds per step of the query path (spec order); the bench reads them."""

    scope: float = 0.0
    embed: float = 0.0
    legs: float = 0.0
    fusion: float = 0.0
    verify: float = 0.0
    collapse: float = 0.0
    rerank: float = 0.0
    # Reading version dates for a date order, and counting facets (only when asked for).
    sort: float = 0.0
    facets: float = 0.0
    total: float = 0.0


class FacetValue(_Model):
    value: str
    label: str
    count: int
    # The field filter that narrows a search to this value ('typ:"Urteil"'), for surfaces to add.
    query: str


class Facets(_Model):
    """Documents per value over the result set: a boolean query's whole set (however deep), a ranked
    query's lexical and identifier matches (as far as the legs reached: RANKED_LEG_DEPTH chunks each)."""

    type: tuple[FacetValue, ...] = ()
    project: tuple[FacetValue, ...] = ()
    year: tuple[FacetValue, ...] = ()
    court: tuple[FacetValue, ...] = ()


class SearchResponse(_Model):
    hits: tuple[Hit, ...]
    # More verified results exist past this page within the ranked window (paging hint).
    has_more: bool = False
    timings: StepTimings = StepTimings()
    # Documents that match: exact for a boolean query (phrase, exclusion, OR, field ...); for a ranked
    # query those the lexical or identifier leg found in scope, an estimate.
    total: int = 0
    total_is_estimate: bool = False
    # How well the best hit answers the query, on the federation's calibrated scale (ki_query.match_level).
    match: MatchLevel = "strong"
    facets: Facets | None = None

    def __len__(self) -> int:
        return len(self.hits)


# ------------------------------------------------------------------ documents and relations


class VersionView(_Model):
    version: VersionRef
    language: str | None = None
    is_latest_final: bool = False
    source_objects: tuple[SourceRef, ...]


class DocumentView(_Model):
    """A document as one caller may see it: only its visible versions, each with its citations."""

    project: ProjectRef
    document: DocumentRef
    matter_id: str | None = None
    doc_type: str | None = None
    identifiers: tuple[str, ...] = ()
    # The latest final version if the caller sees it, else None (it is not revealed).
    latest_final_version_id: str | None = None
    versions: tuple[VersionView, ...]
    # The German citation of the cited version (ki_query.citations).
    cite_as: str = ""

    @property
    def cited_version(self) -> VersionView:
        """The version a reference to the document should cite: latest final, else the newest visible."""
        for view in self.versions:
            if view.is_latest_final:
                return view
        return self.versions[-1]


class RelationEdge(_Model):
    """A relation between two visible documents; versions only when the caller sees them."""

    kind: RelationKind
    from_document_id: str
    to_document_id: str
    from_version_id: str | None = None
    to_version_id: str | None = None
    origin: str


class RelatedDocument(_Model):
    """A document reached from the start, with the edge that reached it and where to cite it."""

    document: DocumentView
    depth: int
    kind: RelationKind
    # "outgoing": start -> this document; "incoming": this document -> start (seen from the edge).
    direction: str
    via_document_id: str


class TraversalResult(_Model):
    start: DocumentView
    related: tuple[RelatedDocument, ...]
    edges: tuple[RelationEdge, ...]


# ------------------------------------------------------------------ decisions


class DecisionEvidenceRef(_Model):
    """One evidence entry: a source object, a version, or that version as seen through that object."""

    source_object_id: RecordId | None = None
    version_id: RecordId | None = None

    @model_validator(mode="after")
    def _names_something(self) -> DecisionEvidenceRef:
        if self.source_object_id is None and self.version_id is None:
            raise ValueError("an evidence entry names a source_object_id, a version_id, or both")
        return self


class NewDecision(_Model):
    """What POST /decisions, `ki decisions add` and the DMS decision.recorded event write."""

    project_id: RecordId
    locus: StoredText = Field(min_length=1, max_length=1000)
    change_summary: StoredText = Field(min_length=1)
    rationale: StoredText = ""
    evidence: tuple[DecisionEvidenceRef, ...] = Field(min_length=1)
    matter_id: RecordId | None = None
    external_id: Annotated[StoredText, Field(max_length=300)] | None = None
    decided_by: Annotated[StoredText, Field(max_length=300)] | None = None
    decided_at: datetime | None = None


class DecisionHit(_Model):
    id: str
    project_id: str
    matter_id: str | None = None
    locus: str
    change_summary: str
    rationale: str
    decided_by: str | None = None
    decided_at: datetime | None = None
    score: float
    matched_terms: tuple[str, ...] = ()
    evidence: tuple[DecisionEvidenceRef, ...]
