"""RRF, status boost, document collapse and the rerank prefix, as numbers (no database, no index)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ki_core.search.types import Leg, LegHit
from ki_query.fusion import (
    ORDERED_HEAD,
    RERANK_PREFIX,
    Candidate,
    collapse,
    fuse,
    fused_order,
    matched_identifiers,
    prefix_covering,
    rerank_prefix,
    rrf,
)

WEIGHTS = {"lexical": 1.0, "semantic": 1.0, "identifier": 1.5}
BOOSTS = {"executed": 1.2, "final": 1.0, "unknown": 0.8, "draft": 0.7}


def hit(chunk_id: int, rank: int = 0, *, document: str | None = None, status: str = "final",
        identifiers: tuple[str, ...] = ()) -> LegHit:
    return LegHit(
        chunk_id=chunk_id, document_id=document or f"d{chunk_id}", document_version_id=f"v{chunk_id}",
        project_id="p", version_status=status, chunk_kind="chunk", identifiers=identifiers, score=1.0, rank=rank,
    )


def candidate(chunk_id: int, score: float, document: str, *, latest: bool = False) -> Candidate:
    return Candidate(
        chunk_id=chunk_id, document_id=document, version_id=f"v{chunk_id}", project_id="p",
        version_status="final", chunk_kind="chunk", fused=score, score=score, is_latest_final=latest,
    )


# ------------------------------------------------------------------ RRF


def test_rrf_adds_weight_over_k_plus_rank_per_leg_with_ranks_from_zero() -> None:
    fused = rrf(
        {Leg.LEXICAL: [hit(1), hit(2)], Leg.SEMANTIC: [hit(2), hit(3)], Leg.IDENTIFIER: [hit(1)]}, WEIGHTS, 60
    )
    scores = {c.chunk_id: c.fused for c in fused}
    assert scores[1] == pytest.approx(1 / 60 + 1.5 / 60)
    assert scores[2] == pytest.approx(1 / 61 + 1 / 60)
    assert scores[3] == pytest.approx(1 / 61)
    assert [c.chunk_id for c in fused] == [1, 2, 3]
    assert fused[1].legs == {"lexical": (1, 1.0), "semantic": (0, 1.0)}


def test_the_rank_is_the_position_in_the_leg_and_k_dampens_the_head() -> None:
    [only] = rrf({Leg.SEMANTIC: [hit(7, rank=99)]}, WEIGHTS, 1)
    assert only.fused == pytest.approx(1.0)  # position 0, whatever rank the backend reported
    legs = {Leg.LEXICAL: [hit(i) for i in range(5)]}
    assert [round(c.fused, 6) for c in rrf(legs, WEIGHTS, 10)] == [round(1 / (10 + r), 6) for r in range(5)]


legs_strategy = st.dictionaries(
    st.sampled_from(list(Leg)),
    st.lists(st.integers(0, 30), unique=True, max_size=12),
)


@given(legs=legs_strategy, k=st.integers(1, 100))
def test_rrf_matches_the_formula_for_any_legs(legs: dict[Leg, list[int]], k: int) -> None:
    fused = rrf({leg: [hit(c) for c in chunk_ids] for leg, chunk_ids in legs.items()}, WEIGHTS, k)
    expected: dict[int, float] = {}
    for leg, chunk_ids in legs.items():
        for rank, chunk_id in enumerate(chunk_ids):
            expected[chunk_id] = expected.get(chunk_id, 0.0) + WEIGHTS[leg.value] / (k + rank)
    assert {c.chunk_id: c.fused for c in fused} == pytest.approx(expected)
    assert [c.fused for c in fused] == sorted((c.fused for c in fused), reverse=True)


def test_the_fused_order_past_the_ordered_head_and_across_its_ties_is_the_full_order() -> None:
    """A leg of weight 0 gives 300 candidates the same score, and the ordered head ends inside them:
    every position, read in any order, is the one a full sort by (-score, chunk id) gives."""
    scored = [hit(c) for c in range(1_000, 1_000 + ORDERED_HEAD - 56)]
    tied = [hit(c) for c in random.Random(7).sample(range(1_000), 300)]
    fused = fuse({Leg.LEXICAL: scored, Leg.SEMANTIC: tied}, {"lexical": 1.0, "semantic": 0.0}, 60)
    expected = [h.chunk_id for h in scored] + sorted(h.chunk_id for h in tied)
    positions = [*range(ORDERED_HEAD - 3, ORDERED_HEAD + 3), len(expected) - 1, 0, *range(len(expected))]
    assert {p: fused[p].chunk_id for p in positions} == {p: expected[p] for p in positions}


def test_a_rank_constant_below_one_is_refused_rather_than_dividing_by_zero() -> None:
    with pytest.raises(ValueError, match="fusion_rrf_k"):
        rrf({Leg.LEXICAL: [hit(1)]}, WEIGHTS, 0)


def test_matched_identifiers_are_the_indexed_ones_found_casefolded_in_the_query() -> None:
    ids = ("VIII ZR 182/06", "§ 536 BGB", "MV-2024-003")
    assert matched_identifiers(ids, "bgh viii zr 182/06 zur minderung") == ("VIII ZR 182/06",)
    assert matched_identifiers(ids, "Miete nach § 536 BGB, MV-2024-003") == ("§ 536 BGB", "MV-2024-003")
    assert matched_identifiers(ids, "VIII ZR 182") == ()


def test_an_identifier_is_reported_when_the_query_names_it_or_one_of_its_ancestors() -> None:
    ids = ("§ 573c Abs. 1 Satz 2 BGB", "§ 12 BGB", "§ 1 ZPO")
    assert matched_identifiers(ids, "Kündigungsfrist § 573c BGB") == ("§ 573c Abs. 1 Satz 2 BGB",)
    assert matched_identifiers(ids, "§ 573c Abs. 1 BGB") == ("§ 573c Abs. 1 Satz 2 BGB",)
    assert matched_identifiers(ids, "§ 573 BGB und § 1 BGB") == ()


def test_only_identifier_leg_candidates_report_matches_and_the_score_does_not_change() -> None:
    tagged = ("VIII ZR 182/06",)
    legs = {Leg.LEXICAL: [hit(1, identifiers=tagged)], Leg.IDENTIFIER: [hit(2, identifiers=tagged)]}
    before = {c.chunk_id: c.fused for c in rrf(legs, WEIGHTS, 60)}
    fused = list(fuse(legs, WEIGHTS, 60, query="Urteil VIII ZR 182/06"))
    assert {c.chunk_id: c.matched_identifiers for c in fused} == {1: (), 2: tagged}
    assert {c.chunk_id: c.fused for c in fused} == before


# ------------------------------------------------------------------ boost


def test_the_status_boost_multiplies_and_an_unlisted_status_counts_one() -> None:
    legs = {Leg.SEMANTIC: [hit(1, status="draft"), hit(2, status="executed"), hit(3, status="archived")]}
    boosted = list(fuse(legs, WEIGHTS, 60, BOOSTS))
    by_id = {c.chunk_id: c for c in boosted}
    assert by_id[1].score == pytest.approx(0.7 / 60) and by_id[1].boost == 0.7
    assert by_id[2].score == pytest.approx(1.2 / 61)
    assert by_id[3].score == pytest.approx(1.0 / 62) and by_id[3].boost == 1.0
    assert [c.chunk_id for c in boosted] == [2, 3, 1]  # executed overtakes the draft ranked above it


# ------------------------------------------------------------------ collapse


def test_collapse_keeps_the_best_scored_chunk_of_each_document() -> None:
    result = collapse([candidate(1, 0.5, "a"), candidate(2, 0.9, "a"), candidate(3, 0.7, "b")])
    assert [c.chunk_id for c in result] == [2, 3]


def test_on_equal_scores_the_latest_final_version_wins_the_collapse() -> None:
    older = candidate(1, 0.5, "a")
    latest = candidate(9, 0.5, "a", latest=True)
    assert [c.chunk_id for c in collapse([older, latest])] == [9]
    assert [c.chunk_id for c in collapse([candidate(1, 0.6, "a"), latest])] == [1]  # only a tiebreaker


def test_without_collapse_each_document_keeps_up_to_max_chunks() -> None:
    many = [candidate(i, 1 - i / 10, "a") for i in range(5)] + [candidate(9, 0.05, "b")]
    assert [c.chunk_id for c in collapse(many, per_document=False, max_chunks=3)] == [0, 1, 2, 9]


candidate_rows = st.lists(
    st.tuples(st.sampled_from("abcdefg"), st.sampled_from([0.1, 0.2, 0.2, 0.3, 0.5]), st.booleans(), st.booleans()),
    max_size=30,
)


@given(rows=candidate_rows, documents=st.integers(1, 8), per_document=st.booleans())
def test_collapsing_a_covering_prefix_gives_the_head_of_collapsing_everything(
    rows: list[tuple[str, float, bool, bool]], documents: int, per_document: bool
) -> None:
    """Why search may verify best-first in batches: the verified prefix's collapse is exact."""
    candidates = sorted(
        (candidate(i, score, doc, latest=latest) for i, (doc, score, latest, _) in enumerate(rows)), key=fused_order
    )
    passes = {i for i, (*_, verified) in enumerate(rows) if verified}
    end = prefix_covering(candidates, documents)
    whole = collapse([c for c in candidates if c.chunk_id in passes], per_document=per_document, max_chunks=2)
    head = collapse([c for c in candidates[:end] if c.chunk_id in passes], per_document=per_document, max_chunks=2)
    assert head == whole[: len(head)]
    named = {c.document_id for c in candidates[:end]}
    assert len(named) >= min(documents, len({c.document_id for c in candidates}))


def test_a_covering_prefix_keeps_ties_together_and_can_start_later() -> None:
    tied = [candidate(1, 0.5, "a"), candidate(2, 0.5, "b"), candidate(3, 0.5, "c"), candidate(4, 0.1, "d")]
    assert prefix_covering(tied, 1) == 3
    assert prefix_covering(tied, 4, start=3) == 4
    assert prefix_covering([], 3) == 0


# ------------------------------------------------------------------ rerank


def ranked(n: int) -> list[Candidate]:
    return [candidate(i, 1 - i / 100, f"d{i}") for i in range(n)]


def test_rerank_scores_replace_the_prefix_order_and_unscored_follow_in_fused_order() -> None:
    hits = ranked(30)
    result = rerank_prefix(hits, {"v3": 9.0, "v0": 4.0, "v25": 10.0}, key=lambda c: c.version_id)
    assert [c.chunk_id for c in result[:4]] == [3, 0, 1, 2]
    assert [c.chunk_id for c in result[4:20]] == list(range(4, 20))
    assert [c.chunk_id for c in result[20:]] == list(range(20, 30))  # past the prefix: never reranked
    assert result[0].score == 9.0 and result[0].rerank_score == 9.0 and result[2].rerank_score is None
    assert len(result) == 30 > RERANK_PREFIX


@given(
    n=st.integers(0, 45),
    scored=st.dictionaries(st.integers(0, 45), st.floats(0, 10, allow_nan=False), max_size=25),
)
def test_rerank_never_drops_and_only_reorders_the_prefix(n: int, scored: dict[int, float]) -> None:
    hits = ranked(n)
    result = rerank_prefix(hits, {f"v{i}": s for i, s in scored.items()}, key=lambda c: c.version_id)
    assert sorted(c.chunk_id for c in result) == list(range(n))
    assert [c.chunk_id for c in result[RERANK_PREFIX:]] == list(range(RERANK_PREFIX, n))
    head = result[: min(n, RERANK_PREFIX)]
    rescored = [c for c in head if c.rerank_score is not None]
    assert head[: len(rescored)] == rescored
    assert [c.score for c in rescored] == sorted((c.score for c in rescored), reverse=True)
    assert [c.chunk_id for c in head[len(rescored):]] == sorted(c.chunk_id for c in head[len(rescored):])
