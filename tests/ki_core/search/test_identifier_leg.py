"""The identifier leg matches whole normalized identifiers on both backends (amendments.md 1, issue 44).

A value matches a chunk that carries it, or a reference below it (identifier_values holds
each identifier with its ancestors), and never a chunk whose identifiers merely share its
tokens: the token match admitted "§ 1 BGB" for 1,968 of 5,017 BGB units. Each chunk below is
its own document, so every assertion is about which identifiers a hit carries.
"""

from __future__ import annotations

import pytest

from ki_core.identifiers import query_identifier_terms
from ki_core.search.index import IndexOp, SearchIndex
from ki_core.search.types import IndexChunk, Leg, LegHit, MultiSearchRequest, ScopeFilter
from ki_query.query_language.plan import plan_query
from tests.ki_core.search.conftest import unit_vector

PROJECT = "proj-ids"
IDENTIFIERS = {
    1: ("§ 12 BGB", "§ 1 ZPO"),
    2: ("§ 573c Abs. 1 Satz 2 BGB",),
    3: ("§ 573 BGB",),
    4: ("§ 1 BGB",),
    5: ("MV-2024-003", "HRB 12345"),
    6: ("§ 573c BGB", "VIII ZR 123/20"),
    7: ("§ 535 BGB",),
    8: ("§ 535 BGB", "§ 12 BGB"),
    9: ("§ 535 BGB",),
    10: ("VIII ZR 1/21",),
    11: ("§ 535 BGB", "VIII ZR 1/21"),
    12: ("17/2024 KW", "Vertrag 4711"),
    13: ("§ 573c Abs. 3 BGB",),
    14: (),
    15: ("VIII ZR 123/20",),
}


def chunk(chunk_id: int, identifiers: tuple[str, ...]) -> IndexChunk:
    return IndexChunk(
        chunk_id=chunk_id, text=f"Schriftsatz {chunk_id} zur Kündigung des Mietvertrags.",
        embedding=unit_vector(f"ids-{chunk_id}"), project_id=PROJECT, document_id=f"doc-{chunk_id}",
        document_version_id=f"ver-{chunk_id}", version_status="final", identifiers=identifiers,
    )  # fmt: skip


@pytest.fixture
def index(search_index: SearchIndex) -> SearchIndex:
    search_index.bulk(IndexOp(chunk(chunk_id, ids)) for chunk_id, ids in IDENTIFIERS.items())
    search_index.refresh()
    return search_index


def leg(index: SearchIndex, query: str, **request: object) -> tuple[LegHit, ...]:
    fields: dict[str, object] = {"identifier_terms": query_identifier_terms(query)} | request
    result = index.multi_search(MultiSearchRequest(
        query_text=query, query_vector=None, scope=ScopeFilter(project_ids=frozenset({PROJECT})), size=50, **fields,
    ))  # fmt: skip
    return result.hits(Leg.IDENTIFIER)


def found(index: SearchIndex, query: str) -> list[int]:
    return [hit.chunk_id for hit in leg(index, query)]


def test_a_value_never_matches_across_two_identifiers_of_one_chunk(index: SearchIndex) -> None:
    """Chunk 1 holds every token of "§ 1 BGB" ("§", "1", "BGB") in "§ 12 BGB" and "§ 1 ZPO"."""
    assert found(index, "§ 1 BGB") == [4]
    assert found(index, "§ 1 ZPO") == [1]
    assert found(index, "§ 1a BGB") == found(index, "§ 12 ZPO") == []


@pytest.mark.parametrize("query", ["§ 573c BGB", "§ 573c Abs. 1 BGB", "§ 573c Abs. 1 Satz 2 BGB"])
def test_a_reference_is_found_by_itself_and_each_of_its_ancestors(index: SearchIndex, query: str) -> None:
    assert 2 in found(index, query)


@pytest.mark.parametrize("query", ["§ 573 BGB", "§ 1 BGB", "§ 573c Abs. 2 BGB", "§ 573c Abs. 1 Satz 1 BGB"])
def test_a_reference_is_never_found_by_a_neighbour_or_a_prefix_of_its_tokens(index: SearchIndex, query: str) -> None:
    assert 2 not in found(index, query)


def test_a_section_finds_every_paragraph_and_a_paragraph_only_itself_and_below(index: SearchIndex) -> None:
    """Asking for the section would admit every other paragraph of it (13): a query below a
    section asks for what it names, whose carriers are the chunks citing it or a part of it."""
    assert sorted(found(index, "§ 573c BGB")) == [2, 6, 13]
    assert found(index, "§ 573c Abs. 1 BGB") == [2]
    assert found(index, "§ 573c Abs. 3 BGB") == [13]


def test_a_rare_value_outweighs_a_common_one_and_ties_break_on_chunk_id(index: SearchIndex) -> None:
    """BM25 of each value times its weight: the chunk carrying both values first, the rare value's
    carrier next, then the common value's carriers, by how few values they carry, ties by chunk id."""
    hits = leg(index, "§ 535 BGB und VIII ZR 1/21")
    assert [hit.chunk_id for hit in hits] == [11, 10, 7, 9, 8]
    assert hits[2].score == hits[3].score > hits[4].score
    assert [hit.rank for hit in hits] == list(range(5))


def test_of_two_carriers_the_one_carrying_fewer_values_ranks_first(index: SearchIndex) -> None:
    """A § unit carries its own address and few citations; a chunk citing it among many others follows."""
    assert found(index, "§ 573c BGB") == [6, 13, 2]
    assert found(index, "§ 12 BGB") == [1, 8]


def test_a_pasted_value_the_extractor_does_not_know_matches_only_as_a_whole(index: SearchIndex) -> None:
    assert found(index, "MV-2024-003") == [5]
    assert found(index, "Nachtrag zu MV-2024-003.") == [5]
    assert found(index, "17/2024 KW") == [12]
    for partial in ("MV-2024", "2024-003", "17/2024", "KW 4711", "17/2024 4711", "Vertrag 17/2024 KW 4711"):
        assert found(index, partial) == [], partial


def test_a_law_name_or_a_bare_number_runs_no_identifier_leg(index: SearchIndex) -> None:
    assert query_identifier_terms("Kündigung nach BGB") == ()
    assert found(index, "BGB 12") == []


@pytest.mark.parametrize(
    ("query", "carriers"),
    [('norm:"§ 573c BGB" (Kündigung OR "VIII ZR 123/20")', [6, 13, 2]), ('az:"VIII ZR 123/20" Kündigung', [15, 6])],
)
def test_the_leg_ranks_inside_the_set_of_an_az_or_norm_filter(
    index: SearchIndex, query: str, carriers: list[int]
) -> None:
    """issue 39's filters keep the set (chunks carrying the value or a reference below it): 15
    carries the case number the norm: query names but not the norm, so the leg never brings
    it; inside the set the chunk carrying both values ranks first."""
    plan = plan_query(query, None)
    hits = leg(index, plan.text, identifier_terms=plan.identifier_terms, constraint=plan.constraint)
    assert [hit.chunk_id for hit in hits] == carriers
