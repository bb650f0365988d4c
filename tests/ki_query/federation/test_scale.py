"""The common scale (ranking.py) and the verdict, with controlled cosines: no embedder.

"anchor", "Verweis in the tail", "min_ratio" and "nothing relevant" must mean the same whichever
embedder produced the cosines: each case runs with cosines typical of e5-small, USE, the hashing
test embedder and an unmeasured gateway model (best hits of off-topic and on-topic questions).
"""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ki_query.federation import ranking
from ki_query.federation.ranking import (
    FOUND,
    FOUND_LEVEL,
    NOTHING_RELEVANT,
    UNKNOWN,
    WEAK,
    WEAK_LEVEL,
    Calibration,
    calibration_for,
    combined_verdict,
    cosine_verdict,
    hit_rank,
    level_verdict,
    on_common_scale,
    quota_cut,
    weak_cosine,
)
from ki_query.federation.retriever import (
    CHECK_FAILED_REASON,
    NO_FINDINGS_REASON,
    NOTHING_CHECKED_REASON,
    VERWEIS_SCORE,
    Address,
    FederatedRetriever,
)
from ki_query.federation.search import CitedByStrongHits
from tests.ki_query.memory_corpora import BrokenRetriever, FixedHitsRetriever, MemoryRegistry

# (signature, an off-topic question's best cosine, an answerable question's best cosine), as measured
# over the statutes corpus (ranking.NULL_COSINES); the gateway model is unmeasured (default null).
EMBEDDERS = [
    ("e5-small:384", 0.81, 0.90),
    ("use-multilingual:512", 0.18, 0.55),
    ("hashing:hashing:384", 0.31, 0.62),
    ("gateway:text-embedding-3-small:1536", 0.24, 0.55),
]
embedders = pytest.mark.parametrize(("signature", "off", "on"), EMBEDDERS, ids=[e[0].split(":")[0] for e in EMBEDDERS])


def cosine_hits(corpus: str, *cosines: float, section: str = "§ 1") -> list[dict]:
    """Hits in the corpus's own order with rank_score = cosine, as a corpus retriever returns them."""
    return [
        {"text": f"{corpus} {i}", "score": 1.0 / (i + 1), "rank_score": c, "retrieval_kinds": ["semantic"],
         "metadata": {"text_hash": f"{corpus}-{i}", "container_id": corpus.upper(), "section_id": section},
         "corpus_id": corpus}
        for i, c in enumerate(cosines)
    ]


def federation(scale: Calibration, **corpora: FixedHitsRetriever) -> FederatedRetriever:
    return FederatedRetriever(MemoryRegistry(corpora), scale=scale)


# ------------------------------------------------------------------ levels


def test_a_corpus_keeps_its_own_order_and_takes_its_levels_sorted_best_first() -> None:
    e5 = calibration_for("e5-small:384")
    # The corpus ranks a lexical match with a modest cosine first: it stays first, at the corpus's best level.
    placed = on_common_scale(cosine_hits("statutes", 0.85, 0.95, 0.79, 0.90), e5)
    assert [h["text"] for h in placed] == ["statutes 0", "statutes 1", "statutes 2", "statutes 3"]
    assert [h["rank_score"] for h in placed] == pytest.approx([e5.level(c) for c in (0.95, 0.90, 0.85, 0.79)])
    assert [h["metadata"]["cosine"] for h in placed] == [0.85, 0.95, 0.79, 0.90]


def test_levels_run_from_the_null_cosine_to_an_identical_text() -> None:
    e5 = Calibration("e5-small:384", 0.79)
    assert e5.level(0.70) == 0.0 and e5.level(0.79) == 0.0 and e5.level(1.0) == 1.0
    assert e5.cosine_at(FOUND_LEVEL) == pytest.approx(0.8425)
    assert e5.level(e5.cosine_at(0.5)) == pytest.approx(0.5)


def test_a_hit_fetched_by_address_is_at_the_top_whatever_its_cosine() -> None:
    lookup = {**cosine_hits("statutes", 0.2)[0], "retrieval_kinds": ["section_lookup"]}
    assert calibration_for("e5-small:384").hit_level(lookup) == 1.0
    unreadable = {**cosine_hits("statutes", 0.0)[0], "rank_score": "n/a"}
    assert calibration_for("e5-small:384").hit_level(unreadable) == 0.0


# ------------------------------------------------------------------ the same rules with every embedder


@embedders
def test_the_verdict_means_the_same_with_every_embedder(signature: str, off: float, on: float) -> None:
    calibration = calibration_for(signature)
    assert level_verdict(calibration.level(off)) == NOTHING_RELEVANT
    assert level_verdict(calibration.level(on)) == FOUND


@embedders
def test_min_ratio_rescues_a_comparable_corpus_and_not_one_with_nothing_to_say(signature, off, on) -> None:
    big = FixedHitsRetriever(cosine_hits("statutes", *(on - 0.001 * i for i in range(10))))
    comparable = FixedHitsRetriever(cosine_hits("guideline", on - 0.02, on - 0.03))
    silent = FixedHitsRetriever(cosine_hits("contract", off, off - 0.01))
    hits = federation(calibration_for(signature), statutes=big, guideline=comparable, contract=silent).query(
        "Frage", top_k=8
    )
    corpora = [h["corpus_id"] for h in hits]
    assert corpora.count("guideline") == 2 and "contract" not in corpora


def test_on_raw_e5_cosines_min_ratio_would_rescue_every_corpus() -> None:
    """The finding the scale fixes: e5's off-topic 0.81 is 90 % of an answer's 0.90, far above 0.25."""
    raw = cosine_hits("statutes", *(0.90 - 0.001 * i for i in range(10))) + cosine_hits("contract", 0.81)
    assert "contract" in {h["corpus_id"] for h in quota_cut(raw, 8)}


@embedders
def test_a_verweis_sits_below_the_strong_hits_and_above_the_rest(signature, off, on) -> None:
    calibration = calibration_for(signature)
    strong, weak = calibration.cosine_at(0.8), calibration.cosine_at(0.3)
    cited = {"text": "cited norm", "score": 1.0, "rank_score": 1.0, "retrieval_kinds": ["section_lookup"],
             "metadata": {"text_hash": "cited", "container_id": "BGB", "section_id": "§ 9"}}
    statutes = FixedHitsRetriever(cosine_hits("statutes", strong, strong - 0.001, weak, weak - 0.001),
                                  units={"BGB|§ 9": [cited]})
    retriever = FederatedRetriever(
        MemoryRegistry({"statutes": statutes}), scale=calibration,
        verweise=CitedByStrongHits(lambda hits, ids: [Address("statutes", "§ 9", "BGB")]),
    )
    hits = retriever.query("Frage", top_k=8)
    assert [h["text"] for h in hits] == ["statutes 0", "statutes 1", "cited norm", "statutes 2", "statutes 3"]
    assert hits[2]["retrieval_kinds"] == ["verweis"]
    assert hits[2]["rank_score"] == pytest.approx(VERWEIS_SCORE * hits[0]["rank_score"])  # half-way below the best


@embedders
def test_an_off_topic_question_is_not_led_by_the_norms_its_hits_cite(signature, off, on) -> None:
    read: list[list[str]] = []

    def cites_a_norm(hits, ids):
        read.append([h["text"] for h in hits])
        return [Address("statutes", "§ 9", "BGB")]

    cited = {"text": "cited norm", "score": 1.0, "retrieval_kinds": ["section_lookup"], "metadata": {"text_hash": "c"}}
    statutes = FixedHitsRetriever(cosine_hits("statutes", off, off - 0.01), units={"BGB|§ 9": [cited]})
    retriever = FederatedRetriever(MemoryRegistry({"statutes": statutes}), scale=calibration_for(signature),
                                   verweise=CitedByStrongHits(cites_a_norm))
    hits = retriever.query("Hundesteuer Kampfhund Hamburg", top_k=8)
    assert [h["text"] for h in hits] == ["statutes 0", "statutes 1"] and read == []


@embedders
def test_an_anchor_leads_and_a_corpus_that_answers_follows(signature, off, on) -> None:
    anchor = {"text": "anchored norm", "score": 1.0, "rank_score": 1.0, "retrieval_kinds": ["section_lookup"],
              "metadata": {"text_hash": "anchored"}}
    statutes = FixedHitsRetriever(cosine_hits("statutes", on, on - 0.01), units={"SGB V|§ 27": [anchor]})
    retriever = FederatedRetriever(MemoryRegistry({"statutes": statutes}), scale=calibration_for(signature),
                                   anchors=lambda q: [Address("statutes", "§ 27", "SGB V")])
    hits = retriever.query("Krankenbehandlung", top_k=8)
    assert [h["text"] for h in hits] == ["anchored norm", "statutes 0", "statutes 1"]
    assert hit_rank(hits[0]) == 1.0 > hit_rank(hits[1]) >= FOUND_LEVEL


# ------------------------------------------------------------------ verdict


def test_the_best_level_decides_found_from_the_found_level_and_weak_from_the_weak_level() -> None:
    assert level_verdict(1.0) == level_verdict(FOUND_LEVEL) == FOUND
    assert level_verdict(FOUND_LEVEL - 1e-9) == level_verdict(WEAK_LEVEL) == WEAK
    assert level_verdict(WEAK_LEVEL - 1e-9) == level_verdict(0.0) == NOTHING_RELEVANT


def test_a_best_cosine_is_found_from_the_found_cosine_and_weak_from_the_weak_cosine_on_the_same_line() -> None:
    e5 = calibration_for("e5-small:384")
    found = e5.cosine_at(FOUND_LEVEL)
    weak = weak_cosine(found, e5.null_cosine)
    assert weak == pytest.approx(e5.cosine_at(WEAK_LEVEL))
    assert cosine_verdict(found, found, e5.null_cosine) == FOUND
    assert cosine_verdict(found - 1e-6, found, e5.null_cosine) == cosine_verdict(weak, found, e5.null_cosine) == WEAK
    assert cosine_verdict(weak - 1e-6, found, e5.null_cosine) == NOTHING_RELEVANT
    assert cosine_verdict(None, found, e5.null_cosine) == NOTHING_RELEVANT  # no hit at all


def test_found_in_one_corpus_is_found_even_when_another_could_not_be_checked() -> None:
    assert combined_verdict([NOTHING_RELEVANT, FOUND], any_failed=True) == FOUND
    assert combined_verdict([WEAK, NOTHING_RELEVANT], any_failed=False) == WEAK
    assert combined_verdict([NOTHING_RELEVANT, NOTHING_RELEVANT], any_failed=False) == NOTHING_RELEVANT


def test_without_a_finding_a_corpus_that_could_not_be_checked_makes_it_unknown() -> None:
    assert combined_verdict([NOTHING_RELEVANT], any_failed=True) == UNKNOWN
    assert combined_verdict([WEAK], any_failed=True) == UNKNOWN
    assert combined_verdict([], any_failed=False) == UNKNOWN


class Checked:
    """A corpus whose negative check answers with the given verdict."""

    def __init__(self, verdict: str):
        self.verdict = verdict

    def query(self, question: str, top_k: int = 8) -> list[dict]:
        return []

    def verify_negative_result(self, question: str) -> dict:
        safe = self.verdict == NOTHING_RELEVANT
        return {"safe_to_answer_negative": safe, "verdict": self.verdict, "reason": self.verdict, "results": []}


def test_the_only_corpus_failing_is_unknown_and_never_safe_to_answer_negative(caplog) -> None:
    retriever = FederatedRetriever(MemoryRegistry({"statutes": BrokenRetriever([])}))
    with caplog.at_level(logging.WARNING):
        check = retriever.verify_negative_result("Hundesteuer Kampfhund Hamburg")
    assert check["verdict"] == UNKNOWN and check["safe_to_answer_negative"] is False
    assert check["corpora_failed"] == ["statutes"] and check["corpora_checked"] == []
    assert "statutes: its check failed" in check["reason"]


def test_the_federated_check_combines_the_corpora_verdicts() -> None:
    def check(**verdicts: str) -> dict:
        registry = MemoryRegistry({c: Checked(v) for c, v in verdicts.items()})
        return FederatedRetriever(registry).verify_negative_result("Frage")

    nothing = check(statutes=NOTHING_RELEVANT, guideline=NOTHING_RELEVANT)
    assert nothing["verdict"] == NOTHING_RELEVANT and nothing["safe_to_answer_negative"] is True
    weak = check(statutes=NOTHING_RELEVANT, guideline=WEAK)
    assert weak["verdict"] == WEAK and weak["safe_to_answer_negative"] is False
    assert weak["corpora_with_findings"] == ["guideline"]
    found = check(statutes=FOUND, guideline=WEAK)
    assert found["verdict"] == FOUND and found["corpora_with_findings"] == ["statutes", "guideline"]


def test_a_corpus_check_without_a_verdict_counts_as_found_when_it_blocks() -> None:
    class Blocking(Checked):
        def verify_negative_result(self, question: str) -> dict:
            return {"safe_to_answer_negative": False, "reason": "robust", "results": []}

    check = FederatedRetriever(MemoryRegistry({"firm": Blocking(FOUND)})).verify_negative_result("Frage")
    assert check["verdict"] == FOUND


# ------------------------------------------------------------------ calibrations


def test_an_unmeasured_embedder_gets_the_default_null_cosine_and_one_warning(caplog) -> None:
    calibration_for.cache_clear()
    try:
        with caplog.at_level(logging.WARNING):
            first = calibration_for("gateway:some-new-model:1024")
            again = calibration_for("gateway:some-new-model:1024")
        assert first is again and not first.measured and first.null_cosine == ranking.DEFAULT_NULL_COSINE
        assert sum("not calibrated" in r.getMessage() for r in caplog.records) == 1
    finally:
        calibration_for.cache_clear()


def test_a_measured_gateway_model_is_keyed_by_its_model(monkeypatch) -> None:
    monkeypatch.setitem(ranking.NULL_COSINES, "gateway:text-embedding-3-large", 0.22)
    calibration_for.cache_clear()
    try:
        assert calibration_for("gateway:text-embedding-3-large:3072") == Calibration(
            "gateway:text-embedding-3-large:3072", 0.22
        )
        assert calibration_for("hashing:hashing-test:64").null_cosine == ranking.NULL_COSINES["hashing"]
    finally:
        calibration_for.cache_clear()


# ------------------------------------------------------------------ the verdict and its reason agree


class NoCheck:
    """A corpus without a negative check: it answers queries, it cannot say whether it holds nothing."""

    def query(self, question: str, top_k: int = 8) -> list[dict]:
        return []


def federated_check(**corpora: str) -> dict:
    """verify_negative_result over corpora given as a verdict, "raises" or "no check"."""
    made = {"raises": lambda: BrokenRetriever([]), "no check": NoCheck}
    registry = MemoryRegistry({c: made[v]() if v in made else Checked(v) for c, v in corpora.items()})
    return FederatedRetriever(registry).verify_negative_result("Frage")


def test_found_leads_its_reason_with_the_corpora_that_found() -> None:
    check = federated_check(statutes=WEAK, guideline=FOUND, firm="raises")
    assert check["verdict"] == FOUND
    assert check["reason"] == f"guideline: {FOUND} | statutes: {WEAK} | firm: {CHECK_FAILED_REASON}"


def test_weak_names_only_the_weak_corpora() -> None:
    check = federated_check(statutes=NOTHING_RELEVANT, guideline=WEAK)
    assert check["verdict"] == WEAK and check["reason"] == f"guideline: {WEAK}"
    assert NO_FINDINGS_REASON not in check["reason"]


def test_nothing_relevant_says_nothing_was_found() -> None:
    check = federated_check(statutes=NOTHING_RELEVANT, guideline=NOTHING_RELEVANT)
    assert check["verdict"] == NOTHING_RELEVANT and check["reason"] == NO_FINDINGS_REASON


def test_unknown_because_a_corpus_failed_names_it_and_never_says_nothing_was_found() -> None:
    check = federated_check(statutes=NOTHING_RELEVANT, firm="raises")
    assert check["verdict"] == UNKNOWN and check["reason"] == f"firm: {CHECK_FAILED_REASON}"


@pytest.mark.parametrize("corpora", [{}, {"statutes": "no check"}])
def test_unknown_because_nothing_was_checked_says_so_not_that_nothing_was_found(corpora) -> None:
    check = federated_check(**corpora)
    assert check["verdict"] == UNKNOWN and check["safe_to_answer_negative"] is False
    assert check["reason"] == NOTHING_CHECKED_REASON and "no robust hits" not in check["reason"]


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b", "c", "d"]),
                       st.sampled_from([FOUND, WEAK, NOTHING_RELEVANT, "raises", "no check"]), max_size=4))
def test_the_reason_never_contradicts_the_verdict(corpora) -> None:
    check = federated_check(**corpora)
    status, reason = check["verdict"], check["reason"]
    found = [c for c, v in corpora.items() if v == FOUND]
    failed = [c for c, v in corpora.items() if v == "raises"]
    assert (reason == NO_FINDINGS_REASON) == (status == NOTHING_RELEVANT)
    assert (CHECK_FAILED_REASON in reason) == bool(failed)
    assert (reason == NOTHING_CHECKED_REASON or reason.startswith(NOTHING_CHECKED_REASON + " | ")) == (
        status == UNKNOWN and not failed
    )
    if status == FOUND:
        assert any(reason.startswith(f"{c}: ") for c in found)
    if status == WEAK:
        assert all(v == WEAK for c, v in corpora.items() if f"{c}: " in reason)
    for corpus in check["corpora_with_findings"]:
        assert f"{corpus}: " in reason
