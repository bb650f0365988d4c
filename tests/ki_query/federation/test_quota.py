"""The corpus quota (spec/federation.md, "Corpus quota"), through the federation and as a function."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ki_query.federation.ranking import hit_rank, quota_cut
from ki_query.federation.retriever import FederatedRetriever
from tests.ki_query.memory_corpora import FixedHitsRetriever, MemoryRegistry


def hits_of(corpus: str, *scores: float) -> list[dict]:
    return [
        {"text": f"{corpus} {i}", "score": s, "metadata": {"text_hash": f"{corpus}-{i}"}, "retrieval_kinds": [],
         "corpus_id": corpus}
        for i, s in enumerate(scores)
    ]


def corpora_of(hits: list[dict]) -> list[str]:
    return [h["corpus_id"] for h in hits]


# The case the quota exists for: 6,670 statute chunks against a 106-chunk guideline.
BIG = hits_of("statutes", 0.91, 0.90, 0.89, 0.88, 0.87, 0.86, 0.85, 0.84)
SMALL = hits_of("guideline", 0.85, 0.84, 0.83)


def test_no_limit_returns_every_hit() -> None:
    assert len(quota_cut(BIG + SMALL, None)) == 11
    assert len(quota_cut(BIG + SMALL, 0)) == 11


def test_without_a_quota_or_with_few_hits_it_is_a_plain_cut() -> None:
    assert corpora_of(quota_cut(BIG + SMALL, 4, min_per_corpus=0)) == ["statutes"] * 4
    assert len(quota_cut(BIG[:2] + SMALL[:1], 4)) == 3


def test_a_single_corpus_is_a_plain_cut() -> None:
    assert quota_cut(BIG, 3) == BIG[:3]


def test_a_comparable_but_outnumbered_corpus_keeps_min_per_corpus_hits() -> None:
    cut = quota_cut(BIG + SMALL, 8)
    assert corpora_of(cut).count("guideline") == 2
    assert [hit_rank(h) for h in cut] == sorted((hit_rank(h) for h in cut), reverse=True)


def test_a_corpus_below_min_ratio_of_the_best_hit_is_not_rescued() -> None:
    nothing_to_say = hits_of("guideline", 0.008, 0.007)
    assert corpora_of(quota_cut(BIG + nothing_to_say, 4)) == ["statutes"] * 4
    just_enough = hits_of("guideline", 0.91 * 0.25)
    assert "guideline" in corpora_of(quota_cut(BIG + just_enough, 4))


def test_a_corpus_below_the_floor_is_not_rescued_however_close_its_ratio() -> None:
    """On the common scale the floor is the found level: a corpus that found nothing itself is not rescued."""
    modest = hits_of("statutes", 0.40, 0.39, 0.38, 0.37, 0.36, 0.35)
    near = hits_of("guideline", 0.24)
    assert corpora_of(quota_cut(modest + near, 4)).count("guideline") == 1
    assert corpora_of(quota_cut(modest + near, 4, floor=0.25)) == ["statutes"] * 4


def test_at_most_half_the_list_is_reserved() -> None:
    # limit 4 -> budget 2: round one (1 + 1) fits, round two would reserve 4 > 2.
    cut = quota_cut(BIG + SMALL, 4)
    assert corpora_of(cut).count("guideline") == 1
    # limit 1 -> budget max(1, 0) = 1: a round of two corpora never fits.
    assert corpora_of(quota_cut(BIG + SMALL, 1)) == ["statutes"]


def test_reservation_takes_whole_rounds_never_a_partial_one() -> None:
    third = hits_of("contract", 0.80, 0.79)
    # limit 5 -> budget 2, but a round of three corpora needs 3: no reservation at all.
    assert corpora_of(quota_cut(BIG + SMALL + third, 5)) == ["statutes"] * 5
    # limit 6 -> budget 3: exactly one round.
    cut = corpora_of(quota_cut(BIG + SMALL + third, 6))
    assert cut.count("guideline") == 1 and cut.count("contract") == 1


def test_reservation_stops_after_min_per_corpus_rounds_and_fills_by_global_rank() -> None:
    tail = hits_of("guideline", 0.85, 0.30, 0.29)
    # limit 8 -> budget 4: two rounds of two would fit, min_per_corpus decides how many run.
    assert corpora_of(quota_cut(BIG + tail, 8, min_per_corpus=1)) == ["statutes"] * 7 + ["guideline"]
    assert corpora_of(quota_cut(BIG + tail, 8, min_per_corpus=2)).count("guideline") == 2
    assert corpora_of(quota_cut(BIG + tail, 8, min_per_corpus=3)).count("guideline") == 2


def test_the_federation_cuts_to_max_final_results_or_top_k_with_the_quota() -> None:
    registry = MemoryRegistry({"statutes": FixedHitsRetriever(BIG), "guideline": FixedHitsRetriever(SMALL)})
    federation = FederatedRetriever(registry)
    assert corpora_of(federation.query("Frage", top_k=8)).count("guideline") == 2
    assert len(federation.query("Frage", top_k=8, max_final_results=3)) == 3
    configured = FederatedRetriever(registry, max_final_results=5, min_hits_per_corpus=0)
    assert corpora_of(configured.query("Frage", top_k=8)) == ["statutes"] * 5


ranks = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
corpus_hits = st.dictionaries(st.sampled_from("abcd"), st.lists(ranks, min_size=1, max_size=8), min_size=1)


@settings(max_examples=300, deadline=None)
@given(groups=corpus_hits, limit=st.integers(1, 12), per_corpus=st.integers(0, 3), ratio=st.sampled_from([0.0, 0.25, 0.9]))
def test_quota_properties(groups, limit, per_corpus, ratio) -> None:
    hits = [h for corpus, scores in groups.items() for h in hits_of(corpus, *sorted(scores, reverse=True))]
    cut = quota_cut(hits, limit, min_per_corpus=per_corpus, min_ratio=ratio)
    assert len(cut) == min(limit, len(hits))
    assert all(any(h is g for g in hits) for h in cut)
    assert [hit_rank(h) for h in cut] == sorted((hit_rank(h) for h in cut), reverse=True)
    best = max(hit_rank(h) for h in hits)
    qualifying = [c for c, s in groups.items() if max(s) >= ratio * best]
    rounds_that_fit = 0
    if per_corpus > 0 and len(hits) > limit and len(groups) > 1 and len(qualifying) > 1:
        budget, reserved = max(1, limit // 2), 0
        for i in range(per_corpus):
            size = sum(1 for c in qualifying if len(groups[c]) > i)
            if not size or reserved + size > budget:
                break
            reserved, rounds_that_fit = reserved + size, i + 1
    for corpus in qualifying:
        assert corpora_of(cut).count(corpus) >= min(rounds_that_fit, len(groups[corpus]))
