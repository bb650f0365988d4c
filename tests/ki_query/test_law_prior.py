"""The law prior: which law a question is about, learned from the laws' own text."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ki_core.embedding import HashingEmbedder
from ki_core.search import open_index
from ki_query.federation.corpus_retriever import CorpusRetriever, HybridWeights
from ki_query.federation.corpus_units import UnitStore
from ki_query.federation.registry import CorpusRegistry
from ki_query.law_prior import UNCERTAINTY, LawPrior, boosted, corpus_prior, terms, with_uncertainty
# The statute-excerpt corpus of the registry tests (SGB V, BGB, GG, ZPO), loaded the same way.
from tests.ki_query.federation.test_registry import loaded, sessions, settings  # noqa: F401

EMBEDDER = HashingEmbedder(dimensions=384)

TEXTS = {
    "KSchG": [
        "Die Kündigung des Arbeitsverhältnisses gegenüber einem Arbeitnehmer ist rechtsunwirksam, wenn sie sozial ungerechtfertigt ist.",
        "Will ein Arbeitnehmer geltend machen, dass eine Kündigung sozial ungerechtfertigt ist, so muss er innerhalb von drei Wochen Klage beim Arbeitsgericht erheben.",
    ],
    "WoEigG": [
        "Jeder Wohnungseigentümer ist gegenüber der Gemeinschaft der Wohnungseigentümer verpflichtet, die Beschlüsse einzuhalten.",
        "Die Kosten der Gemeinschaft der Wohnungseigentümer hat jeder Wohnungseigentümer nach dem Verhältnis seines Anteils zu tragen.",
    ],
}


def units(texts: dict[str, list[str]]) -> list[tuple[str, str, str]]:
    return [(law, f"{law}-{n}", text) for law, items in texts.items() for n, text in enumerate(items)]


def test_a_question_in_one_laws_words_leans_to_that_law() -> None:
    prior = LawPrior.learn(TEXTS, smoothing=5)
    labour = prior.distribution("Mein Arbeitgeber hat mir ohne Grund die Kündigung geschickt, ist das sozial?")
    housing = prior.distribution("Wie teilen die Wohnungseigentümer die Kosten?")
    assert max(labour, key=labour.get) == "KSchG" and labour["KSchG"] > 0.5
    assert max(housing, key=housing.get) == "WoEigG"
    assert abs(sum(labour.values()) - 1.0) < 1e-9


def test_a_question_of_unknown_words_gives_every_law_the_same_probability() -> None:
    prior = LawPrior.learn(TEXTS, smoothing=5)
    assert prior.distribution("Photovoltaik Einspeisevergütung") == {"KSchG": 0.5, "WoEigG": 0.5}


def test_a_law_named_by_its_abbreviation_wins_over_its_words() -> None:
    prior = LawPrior.learn(TEXTS, smoothing=5)
    named = prior.distribution("Gilt das WoEigG auch für die Kündigung eines Arbeitnehmers?")
    assert named["WoEigG"] > 0.9


def test_compounds_share_the_stem_of_their_parts() -> None:
    assert "kündig" in terms("Kündigungen") and "<kündig" in terms("Kündigungsschreiben")


def test_the_stored_model_is_reused_for_the_same_units_and_relearned_for_others(tmp_path: Path) -> None:
    first = corpus_prior(units(TEXTS), tmp_path)
    stored = list(tmp_path.glob("law-prior-*.npz"))
    again = corpus_prior(units(TEXTS), tmp_path)
    question = "Kündigung durch den Arbeitgeber"
    assert len(stored) == 1 and again.distribution(question) == first.distribution(question)
    changed = {**TEXTS, "KSchG": [*TEXTS["KSchG"], "Die Abfindung beträgt 0,5 Monatsverdienste."]}
    corpus_prior(units(changed), tmp_path)
    assert len(list(tmp_path.glob("law-prior-*.npz"))) == 2


@given(st.lists(st.floats(min_value=1e-6, max_value=1.0), min_size=2, max_size=20), st.floats(0.0, 5.0))
def test_an_even_prior_keeps_every_order(scores: list[float], strength: float) -> None:
    even = 1.0 / 3
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    lifted = [boosted(s, even, strength) for s in scores]
    assert sorted(range(len(scores)), key=lambda i: -lifted[i]) == order


# ------------------------------------------------------------- in the corpus retriever


@given(st.dictionaries(st.sampled_from(["BGB", "GG", "SGB V", "ZPO", "KSchG"]), st.floats(1e-3, 1.0), min_size=1))
def test_every_law_keeps_its_share_of_an_uncertain_prior_and_the_order_stays(weights: dict[str, float]) -> None:
    distribution = {law: w / sum(weights.values()) for law, w in weights.items()}
    mixed = with_uncertainty(distribution)
    assert sum(mixed.values()) == pytest.approx(sum(distribution.values()))
    assert min(mixed.values()) >= UNCERTAINTY / len(mixed) - 1e-12
    assert all((mixed[a] > mixed[b]) == (distribution[a] > distribution[b]) for a in mixed for b in mixed)


def test_the_retriever_boosts_by_a_prior_that_is_never_certain(settings, sessions, loaded) -> None:
    # A question in SGB V's words only: the retriever boosts by the learned prior mixed with the even one.
    question = "Krankenkasse Versicherte Festbetrag Arzneimittel"
    registry = CorpusRegistry(settings, sessions, EMBEDDER)
    try:
        retriever = registry.retriever("statutes")
        boosted_by = retriever.law_distribution(question)
        learned = corpus_prior(retriever.units.in_force_texts(), None).distribution(question)
    finally:
        registry.close()
    assert max(learned, key=learned.get) == max(boosted_by, key=boosted_by.get) == "SGB V"
    assert boosted_by == pytest.approx({law: 0.8 * p + 0.05 for law, p in learned.items()})
    assert min(boosted_by.values()) >= UNCERTAINTY / 4


def test_the_prior_lifts_the_hits_of_the_law_the_question_is_about(settings, sessions, loaded) -> None:
    question = "Welche Leistungen muss die Krankenkasse den Versicherten bezahlen?"
    with open_index(settings, index_name=loaded.index_name, read_only=True) as index:
        index.ensure()

        def ranked(strength: float) -> list[dict]:
            retriever = CorpusRetriever("statutes", index=index, units=UnitStore(sessions, "statutes"), embedder=EMBEDDER,
                                        containers=["BGB", "GG", "SGB V", "ZPO"], weights=HybridWeights(law_prior=strength))
            return retriever.query(question, top_k=50)

        plain, lifted = ranked(0.0), ranked(2.0)
    assert {h["metadata"]["record_id"] for h in plain} == {h["metadata"]["record_id"] for h in lifted}
    gain = {h["metadata"]["record_id"]: h["score"] for h in lifted}
    ratio = {h["metadata"]["container_id"]: gain[h["metadata"]["record_id"]] / h["score"] for h in plain}
    assert max(ratio, key=ratio.get) == "SGB V"
    def sgb_v_in_top_five(hits: list[dict]) -> int:
        return sum(h["metadata"]["container_id"] == "SGB V" for h in hits[:5])

    assert sgb_v_in_top_five(lifted) >= sgb_v_in_top_five(plain)


def test_the_registry_turns_the_prior_on_by_setting_and_stores_the_model_in_the_state_dir(settings, sessions, loaded) -> None:
    registry = CorpusRegistry(settings, sessions, EMBEDDER)
    try:
        retriever = registry.retriever("statutes")
        assert retriever.weights.law_prior == settings.retrieval.law_prior_strength > 0
        retriever.query("Krankenkasse Versicherte", top_k=5)
    finally:
        registry.close()
    assert len(list((Path(settings.state_dir) / "law-prior").glob("law-prior-*.npz"))) == 1
    off = CorpusRegistry(settings.model_copy(update={"retrieval": settings.retrieval.model_copy(update={"law_prior_strength": 0.0})}), sessions, EMBEDDER)
    try:
        assert off.retriever("statutes").law_distribution("Krankenkasse Versicherte") == {}
    finally:
        off.close()
