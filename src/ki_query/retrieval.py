"""RetrievalService: the query path of spec/retrieval.md, and the reads that sit next to it.

search: compile the access scope in SQL, embed the query once, run the legs in
one multi-search sized for the whole window, fuse (RRF), boost by version
status, re-verify in SQL (building citations) every candidate that can reach
the window, best first, collapse per document, optionally rerank, return
hits[offset : offset + limit]. Each step is timed on the response. search_filter, search_decisions, get_document and
traverse apply the same SQL authorization to what they return.

Surfaces (HTTP, MCP, CLI) call these methods and map the errors of
ki_query.types (WindowTooDeep, InvalidFilters, DocumentNotFound,
InvalidDecision) and ki_core.llm.GatewayError to their status codes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy.orm import Session, sessionmaker

from ki_core.acl import Viewer
from ki_core.principals import caller_paths, stored_paths, viewer_for
from ki_core.config import Settings
from ki_core.db import read_transaction
from ki_core.embedding import Embedder
from ki_core.grants import current_access_generation
from ki_core.llm import ChatGateway
from ki_core.models import RelationKind
from ki_core.search.index import SearchIndex
from ki_core.search.types import (
    MAX_RANKED_WINDOW,
    MAX_RESULT_WINDOW,
    FilterHit,
    MultiSearchRequest,
    MultiSearchResult,
    check_result_window,
    oversampled_window,
)

# Per-leg depth of every ranked search: the bound of spec's oversampling, min(max(n * 5, 50), 2500),
# at the deepest window a caller may page to (MAX_RANKED_WINDOW).
RANKED_LEG_DEPTH = oversampled_window(MAX_RANKED_WINDOW)
from ki_query import decisions, graph, reading
from ki_query.fusion import (
    RERANK_PREFIX,
    Candidate,
    collapse,
    fuse,
    prefix_covering,
    rerank_prefix,
)
from ki_query.reading import DocumentText, OriginalFile, TextRequest
from ki_query.federation.ranking import calibration_for
from ki_query.query_language.plan import QueryPlan, plan_query
from ki_query.rerank.firm import OFFLINE_PREFIX, offline_reranked
from ki_query.result_set import (
    ontology_labels,
    by_date,
    document_facets,
    folded_versions,
    match_level,
    matched_documents,
)
from ki_query.rerank.model import offline_ranker
from ki_query.scope import AccessService, CompiledAccessScope
from ki_query.citations import decision_citations, german_citation, is_decision
from ki_query.passages import Passage, shown_passages
from ki_query.types import (
    DEFAULT_LIMIT,
    Citation,
    DecisionHit,
    DocumentView,
    Hit,
    HitExplanation,
    LegRank,
    MatchLevel,
    NewDecision,
    QueryOverBudget,
    RelatedDocument,
    SearchFilters,
    SearchRequest,
    SearchResponse,
    StepTimings,
    TraversalResult,
    check_filters,
    check_query_length,
    check_window,
)
from ki_query.verification import (
    ChunkText,
    VerifiedChunk,
    access_reason,
    chunk_texts,
    grant_paths,
    verify_batch,
    verify_candidates,
)

SessionSource = Session | Callable[[], Session]
# The first verification batch covers this many documents per wanted hit. The index filter is the
# compiled scope, so verification drops only what changed since the index was written (a stale
# row, a revoked grant): rare, and a second batch costs one more round trip. At 2 the first batch
# read twice the rows a page needs (peer store, nothing dropped: 30 chunks for 11 documents).
VERIFY_FIRST_FACTOR = 1.25
# A filter-only page fetches at least this many versions per index call: re-verification may
# drop a few, and a second round-trip for one missing row costs more than fetching spares.
FILTER_FETCH_MIN = 50


class StepClock:
    """Milliseconds per step; a step timed twice adds up. With a budget, a lap past it raises
    QueryOverBudget: the remaining steps are not worth doing for a caller who gave up."""

    def __init__(self, budget_seconds: float | None = None) -> None:
        self._start = self._last = time.perf_counter()
        self.steps: dict[str, float] = {}
        self.budget_seconds = budget_seconds

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.steps[step] = self.steps.get(step, 0.0) + (now - self._last) * 1000
        self._last = now
        if self.budget_seconds is not None and now - self._start > self.budget_seconds:
            raise QueryOverBudget(step, now - self._start, self.budget_seconds)

    def timings(self) -> StepTimings:
        return StepTimings(**self.steps, total=(time.perf_counter() - self._start) * 1000)


class RetrievalService:
    """The read side over one SQL database and one search index, for many callers.

    `sessions`: a session factory (each call reads in its own session) or one
    session (tests, callers inside a transaction). `gateway`: the chat gateway
    for reranking; with retrieval.rerank_enabled and none given, one is built
    from settings.llm on first use.
    """

    def __init__(
        self,
        settings: Settings,
        sessions: SessionSource,
        index: SearchIndex,
        embedder: Embedder,
        access: AccessService,
        gateway: ChatGateway | None = None,
    ) -> None:
        self.settings = settings
        self.index = index
        self.embedder = embedder
        self.access = access
        self._sessions = sessions
        self._gateway = gateway
        self._closers: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ search

    def search(self, request: SearchRequest, principals: Iterable[str]) -> SearchResponse:
        """The query path, steps 1-8 of spec/retrieval.md; raises WindowTooDeep or QueryTooLong before any work."""
        check_window(request.offset, request.limit)
        check_query_length(request.query, self.settings.retrieval.max_query_chars)
        filters = check_filters(request.filters)
        plan = plan_query(request.query, self._session)
        principals = _as_list(principals)
        clock = StepClock(self.settings.retrieval.query_budget_seconds)
        recent = self.access.recent_scope(principals, project_id=filters.project_id)
        if recent is not None:
            try:
                return self._searched(request, plan, filters, recent, principals, clock, stale_raises=True)
            except StaleScope:
                pass
        scope = self.access.compile_scope(principals, project_id=filters.project_id)
        return self._searched(request, plan, filters, scope, principals, clock, stale_raises=False)

    def _searched(
        self, request: SearchRequest, plan: QueryPlan, filters: SearchFilters, scope: CompiledAccessScope,
        principals: list[str], clock: StepClock, *, stale_raises: bool,
    ) -> SearchResponse:
        """Steps 2-8 over this scope. With `stale_raises` the scope was taken from the cache unchecked
        (AccessService.recent_scope, no round trip): when the verification statement's generation shows
        an access change since, StaleScope is raised before anything is answered, and the search runs
        again on a scope compiled for the current generation, so newly granted documents are not
        missing from the legs and revoked ones never reach verification's viewer."""
        clock.lap("scope")
        candidates, result = self._ranked_candidates(request, plan, filters, scope, principals, clock)
        with self._session() as session:
            if request.sort != "relevance":
                candidates = by_date(session, candidates, result.versions, newest_first=request.sort == "date_desc",
                                     documents=self._date_head(request))  # fmt: skip
                clock.lap("sort")
            # The reranker reads the words that are searched for, not the operators and exclusions.
            ranking = request.model_copy(update={"query": plan.text}) if plan.boolean else request
            viewer, ranked, verified, texts = self._verified_ranking(
                session, scope, principals, ranking, candidates, clock, stale_raises
            )
            page = ranked[request.offset : request.window]
            explanations = self._explain(session, viewer, principals, page, verified) if request.explain else {}
            passages = shown_passages(session, page, texts, plan.text)
            decided = decision_citations(session, _decision_versions(page, verified))
            found = matched_documents(result)
            facets = document_facets(session, found, ontology_labels()) if request.facets else None
            clock.lap("facets")
        folded = folded_versions(verified, page)
        hits = tuple(
            _hit(c, verified[c.chunk_id], passages[c.chunk_id], explanations.get(c.chunk_id), decided,
                 folded.get(c.document_id, ()))
            for c in page
        )  # fmt: skip
        total = result.document_count if result.document_count is not None else len(found)
        return SearchResponse(
            hits=hits, has_more=len(ranked) > request.window, timings=clock.timings(), total=total,
            total_is_estimate=not plan.boolean, match=self._match(result, total), facets=facets,
        )  # fmt: skip

    def _date_head(self, request: SearchRequest) -> int:
        """Documents a date-sorted boolean set is ordered for: what verification may read for the window
        (its first batches double from VERIFY_FIRST_FACTOR x wanted) with room for rows it drops."""
        wanted = max(request.window, self._rerank_prefix) + 1
        return 4 * math.ceil(VERIFY_FIRST_FACTOR * wanted)

    def _match(self, result: MultiSearchResult, total: int) -> MatchLevel:
        cosine = getattr(self.index, "cosine", lambda score: score)
        return match_level(result, total, calibration_for(self.embedder.signature), cosine)

    def _ranked_candidates(
        self, request: SearchRequest, plan: QueryPlan, filters: SearchFilters, scope: CompiledAccessScope,
        principals: list[str], clock: StepClock,
    ) -> tuple[Sequence[Candidate], MultiSearchResult]:
        """Steps 2-5: one embedding, one multi-search, RRF, status boost.

        Every leg asks for RANKED_LEG_DEPTH hits whatever the page (amendments.md 2): a depth that
        followed offset + limit would fuse page 2 from another candidate set than page 1, and RRF
        scores change when a leg reaches deeper, so pages would repeat and skip hits. With one
        depth the fused list is one ranking and every page is a slice of it; verification and
        collapse still stop at the prefix the window needs."""
        # A boolean query of fields alone ("az:VII ZR 123/19") has no text to embed: no semantic leg.
        vector = self.embedder.embed_query(plan.text) if plan.text.strip() else None
        clock.lap("embed")
        result = self.index.multi_search(
            MultiSearchRequest(
                query_text=plan.text,
                query_vector=tuple(vector.astype(float).tolist()) if vector is not None else None,
                scope=scope.filter,
                filters=filters,
                size=RANKED_LEG_DEPTH,
                identifier_terms=plan.identifier_terms,
                constraint=plan.constraint,
                principals=tuple(sorted(set(principals))),
            )
        )
        clock.lap("legs")
        candidates = self._fuse(result.legs, plan.text)
        clock.lap("fusion")
        return candidates, result

    def _verified_ranking(
        self, session: Session, scope: CompiledAccessScope, principals: list[str], request: SearchRequest,
        candidates: Sequence[Candidate], clock: StepClock, stale_raises: bool,
    ) -> tuple[Viewer, list[Candidate], dict[int, VerifiedChunk], dict[int, ChunkText]]:
        """Steps 6-7: SQL re-verification with citations, collapse, rerank of the prefix.

        Candidates are verified best first, in batches, until the collapsed list holds the
        window plus one (has_more) or nothing is left: everything below the verified
        prefix ranks after it (fusion.prefix_covering), so the page is the one verifying
        every candidate would give, and a first page verifies a few dozen rows, not
        every row the oversampled legs returned. Chunk texts are read only for what is
        shown (and what the reranker reads).
        """
        wanted = max(request.window, self._rerank_prefix) + 1
        verified: dict[int, VerifiedChunk] = {}
        ranked: list[Candidate] = []
        viewer: Viewer | None = None
        end, documents = 0, math.ceil(VERIFY_FIRST_FACTOR * wanted)
        while end < len(candidates) and len(ranked) < wanted:
            start, end = end, prefix_covering(candidates, documents, end)
            if viewer is None:
                viewer, checked = self._verified_first(session, scope, principals, candidates[start:end], stale_raises)
            else:
                checked = verify_candidates(session, viewer, candidates[start:end])
            verified |= checked
            clock.lap("verify")
            ranked = self._collapse(candidates[:end], verified)
            clock.lap("collapse")
            documents *= 2
        shown = ranked[request.offset : request.window]
        if self._rerank_on and self.settings.retrieval.rerank_provider == "gateway":
            shown = [*ranked[:RERANK_PREFIX], *shown]  # the gateway reads the texts; the offline ranker does not
        texts = chunk_texts(session, {c.chunk_id for c in shown})
        clock.lap("verify")
        if self._rerank_on and request.sort == "relevance" and request.query.strip():
            ranked = self._rerank(request.query, ranked, verified, texts)
            clock.lap("rerank")
        return viewer or self._viewer(session, scope, principals, stale_raises), ranked, verified, texts

    def _verified_first(
        self, session: Session, scope: CompiledAccessScope, principals: list[str], batch: Sequence[Candidate],
        stale_raises: bool,
    ) -> tuple[Viewer, dict[int, VerifiedChunk]]:
        """The first batch verified with the scope's expanded principals when the same statement shows no
        access change since the scope was compiled; else StaleScope (`stale_raises`) or the batch verified
        again with the principals expanded anew."""
        first = verify_batch(session, scope.viewer, batch)
        generation = first.generation if first.generation is not None else current_access_generation(session)
        viewer = self._viewer_at(session, generation, scope, principals, stale_raises)
        # The batch was verified in the current snapshot already: again only if the principals differ.
        return viewer, first.verified if viewer == scope.viewer else verify_candidates(session, viewer, batch)

    def _fuse(self, legs, query: str) -> Sequence[Candidate]:
        retrieval = self.settings.retrieval
        weights = {
            "lexical": retrieval.weight_lexical,
            "semantic": retrieval.weight_semantic,
            "identifier": retrieval.weight_identifier,
        }
        return fuse(legs, weights, retrieval.fusion_rrf_k, retrieval.version_status_boost, query)

    def _collapse(self, candidates: list[Candidate], verified: dict[int, VerifiedChunk]) -> list[Candidate]:
        survivors = [c for c in candidates if c.chunk_id in verified]
        for candidate in survivors:
            candidate.is_latest_final = verified[candidate.chunk_id].facts.latest_final_version_id == candidate.version_id
        retrieval = self.settings.retrieval
        return collapse(
            survivors, per_document=retrieval.collapse_per_document, max_chunks=retrieval.max_chunks_per_document
        )

    @property
    def _rerank_on(self) -> bool:
        return self.settings.retrieval.rerank_enabled

    @property
    def _rerank_prefix(self) -> int:
        """How many leading hits the configured reranker reorders (0: none)."""
        if not self._rerank_on:
            return 0
        return RERANK_PREFIX if self.settings.retrieval.rerank_provider == "gateway" else OFFLINE_PREFIX

    def _rerank(
        self, query: str, ranked: list[Candidate], verified: dict[int, VerifiedChunk], texts: dict[int, ChunkText]
    ) -> list[Candidate]:
        """The top OFFLINE_PREFIX hits reordered by the offline ranker (retrieval.rerank_provider
        "offline", no network) or the top RERANK_PREFIX by one gateway call ("gateway"; an error propagates, no silent
        fallback)."""
        prefix = ranked[:RERANK_PREFIX]
        if not prefix:
            return ranked
        key = _rerank_key(self.settings.retrieval.collapse_per_document)
        model = offline_ranker(self.settings.retrieval)
        if model is not None:
            cosine = getattr(self.index, "cosine", lambda score: score)
            return offline_reranked(query, ranked, model, key, cosine)
        listing = [
            (key(c), f"{verified[c.chunk_id].facts.document.title or ''}\n{_text_of(texts, c.chunk_id)}".strip())
            for c in prefix
        ]
        scores = self._chat_gateway().rerank(query, listing, model=self.settings.retrieval.rerank_model)
        return rerank_prefix(ranked, scores, key)

    def _chat_gateway(self) -> ChatGateway:
        if self._gateway is None:
            self._gateway = ChatGateway.from_settings(self.settings.llm)
            self._closers.append(self._gateway.close)
        return self._gateway

    def _explain(
        self, session: Session, viewer: Viewer, principals: list[str], page: Sequence[Candidate],
        verified: dict[int, VerifiedChunk],
    ) -> dict[int, HitExplanation]:
        facts = {verified[c.chunk_id].facts.version.id: verified[c.chunk_id].facts for c in page}
        paths = {} if viewer.is_admin else stored_paths(caller_paths(session, principals, self.settings), self.settings)
        granted = grant_paths(session, paths, facts.values(), viewer.acl_mode)
        return {
            c.chunk_id: HitExplanation(
                legs={leg: LegRank(rank=rank, score=score) for leg, (rank, score) in sorted(c.legs.items())},
                fused_score=c.fused,
                boost=c.boost,
                boosted_score=c.fused * c.boost,
                rerank_score=c.rerank_score,
                access=access_reason(viewer, facts[c.version_id], granted.get(c.version_id, ())),
                grant_paths=granted.get(c.version_id, ()),
            )
            for c in page
        }

    # ------------------------------------------------------------------ filter-only

    def search_filter(
        self, filters: SearchFilters, principals: Iterable[str], offset: int = 0, limit: int = DEFAULT_LIMIT
    ) -> SearchResponse:
        """Metadata-only listing: no query text, no embedding; doc_date descending, one hit per version, score 0.

        Offsets count the caller's verified versions, so a version dropped by
        re-verification never shifts or shortens a page.
        """
        if offset < 0 or limit <= 0:
            raise ValueError(f"offset must be >= 0 and limit > 0 (got {offset}, {limit})")
        check_result_window(offset, limit)
        check_filters(filters)
        principals = _as_list(principals)
        clock = StepClock(self.settings.retrieval.query_budget_seconds)
        scope = self.access.compile_scope(principals, project_id=filters.project_id)
        clock.lap("scope")
        with self._session() as session:
            viewer = self._viewer(session, scope, principals)
            # One more than the page tells has_more, except at the window's very end.
            want = min(offset + limit + 1, MAX_RESULT_WINDOW)
            found, verified = self._verified_listing(session, viewer, scope, filters, want, clock)
            page = found[offset : offset + limit]
            texts = chunk_texts(session, {c.chunk_id for c in page})
            passages = shown_passages(session, page, texts, "")
            decided = decision_citations(session, _decision_versions(page, verified))
            clock.lap("verify")
        hits = tuple(_hit(c, verified[c.chunk_id], passages[c.chunk_id], None, decided) for c in page)
        return SearchResponse(hits=hits, has_more=len(found) > offset + limit, timings=clock.timings())

    def _verified_listing(
        self, session: Session, viewer: Viewer, scope: CompiledAccessScope, filters: SearchFilters, want: int,
        clock: StepClock,
    ) -> tuple[list[Candidate], dict[int, VerifiedChunk]]:
        found: list[Candidate] = []
        verified: dict[int, VerifiedChunk] = {}
        index_offset = 0
        while len(found) < want and index_offset < MAX_RESULT_WINDOW:
            # Re-verification may drop hits, so the index is read past `want`, but never past its window.
            size = min(max(want - len(found), FILTER_FETCH_MIN), MAX_RESULT_WINDOW - index_offset)
            batch = [_filter_candidate(h) for h in self.index.search_filter(scope.filter, filters, size, index_offset)]
            clock.lap("legs")
            index_offset += len(batch)
            checked = verify_candidates(session, viewer, batch)
            clock.lap("verify")
            verified |= checked
            found += [c for c in batch if c.chunk_id in checked]
            if len(batch) < size:
                break
        return found, verified

    # ------------------------------------------------------------------ decisions

    def search_decisions(self, query: str, principals: Iterable[str], limit: int = DEFAULT_LIMIT) -> list[DecisionHit]:
        check_query_length(query, self.settings.retrieval.max_query_chars)
        principals = _as_list(principals)
        scope = self.access.compile_scope(principals).filter
        with self._session() as session:
            viewer = viewer_for(session, principals, self.settings)
            return decisions.search_decisions(session, viewer, query, limit, scope)

    def add_decision(self, decision: NewDecision, principals: Iterable[str] | None = None) -> DecisionHit:
        """Write a decision record and commit. With principals, the writer must see all its evidence."""
        with self._writing() as session:
            writer = None if principals is None else viewer_for(session, _as_list(principals), self.settings)
            return decisions.add_decision(session, decision, writer)

    # ------------------------------------------------------------------ documents and relations

    def get_document(self, document_id: str, principals: Iterable[str]) -> DocumentView:
        with self._session() as session:
            viewer = viewer_for(session, _as_list(principals), self.settings)
            return graph.get_document(session, viewer, document_id)

    def read_text(self, document_id: str, request: TextRequest, principals: Iterable[str]) -> DocumentText:
        """One read of a visible version's text (every surface's; an audit record of reads belongs here)."""
        with self._session() as session:
            viewer = viewer_for(session, _as_list(principals), self.settings)
            return reading.read_text(session, viewer, document_id, request)

    def read_original(self, document_id: str, version_id: str | None, principals: Iterable[str]) -> OriginalFile:
        """One read of a visible version's file (every surface's; an audit record of reads belongs here)."""
        with self._session() as session:
            viewer = viewer_for(session, _as_list(principals), self.settings)
            return reading.read_original(session, viewer, document_id, version_id)

    def traverse(
        self, document_id: str, principals: Iterable[str], kinds: Iterable[RelationKind | str] | None = None,
        depth: int = 1,
    ) -> TraversalResult:
        with self._session() as session:
            viewer = viewer_for(session, _as_list(principals), self.settings)
            return graph.traverse(session, viewer, document_id, kinds, depth)

    def related_documents(
        self, document_id: str, principals: Iterable[str], kinds: Iterable[RelationKind | str] | None = None
    ) -> list[RelatedDocument]:
        return list(self.traverse(document_id, principals, kinds, depth=1).related)

    # ------------------------------------------------------------------ plumbing

    def _viewer(
        self, session: Session, scope: CompiledAccessScope, principals: list[str], stale_raises: bool = False
    ) -> Viewer:
        """The scope's expanded principals while no access change happened since; else StaleScope
        (`stale_raises`) or the principals expanded anew."""
        return self._viewer_at(session, current_access_generation(session), scope, principals, stale_raises)

    def _viewer_at(
        self, session: Session, generation: int, scope: CompiledAccessScope, principals: list[str], stale_raises: bool
    ) -> Viewer:
        """The viewer for SQL at `generation`: the scope's own if it was compiled there."""
        if generation == scope.generation:
            return scope.viewer
        if stale_raises:
            raise StaleScope(scope.generation, generation)
        return viewer_for(session, principals, self.settings)

    @contextmanager
    def _session(self) -> Iterator[Session]:
        if isinstance(self._sessions, Session):
            yield self._sessions
            return
        with read_transaction(self._sessions) as session:
            yield session

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        if isinstance(self._sessions, Session):
            with self._sessions.begin_nested():
                yield self._sessions
            return
        with self._sessions() as session, session.begin():
            yield session

    def close(self) -> None:
        for closer in reversed(self._closers):
            closer()
        self._closers.clear()


class StaleScope(Exception):
    """An unchecked cached scope turned out older than the access generation SQL reads now."""

    def __init__(self, scope_generation: int, generation: int) -> None:
        super().__init__(f"scope of access generation {scope_generation}, SQL is at {generation}")


def _as_list(principals: Iterable[str]) -> list[str]:
    """A lone string is one principal, not a sequence of one-letter principals."""
    return [principals] if isinstance(principals, str) else list(principals)


def _text_of(texts: dict[int, ChunkText], chunk_id: int) -> str:
    shown = texts.get(chunk_id)
    return shown.text if shown is not None else ""


def _rerank_key(collapsed: bool) -> Callable[[Candidate], str]:
    """The model scores per version id; without collapse a version may show several chunks."""
    if collapsed:
        return lambda c: c.version_id
    return lambda c: f"{c.version_id}:{c.chunk_id}"


def _filter_candidate(hit: FilterHit) -> Candidate:
    return Candidate(
        chunk_id=hit.chunk_id,
        document_id=hit.document_id,
        version_id=hit.document_version_id,
        project_id=hit.project_id,
        version_status=hit.version_status,
        chunk_kind=hit.chunk_kind,
    )


def _decision_versions(page: Sequence[Candidate], verified: dict[int, VerifiedChunk]) -> set[str]:
    """The page's versions of decisions: the ones whose citation the metadata stage composed."""
    return {c.version_id for c in page if is_decision(verified[c.chunk_id].facts.document.doc_type)}


def _hit(
    candidate: Candidate, verified: VerifiedChunk, passage: Passage, explanation: HitExplanation | None,
    decided: dict[str, str], other_versions: tuple[str, ...] = (),
) -> Hit:
    facts = verified.facts
    return Hit(
        document_id=facts.document.id,
        version_id=facts.version.id,
        chunk_id=candidate.chunk_id,
        score=candidate.score,
        version_status=facts.version.status,
        chunk_kind=candidate.chunk_kind,
        matched_identifiers=candidate.matched_identifiers,
        citation=Citation(
            project=facts.project, document=facts.document, version=facts.version, source_objects=facts.sources,
            excerpt=passage.excerpt, locus=verified.locus, passage_start=passage.start, passage_end=passage.end,
            cite_as=german_citation(facts.document, facts.version, facts.sources, decided.get(facts.version.id)),
        ),
        explain=explanation,
        other_versions=other_versions,
    )


def retrieval_service_from_settings(settings: Settings, *, gateway: ChatGateway | None = None) -> RetrievalService:
    """A service for a query process: its own engine, a read-only index, the configured embedder."""
    from ki_core.db import engine_from_settings, session_factory
    from ki_core.embedding import embedder_from_settings
    from ki_core.search.index import open_index
    from ki_core.search.signature import bind_index_signature
    from ki_core.store_identity import bind_index_to_store

    engine = engine_from_settings(settings)
    sessions: sessionmaker[Session] = session_factory(engine)
    index = open_index(settings, read_only=True)
    try:
        index.ensure()
        bind_index_to_store(index, settings, sessions, claim=False)
        bind_index_signature(index, settings, sessions, claim=False)
    except BaseException:
        index.close()
        engine.dispose()
        raise
    embedder = embedder_from_settings(settings)
    service = RetrievalService(settings, sessions, index, embedder, AccessService(sessions, settings), gateway)
    service._closers += [engine.dispose, index.close]
    closer = getattr(embedder, "close", None)
    if closer is not None:
        service._closers.append(closer)
    return service
