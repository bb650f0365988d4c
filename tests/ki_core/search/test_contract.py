"""The SearchIndex contract, run against every backend (embedded always, OpenSearch with a node)."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ki_core.identifiers import query_identifier_terms
from ki_core.search.index import DeleteOp, IndexOp, SearchIndex
from ki_core.search.types import (
    MAX_RESULT_WINDOW,
    ResultWindowTooDeep,
    AccessProjection,
    BulkFailure,
    IndexDimensionMismatch,
    Leg,
    LegHit,
    MultiSearchRequest,
    MultiSearchResult,
    ScopeFilter,
    SearchFilters,
)
from tests.ki_core.search.conftest import (
    DIMS,
    EVERYTHING,
    FIXTURE_CHUNKS,
    Backend,
    admitted_ids,
    chunk_ids_of,
    unit_vector,
)

BROAD_QUERY = "Vertrag Kündigung Mieter Arbeitnehmer Schuldner Verkäufer Geschäftsbedingungen Frist"
BY_ID = {chunk.chunk_id: chunk for chunk in FIXTURE_CHUNKS}


def search(
    index: SearchIndex,
    text: str = "",
    *,
    scope: ScopeFilter = EVERYTHING,
    filters: SearchFilters = SearchFilters(),
    vector: tuple[float, ...] | None = unit_vector("query"),
    size: int = 100,
) -> MultiSearchResult:
    request = MultiSearchRequest(query_text=text, query_vector=vector, scope=scope, filters=filters, size=size,
                                 identifier_terms=query_identifier_terms(text))  # fmt: skip
    return index.multi_search(request)


def ids(hits: tuple[LegHit, ...]) -> set[int]:
    return {hit.chunk_id for hit in hits}


def ranks(hits: tuple[LegHit, ...]) -> dict[int, int]:
    return {hit.chunk_id: hit.rank for hit in hits}


# ------------------------------------------------------------------- filters

FILTER_CASES = [
    SearchFilters(project_id="proj-arbeit"),
    SearchFilters(matter_id="m-100"),
    SearchFilters(doc_type="contract"),
    SearchFilters(doc_type="contract.lease"),
    SearchFilters(doc_type="contract.lease.residential"),
    SearchFilters(doc_type="correspondence"),
    SearchFilters(version_status="draft"),
    SearchFilters(language="en"),
    SearchFilters(date_from=date(2021, 3, 1)),
    SearchFilters(date_to=date(2021, 3, 1)),
    SearchFilters(date_from=date(2020, 6, 15), date_to=date(2021, 3, 1)),
    SearchFilters(clause_type="clause.termination"),
    SearchFilters(chunk_kind="clause"),
    SearchFilters(chunk_kind="profile"),
    SearchFilters(project_id="proj-miete", version_status="final", chunk_kind="chunk"),
    SearchFilters(matter_id="no-such-matter"),
]


@pytest.mark.parametrize("filters", FILTER_CASES, ids=lambda f: repr(f.model_dump(exclude_none=True)))
def test_every_leg_count_and_filter_search_stay_inside_the_metadata_filter(
    loaded_index: SearchIndex, filters: SearchFilters
) -> None:
    expected = admitted_ids(EVERYTHING, filters)
    result = search(loaded_index, BROAD_QUERY, filters=filters)
    # The semantic leg with a window larger than the corpus returns exactly the admitted rows.
    assert ids(result.hits(Leg.SEMANTIC)) == expected
    assert ids(result.hits(Leg.LEXICAL)) <= expected
    assert ids(result.hits(Leg.IDENTIFIER)) <= expected
    assert loaded_index.count(EVERYTHING, filters) == len(expected)
    assert {hit.chunk_id for hit in loaded_index.search_filter(EVERYTHING, filters, 100)} <= expected


def test_doc_type_filters_the_whole_subtree_of_an_ontology_node(loaded_index: SearchIndex) -> None:
    leases = search(loaded_index, filters=SearchFilters(doc_type="contract.lease")).hits(Leg.SEMANTIC)
    assert ids(leases) == chunk_ids_of(document_id="doc-mv-1") | chunk_ids_of(document_id="doc-mv-2")
    contracts = search(loaded_index, filters=SearchFilters(doc_type="contract")).hits(Leg.SEMANTIC)
    assert ids(contracts) == {c.chunk_id for c in FIXTURE_CHUNKS if c.doc_type.startswith("contract.")}


def test_date_range_is_inclusive_and_excludes_chunks_without_a_date(loaded_index: SearchIndex) -> None:
    filters = SearchFilters(date_from=date(2021, 2, 1), date_to=date(2021, 3, 1))
    hits = search(loaded_index, filters=filters).hits(Leg.SEMANTIC)
    assert ids(hits) == chunk_ids_of(document_id="doc-mv-1")
    undated = chunk_ids_of(document_version_id="ver-av-2-a")
    assert not undated & ids(search(loaded_index, filters=SearchFilters(date_to=date(2100, 1, 1))).hits(Leg.SEMANTIC))


def test_clause_type_matches_only_clause_rows(loaded_index: SearchIndex) -> None:
    hits = search(loaded_index, filters=SearchFilters(clause_type="clause.termination")).hits(Leg.SEMANTIC)
    assert ids(hits) == {106, 118}
    assert {hit.chunk_kind for hit in hits} == {"clause"}


# --------------------------------------------------------------------- scope

SCOPE_CASES = {
    "whole project": ScopeFilter(project_ids=frozenset({"proj-arbeit"})),
    "project minus exclusions": ScopeFilter(
        project_ids=frozenset({"proj-miete"}), excluded_document_ids=frozenset({"doc-mv-1"})
    ),
    "single documents": ScopeFilter(document_ids=frozenset({"doc-kv-2", "doc-av-2"})),
    "all three forms": ScopeFilter(
        project_ids=frozenset({"proj-kauf"}),
        excluded_document_ids=frozenset({"doc-kv-1"}),
        document_ids=frozenset({"doc-mv-2"}),
    ),
    "listed document wins over its exclusion": ScopeFilter(
        project_ids=frozenset({"proj-miete"}),
        excluded_document_ids=frozenset({"doc-mv-2"}),
        document_ids=frozenset({"doc-mv-2"}),
    ),
    "unknown project": ScopeFilter(project_ids=frozenset({"proj-unknown"})),
}


@pytest.mark.parametrize("scope", SCOPE_CASES.values(), ids=SCOPE_CASES.keys())
def test_compact_scope_admits_projects_minus_exclusions_or_listed_documents(
    loaded_index: SearchIndex, scope: ScopeFilter
) -> None:
    expected = admitted_ids(scope, None)
    result = search(loaded_index, BROAD_QUERY + " VIII ZR 123/20 BGB", scope=scope)
    assert ids(result.hits(Leg.SEMANTIC)) == expected
    assert ids(result.hits(Leg.LEXICAL)) <= expected
    assert ids(result.hits(Leg.IDENTIFIER)) <= expected
    assert loaded_index.count(scope) == len(expected)


def test_project_minus_exclusions_is_exactly_the_rest_of_the_project(loaded_index: SearchIndex) -> None:
    scope = SCOPE_CASES["project minus exclusions"]
    expected = chunk_ids_of(project_id="proj-miete") - chunk_ids_of(document_id="doc-mv-1")
    assert ids(search(loaded_index, scope=scope).hits(Leg.SEMANTIC)) == expected


def test_match_none_returns_nothing_from_any_leg_and_sends_no_text_leg(loaded_index: SearchIndex) -> None:
    result = search(loaded_index, BROAD_QUERY + " VIII ZR 123/20", scope=ScopeFilter.nothing())
    assert set(result.legs) == {Leg.SEMANTIC}
    assert result.hits(Leg.SEMANTIC) == ()
    assert loaded_index.count(ScopeFilter.nothing()) == 0
    assert loaded_index.search_filter(ScopeFilter.nothing(), SearchFilters(), 10) == []


def test_only_the_legs_that_can_match_are_run(loaded_index: SearchIndex) -> None:
    assert set(search(loaded_index, "   ").legs) == {Leg.SEMANTIC}
    assert set(search(loaded_index, "Mietvertrag", vector=None).legs) == {Leg.LEXICAL}
    assert set(search(loaded_index, "Kündigung nach BGB", vector=None).legs) == {Leg.LEXICAL}
    assert set(search(loaded_index, "Mietvertrag § 573c BGB", vector=None).legs) == {Leg.LEXICAL, Leg.IDENTIFIER}


def test_a_law_name_alone_matches_no_citation_of_the_law(loaded_index: SearchIndex) -> None:
    """amendments.md 1: "nach BGB" once matched every chunk citing the BGB, at weight 1.5."""
    assert any("BGB" in c.identifiers_text for c in FIXTURE_CHUNKS)
    assert search(loaded_index, "Kündigung nach BGB").hits(Leg.IDENTIFIER) == ()


def test_a_section_finds_its_citations_and_a_paragraph_only_its_own(loaded_index: SearchIndex) -> None:
    """issue 44: a paragraph no longer asks for its section, which would admit every other paragraph."""
    with_section = {c.chunk_id for c in FIXTURE_CHUNKS if "§ 573c BGB" in c.identifiers}
    assert with_section and ids(search(loaded_index, "§ 573c BGB").hits(Leg.IDENTIFIER)) == with_section
    assert search(loaded_index, "§ 573c Abs. 1 BGB").hits(Leg.IDENTIFIER) == ()


# ----------------------------------------------------------------- ranking


def test_german_stemming_finds_the_singular_from_a_plural_query(loaded_index: SearchIndex) -> None:
    assert "Vertrag " in BY_ID[123].text and "Verträge" not in BY_ID[123].text
    assert 123 in ids(search(loaded_index, "Verträge").hits(Leg.LEXICAL))
    assert 103 in ids(search(loaded_index, "Kündigungsfristen").hits(Leg.LEXICAL))


def test_stop_words_alone_match_nothing(loaded_index: SearchIndex) -> None:
    assert search(loaded_index, "der die das und").hits(Leg.LEXICAL) == ()


def test_lexical_hits_are_ranked_by_bm25_from_rank_zero(loaded_index: SearchIndex) -> None:
    hits = search(loaded_index, "Kündigungsfrist nach Überlassung des Wohnraums").hits(Leg.LEXICAL)
    assert [hit.rank for hit in hits] == list(range(len(hits)))
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    assert hits[0].chunk_id == 103
    assert (hits[0].document_id, hits[0].document_version_id, hits[0].project_id) == (
        "doc-mv-1", "ver-mv-1-b", "proj-miete",
    )  # fmt: skip
    assert (hits[0].version_status, hits[0].chunk_kind) == ("executed", "chunk")
    assert hits[0].identifiers == ("§ 573c BGB", "VIII ZR 123/20")


@pytest.mark.parametrize(
    ("query", "exact", "near_miss"),
    [
        ("VIII ZR 123/20", "doc-mv-1", "doc-mv-2"),
        ("VIII ZR 124/20", "doc-mv-2", "doc-mv-1"),
        ("§ 573c BGB", "doc-mv-1", "doc-mv-2"),
        ("§ 573 BGB", "doc-mv-2", "doc-mv-1"),
        ("Kündigung nach § 573c BGB, vgl. BGH VIII ZR 123/20.", "doc-mv-1", "doc-mv-2"),
    ],
)
def test_identifier_leg_ranks_the_exact_identifier_above_a_near_miss(
    loaded_index: SearchIndex, query: str, exact: str, near_miss: str
) -> None:
    hits = search(loaded_index, query).hits(Leg.IDENTIFIER)
    by_rank = ranks(hits)
    exact_ranks = [by_rank[c] for c in chunk_ids_of(document_id=exact)]
    near_ranks = [by_rank[c] for c in chunk_ids_of(document_id=near_miss) if c in by_rank]
    assert len(exact_ranks) == len(chunk_ids_of(document_id=exact))
    assert max(exact_ranks) < min(near_ranks, default=len(hits))


def test_identifier_leg_finds_a_case_number_only_its_document_carries(loaded_index: SearchIndex) -> None:
    hits = search(loaded_index, "2 AZR 55/19").hits(Leg.IDENTIFIER)
    top = {hit.document_id for hit in hits[: len(chunk_ids_of(document_id="doc-av-1"))]}
    assert top == {"doc-av-1"}


def test_semantic_leg_ranks_the_chunk_with_the_query_vector_first(backend: Backend, loaded_index: SearchIndex) -> None:
    hits = search(loaded_index, vector=BY_ID[122].embedding).hits(Leg.SEMANTIC)
    assert hits[0].chunk_id == 122
    assert backend.cosine(hits[0].score) == pytest.approx(1.0, abs=1e-4)
    assert [hit.rank for hit in hits] == list(range(len(hits)))


# ------------------------------------------------------- kNN never leaks

PROJECTS = sorted({c.project_id for c in FIXTURE_CHUNKS}) + ["proj-unknown"]
DOCUMENTS = sorted({c.document_id for c in FIXTURE_CHUNKS}) + ["doc-unknown"]
_subsets = st.frozensets


def _values(name: str) -> st.SearchStrategy:
    seen = sorted({v for c in FIXTURE_CHUNKS if (v := getattr(c, name)) is not None})
    return st.one_of(st.none(), st.sampled_from([*seen, "unknown"]))


scopes = st.one_of(
    st.just(ScopeFilter.nothing()),
    st.builds(
        ScopeFilter,
        project_ids=_subsets(st.sampled_from(PROJECTS), max_size=3),
        excluded_document_ids=_subsets(st.sampled_from(DOCUMENTS), max_size=3),
        document_ids=_subsets(st.sampled_from(DOCUMENTS), max_size=3),
    ),
)
dates = st.one_of(st.none(), st.dates(min_value=date(2018, 1, 1), max_value=date(2024, 1, 1)))
filter_sets = st.builds(
    lambda project, matter, doc_type, status, language, clause, kind, a, b: SearchFilters(
        project_id=project, matter_id=matter, doc_type=doc_type, version_status=status, language=language,
        clause_type=clause, chunk_kind=kind, date_from=min(a, b) if a and b else a, date_to=max(a, b) if a and b else b,
    ),  # fmt: skip
    _values("project_id"),
    _values("matter_id"),
    st.one_of(st.none(), st.sampled_from(["contract", "contract.lease", "contract.purchase", "correspondence"])),
    _values("version_status"),
    _values("language"),
    _values("clause_type"),
    _values("chunk_kind"),
    dates,
    dates,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scope=scopes, filters=filter_sets, seed=st.integers(0, 10**6), size=st.integers(1, 30))
def test_no_leg_ever_returns_a_row_outside_the_filter(
    shared_loaded_index: SearchIndex, scope: ScopeFilter, filters: SearchFilters, seed: int, size: int
) -> None:
    allowed = admitted_ids(scope, filters)
    result = search(shared_loaded_index, BROAD_QUERY + " § 573c BGB", scope=scope, filters=filters,
                    vector=unit_vector(str(seed)), size=size)  # fmt: skip
    for leg, hits in result.legs.items():
        assert ids(hits) <= allowed, leg
        assert [hit.rank for hit in hits] == list(range(len(hits)))
    # Pre-filtered kNN fills its window from inside the filter instead of coming back short.
    assert len(result.hits(Leg.SEMANTIC)) == min(size, len(allowed))
    assert shared_loaded_index.count(scope, filters) == len(allowed)


# -------------------------------------------------------------------- writes


def test_access_only_update_changes_the_projection_and_leaves_text_and_vector(loaded_index: SearchIndex) -> None:
    before_fields = loaded_index.stored_fields(102)
    lexical_before = ranks_and_scores(search(loaded_index, "Miete entrichten").hits(Leg.LEXICAL))
    semantic_before = search(loaded_index, vector=BY_ID[102].embedding).hits(Leg.SEMANTIC)[0]

    projection = AccessProjection(  # a version's projection names all its chunks (ki_workers.stages.access)
        document_id="doc-mv-1", document_version_id="ver-mv-1-b", chunk_ids=tuple(range(101, 107)), allowed_principals=("user:anna",),
        denied_principals=("group:extern",), access_version=7,
    )  # fmt: skip
    loaded_index.update_access([projection])
    loaded_index.refresh()

    after_fields = loaded_index.stored_fields(102)
    assert after_fields is not None and before_fields is not None
    assert after_fields["allowed_principals"] == ("user:anna",)
    assert after_fields["denied_principals"] == ("group:extern",)
    assert after_fields["access_version"] == 7
    unchanged = {k for k in before_fields if k not in ("allowed_principals", "denied_principals", "access_version")}
    assert {k: after_fields[k] for k in unchanged} == {k: before_fields[k] for k in unchanged}
    assert loaded_index.stored_fields(106)["allowed_principals"] == ("user:anna",)  # type: ignore[index]
    assert loaded_index.stored_fields(107)["allowed_principals"] == ("group:proj-miete",)  # type: ignore[index]  # ver-mv-1-a
    # The text is still indexed: the same chunks match. Their scores and even their order may
    # shift on OpenSearch, since Lucene counts an updated document's old copy in the BM25
    # statistics (average length, document frequencies) until a segment merge.
    lexical_after = ranks_and_scores(search(loaded_index, "Miete entrichten").hits(Leg.LEXICAL))
    assert {chunk_id for chunk_id, _ in lexical_after} == {chunk_id for chunk_id, _ in lexical_before}
    semantic_after = search(loaded_index, vector=BY_ID[102].embedding).hits(Leg.SEMANTIC)[0]
    assert (semantic_after.chunk_id, semantic_after.score) == (102, pytest.approx(semantic_before.score))


def ranks_and_scores(hits: tuple[LegHit, ...]) -> list[tuple[int, float]]:
    return [(hit.chunk_id, round(hit.score, 5)) for hit in hits]


def test_access_update_of_a_chunk_not_in_the_index_is_no_error_and_updates_the_rest(loaded_index: SearchIndex) -> None:
    """A revocation racing the first write of a version (or its removal) meets chunks the index does not
    hold: the write that brings them reads the access fields from SQL, so skipping them loses nothing."""
    projection = AccessProjection(
        document_id="doc-kv-2", document_version_id="ver-kv-2-a", chunk_ids=(127, 99999), allowed_principals=("user:bo",),
        denied_principals=(), access_version=3,
    )  # fmt: skip
    loaded_index.update_access([projection])
    loaded_index.refresh()
    assert loaded_index.stored_fields(127)["allowed_principals"] == ("user:bo",)  # type: ignore[index]
    assert loaded_index.stored_fields(99999) is None


def test_delete_removes_a_chunk_and_deleting_a_missing_one_is_no_error(loaded_index: SearchIndex) -> None:
    loaded_index.bulk([DeleteOp(122), DeleteOp(99999)])
    loaded_index.refresh()
    result = search(loaded_index, "Kaufpreis zahlen", vector=BY_ID[122].embedding)
    assert 122 not in ids(result.hits(Leg.SEMANTIC)) | ids(result.hits(Leg.LEXICAL))
    assert loaded_index.count() == len(FIXTURE_CHUNKS) - 1
    assert loaded_index.stored_fields(122) is None


def test_delete_document_removes_every_chunk_of_every_version(loaded_index: SearchIndex) -> None:
    loaded_index.delete_document("doc-mv-1")
    loaded_index.refresh()
    gone = chunk_ids_of(document_id="doc-mv-1")
    assert len(gone) == 7
    assert not gone & ids(search(loaded_index, BROAD_QUERY + " VIII ZR 123/20").hits(Leg.SEMANTIC))
    assert loaded_index.count() == len(FIXTURE_CHUNKS) - len(gone)
    assert loaded_index.count(ScopeFilter(document_ids=frozenset({"doc-mv-2"}))) == 3


def test_reindexing_a_chunk_replaces_its_text(loaded_index: SearchIndex) -> None:
    replaced = BY_ID[124].model_copy(update={"text": "Der Stellplatz wird als Sondernutzungsrecht vermietet."})
    loaded_index.bulk([IndexOp(replaced)])
    loaded_index.refresh()
    assert 124 in ids(search(loaded_index, "Stellplatz").hits(Leg.LEXICAL))
    assert 124 not in ids(search(loaded_index, "Gebundenheit").hits(Leg.LEXICAL))
    assert loaded_index.count() == len(FIXTURE_CHUNKS)


def test_bulk_partial_failure_names_the_failed_chunk_and_writes_the_others(search_index: SearchIndex) -> None:
    good = [BY_ID[101].model_copy(update={"chunk_id": 900}), BY_ID[102].model_copy(update={"chunk_id": 902})]
    bad = BY_ID[103].model_copy(update={"chunk_id": 901, "embedding": unit_vector("x", DIMS + 3)})
    with pytest.raises(BulkFailure, match="901") as failure:
        search_index.bulk([IndexOp(good[0]), IndexOp(bad), IndexOp(good[1])])
    assert set(failure.value.failed) == {901}
    search_index.refresh()
    assert search_index.count() == 2
    assert search_index.stored_fields(900) is not None and search_index.stored_fields(901) is None


def test_ensure_refuses_an_index_of_another_dimension(backend: Backend, loaded_index: SearchIndex) -> None:
    loaded_index.close()
    other = backend.open(DIMS + 8)
    with pytest.raises(IndexDimensionMismatch, match="ki reindex"):
        other.ensure()


def test_ensure_is_idempotent(loaded_index: SearchIndex) -> None:
    loaded_index.ensure()
    assert loaded_index.count() == len(FIXTURE_CHUNKS)


# -------------------------------------------------------- filter-only search

NEWEST_FIRST = [
    ("ver-kv-1-a", 121),  # 2023-11-30, ties with kv-2 and wins on the version id
    ("ver-kv-2-a", 127),  # 2023-11-30
    ("ver-brief-1-a", 111),  # 2022-01-10
    ("ver-mv-1-b", 101),  # 2021-03-01
    ("ver-mv-1-a", 107),  # 2021-02-01
    ("ver-mv-2-a", 108),  # 2020-06-15
    ("ver-note-1-a", 113),  # 2019-05-05
    ("ver-av-1-a", 114),  # 2018-09-01
    ("ver-av-2-a", 119),  # no date: last
]


def test_search_filter_orders_by_date_descending_one_hit_per_version(loaded_index: SearchIndex) -> None:
    hits = loaded_index.search_filter(EVERYTHING, SearchFilters(), 100)
    assert [(hit.document_version_id, hit.chunk_id) for hit in hits] == NEWEST_FIRST
    assert hits[0].doc_date == date(2023, 11, 30) and hits[-1].doc_date is None
    assert hits[3].version_status == "executed" and hits[3].project_id == "proj-miete"


def test_search_filter_pages_with_offset(loaded_index: SearchIndex) -> None:
    page = loaded_index.search_filter(EVERYTHING, SearchFilters(), 3, offset=2)
    assert [(hit.document_version_id, hit.chunk_id) for hit in page] == NEWEST_FIRST[2:5]


def test_search_filter_applies_scope_and_filters(loaded_index: SearchIndex) -> None:
    hits = loaded_index.search_filter(EVERYTHING, SearchFilters(chunk_kind="clause"), 10)
    assert [(hit.document_version_id, hit.chunk_id) for hit in hits] == [
        ("ver-kv-1-a", 126), ("ver-mv-1-b", 106), ("ver-av-1-a", 118),
    ]  # fmt: skip
    scoped = loaded_index.search_filter(SCOPE_CASES["all three forms"], SearchFilters(), 10)
    assert [hit.document_version_id for hit in scoped] == ["ver-kv-2-a", "ver-mv-2-a"]


def test_count_by_scope_and_filters(loaded_index: SearchIndex) -> None:
    assert loaded_index.count() == len(FIXTURE_CHUNKS)
    assert loaded_index.count(ScopeFilter(project_ids=frozenset({"proj-kauf"}))) == 8
    assert loaded_index.count(None, SearchFilters(chunk_kind="clause")) == 3


# ------------------------------------------------------------- limits of the engines

# More ids than one OpenSearch `terms` query may list (index.max_terms_count, 65,536).
BEYOND_TERMS_LIMIT = 70_000


def many_document_ids(real: set[str], count: int = BEYOND_TERMS_LIMIT) -> frozenset[str]:
    """`count` document ids, the real ones among invented ones that sort before and after them."""
    invented = {f"doc-{prefix}-{n:06d}" for n in range(count // 2) for prefix in ("aa", "zz")}
    return frozenset(real | invented)


def test_a_scope_listing_more_documents_than_one_terms_query_admits_exactly_them(loaded_index: SearchIndex) -> None:
    real = {"doc-mv-1", "doc-kv-2", "doc-av-1"}
    scope = ScopeFilter(document_ids=many_document_ids(real))
    expected = {c.chunk_id for c in FIXTURE_CHUNKS if c.document_id in real}
    result = search(loaded_index, BROAD_QUERY, scope=scope)
    assert ids(result.hits(Leg.SEMANTIC)) == expected
    assert ids(result.hits(Leg.LEXICAL)) <= expected and ids(result.hits(Leg.LEXICAL))
    assert loaded_index.count(scope) == len(expected)
    assert {hit.document_id for hit in loaded_index.search_filter(scope, SearchFilters(), 100)} == real


def test_a_project_minus_more_exclusions_than_one_terms_query_is_the_rest_of_it(loaded_index: SearchIndex) -> None:
    excluded = {"doc-mv-1"}
    scope = ScopeFilter(project_ids=frozenset({"proj-miete"}), excluded_document_ids=many_document_ids(excluded))
    expected = chunk_ids_of(project_id="proj-miete") - chunk_ids_of(document_id="doc-mv-1")
    assert ids(search(loaded_index, scope=scope).hits(Leg.SEMANTIC)) == expected
    assert loaded_index.count(scope) == len(expected)


def test_a_listing_up_to_the_result_window_works_and_deeper_is_refused_by_name(loaded_index: SearchIndex) -> None:
    assert loaded_index.search_filter(EVERYTHING, SearchFilters(), 10, offset=MAX_RESULT_WINDOW - 10) == []
    with pytest.raises(ResultWindowTooDeep, match="10000"):
        loaded_index.search_filter(EVERYTHING, SearchFilters(), 10, offset=MAX_RESULT_WINDOW - 9)


def test_stored_fields_of_many_chunks_are_those_of_each_and_skip_the_missing(loaded_index: SearchIndex) -> None:
    wanted = [c.chunk_id for c in FIXTURE_CHUNKS] + [999_999]
    stored = loaded_index.stored_fields_of(wanted)
    assert set(stored) == {c.chunk_id for c in FIXTURE_CHUNKS}
    assert all(stored[chunk_id] == loaded_index.stored_fields(chunk_id) for chunk_id in (101, 118, 126))


def test_an_index_carries_the_store_that_claimed_it_for_every_handle(backend, search_index: SearchIndex) -> None:
    """ki_core.store_identity compares this with the database's store id: a reader opened later
    (another process) must see the writer's claim."""
    assert search_index.store_id() is None, "a new index belongs to no store yet"
    search_index.claim_store("a" * 32)
    other = backend.open_reader()
    assert other.store_id() == "a" * 32
    search_index.claim_store("b" * 32)
    assert other.store_id() == "b" * 32, "a rebuilt store's claim replaces the old one"
