"""Weighing corpora by the law prior over all their laws (federation/corpus_prior.py, issue 44)."""

from __future__ import annotations

import json
import logging

import pytest

from ki_core.config import load_settings
from ki_core.db import make_engine, session_factory
from ki_core.embedding import HashingEmbedder
from ki_query.federation.corpus_loader import load_corpus
from ki_query.federation.corpus_prior import CorpusPrior
from ki_query.federation.ranking import hit_rank
from ki_query.federation.retriever import Address, FederatedRetriever
from ki_query.federation.search import FederatedSearch
from tests.ki_query.memory_corpora import FixedHitsRetriever, MemoryRegistry, fixture_records

EMBEDDER = HashingEmbedder(dimensions=384)
KRANKENBEHANDLUNG = "Anspruch der Versicherten auf Krankenbehandlung und ärztliche Behandlung"


def texts(*laws: str) -> list[tuple[str, str]]:
    return [(r["law"], r["text"]) for r in fixture_records(*laws)]


def test_the_corpus_a_question_is_about_keeps_its_levels_and_the_other_sinks() -> None:
    prior = CorpusPrior.learn({"miete": texts("BGB"), "kasse": texts("SGB V")}, strength=1.0)
    weights = prior(KRANKENBEHANDLUNG, ["miete", "kasse"])
    assert weights["kasse"] == 1.0 and 0.0 <= weights["miete"] < 0.5
    assert CorpusPrior(prior.prior, prior.holders, 0.5)(KRANKENBEHANDLUNG, ["miete", "kasse"])["miete"] > weights["miete"]
    assert CorpusPrior(prior.prior, prior.holders, 0.0)(KRANKENBEHANDLUNG, ["miete", "kasse"]) == {}
    # No word the model knows: an even prior over the laws, and a corpus per law weighs the same.
    assert prior("Xylophon", ["miete", "kasse"]) == {"miete": 1.0, "kasse": 1.0}
    assert prior(KRANKENBEHANDLUNG, ["kasse"]) == {}  # one corpus: nothing to weigh


def test_a_floor_keeps_a_corpus_the_prior_is_sure_against_at_that_weight_at_least() -> None:
    """A confidently wrong prior may reorder the corpora but never sink one out of the candidates."""
    learned = CorpusPrior.learn({"miete": texts("BGB"), "kasse": texts("SGB V")}, strength=1.0)
    bare = learned(KRANKENBEHANDLUNG, ["miete", "kasse"])["miete"]
    floored = CorpusPrior(learned.prior, learned.holders, 1.0, floor=0.5)(KRANKENBEHANDLUNG, ["miete", "kasse"])
    assert bare < 0.5 <= floored["miete"] < 1.0 and floored["kasse"] == 1.0
    assert floored["miete"] == pytest.approx(0.5 + 0.5 * bare)


def test_a_corpus_of_many_laws_is_no_likelier_than_one_of_few_before_a_word_is_read() -> None:
    """P(corpus) is the mean over its laws, not the sum: three laws beside one must not weigh the one
    down for a question the model cannot read (the sum sent 22 of 60 statutes heading questions to
    the 16 laws of extra16)."""
    prior = CorpusPrior.learn({"three": texts("BGB", "GG", "ZPO"), "one": texts("SGB V")}, strength=1.0)
    assert prior("Xylophon", ["three", "one"]) == {"three": 1.0, "one": 1.0}
    probabilities = prior.probabilities("Xylophon", ["three", "one"])
    assert probabilities["three"] == pytest.approx(probabilities["one"])


def test_a_law_held_by_two_corpora_counts_for_both() -> None:
    prior = CorpusPrior.learn({"a": texts("BGB"), "b": texts("BGB"), "c": texts("SGB V")}, strength=1.0)
    weights = prior("Kündigung des Mietverhältnisses über Wohnraum", ["a", "b", "c"])
    assert weights["a"] == weights["b"] == 1.0 and weights["c"] < 1.0


def level_hits(corpus: str, *levels: float) -> list[dict]:
    return [{"text": f"{corpus} {i}", "score": level, "rank_score": level, "retrieval_kinds": ["semantic"],
             "metadata": {"text_hash": f"{corpus}{i}", "container_id": corpus, "section_id": f"§ {i}"}}
            for i, level in enumerate(levels)]


def test_a_weighed_corpus_sinks_below_the_likely_one_and_its_lookups_keep_their_level() -> None:
    anchored = {"text": "anchored", "score": 1.0, "rank_score": 1.0, "retrieval_kinds": ["section_lookup"],
                "metadata": {"text_hash": "anchor", "container_id": "other", "section_id": "§ 9"}}
    registry = MemoryRegistry({
        "likely": FixedHitsRetriever(level_hits("likely", 0.6, 0.5)),
        "other": FixedHitsRetriever(level_hits("other", 0.7, 0.65), units={"other|§ 9": [anchored]}),
    })
    plain = FederatedRetriever(registry, min_hits_per_corpus=0)
    weighed = FederatedRetriever(registry, min_hits_per_corpus=0, corpus_weights=lambda q, ids: {"other": 0.5},
                                 anchors=lambda q: [Address("other", "§ 9", "other")])
    assert [h["text"] for h in plain.query("Frage", top_k=4)] == ["other 0", "other 1", "likely 0", "likely 1"]
    hits = weighed.query("Frage", top_k=5)
    assert [h["text"] for h in hits] == ["anchored", "likely 0", "likely 1", "other 0", "other 1"]
    assert hit_rank(hits[0]) == 1.0 and hit_rank(hits[3]) == pytest.approx(0.35)
    assert hits[3]["metadata"]["corpus_weight"] == 0.5 and "corpus_weight" not in hits[1]["metadata"]
    assert weighed.explain_selection("Frage")["corpus_weights"] == {"other": 0.5}
    assert weighed.diagnostics()["corpus_weights"] == "<lambda>"


def test_a_failing_weight_provider_weighs_nothing_and_says_so(caplog) -> None:
    def broken(question, corpus_ids):
        raise RuntimeError("prior not learned")

    registry = MemoryRegistry({"a": FixedHitsRetriever(level_hits("a", 0.6)), "b": FixedHitsRetriever(level_hits("b", 0.7))})
    with caplog.at_level(logging.WARNING):
        hits = FederatedRetriever(registry, corpus_weights=broken).query("Frage", top_k=2)
    assert [h["text"] for h in hits] == ["b 0", "a 0"]
    assert any("corpus weights skipped: RuntimeError: prior not learned" in r.getMessage() for r in caplog.records)


def first_of(corpus_id: str, hits: list) -> int:
    return next((i for i, h in enumerate(hits) if h.corpus_id == corpus_id), len(hits))


@pytest.fixture
def two_corpora(sqlite_url, tmp_path):
    """The excerpt's BGB and SGB V as two corpora (SQLite, embedded index), and settings to search them."""
    engine = make_engine(sqlite_url)
    sessions = session_factory(engine)
    settings = load_settings(state_dir=str(tmp_path / "state"), database={"url": sqlite_url},
                             embedding={"provider": "hashing", "model": "hashing"})
    for corpus_id, law in (("miete", "BGB"), ("kasse", "SGB V")):
        path = tmp_path / f"{corpus_id}.jsonl"
        path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in fixture_records(law)), encoding="utf-8")
        load_corpus(settings, sessions, EMBEDDER, corpus_id, [path])
    yield settings, sessions
    engine.dispose()


def test_the_federated_search_weighs_corpora_unless_turned_off(two_corpora) -> None:
    settings, sessions = two_corpora
    assert settings.federation.corpus_prior_strength == 0.05  # on by default, gently
    firmly = settings.model_copy(update={"federation": settings.federation.model_copy(
        update={"corpus_prior_strength": 1.0})})
    on = FederatedSearch.from_settings(firmly, sessions=sessions, embedder=EMBEDDER)
    unweighing = settings.model_copy(update={"federation": settings.federation.model_copy(
        update={"corpus_prior_strength": 0.0})})
    off = FederatedSearch.from_settings(unweighing, sessions=sessions, embedder=EMBEDDER)
    try:
        assert off.retriever().corpus_weights is None
        answer = on.ask(KRANKENBEHANDLUNG, ["user:anna"], top_k=8, explain=True)
        weights = answer.selection["corpus_weights"]
        assert weights["kasse"] == 1.0 and settings.federation.corpus_prior_floor <= weights["miete"] < 1.0
        assert all(h.metadata.get("corpus_weight") == weights["miete"] for h in answer.hits if h.corpus_id == "miete")
        unweighed = off.ask(KRANKENBEHANDLUNG, ["user:anna"], top_k=8)
        # The corpus the question is not about comes later than unweighed (or not at all).
        assert first_of("miete", answer.hits) > first_of("miete", unweighed.hits)
    finally:
        off.close()
        on.close()
