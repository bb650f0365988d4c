"""FederatedRetriever against spec/federation.md: selection, query, anchors, fusion, Verweise,
named corpus first, negative verification, diagnostics, provider errors.

Corpora are statute excerpts (tests/fixtures/statutes-excerpt.jsonl) in small real retrievers.
"""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ki_query.federation.errors import EmptyQuestion
from ki_query.federation.retriever import ALL_HITS_CAP, Address, FederatedRetriever
from tests.ki_query.memory_corpora import (
    BasicKeywordsRetriever,
    BrokenRetriever,
    FixedHitsRetriever,
    KeywordOnlyRetriever,
    KwargsRetriever,
    MemoryRegistry,
    MemoryRetriever,
    NoLookupRetriever,
    TopKOnlyRetriever,
    fixture_records,
    record_hit,
)

SGB_V = fixture_records("SGB V")
BGB = fixture_records("BGB")
GG = fixture_records("GG")
MIETE = "Kündigung des Mietverhältnisses über Wohnraum: Fristen nach Ablauf des übernächsten Monats"


def registry(**retrievers):
    return MemoryRegistry(retrievers)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def hit(corpus: str, text: str, score: float, *, rank_score: float | None = None, kinds=("semantic",),
        text_hash: str | None = None, section: str = "§ 1") -> dict:
    metadata = {"container_id": corpus.upper(), "section_id": section, "chunk_index_in_section": 0}
    if text_hash:
        metadata["text_hash"] = text_hash
    h = {"text": text, "score": score, "metadata": metadata, "retrieval_kinds": list(kinds)}
    if rank_score is not None:
        h["rank_score"] = rank_score
    return h


# ------------------------------------------------------------------ selection


def test_no_corpus_available_gives_an_empty_result() -> None:
    federation = FederatedRetriever(MemoryRegistry({}))
    assert federation.query(MIETE) == []
    assert federation.explain_selection(MIETE)["selected"] == []


def test_routed_is_the_routers_answer_restricted_to_available_corpora() -> None:
    federation = FederatedRetriever(
        registry(sgb=MemoryRetriever(SGB_V), bgb=MemoryRetriever(BGB)),
        router=lambda question, ids: ["bgb", "not-registered"],
    )
    explained = federation.explain_selection(MIETE)
    assert explained["routed"] == ["bgb"]
    assert explained["selected"] == ["bgb"]


def test_an_empty_routing_falls_back_to_all_available_corpora() -> None:
    federation = FederatedRetriever(
        registry(sgb=MemoryRetriever(SGB_V), bgb=MemoryRetriever(BGB)), router=lambda q, ids: ["unknown"]
    )
    assert federation.explain_selection(MIETE)["routed"] == ["sgb", "bgb"]


def test_required_corpora_come_from_anchor_targets_and_are_queried_even_when_not_routed() -> None:
    anchors = [Address("sgb", "§ 27", "SGB V"), Address("gone", "§ 1"), Address("sgb", "§ 12", "SGB V")]
    federation = FederatedRetriever(
        registry(sgb=MemoryRetriever(SGB_V), bgb=MemoryRetriever(BGB)),
        router=lambda q, ids: ["bgb"],
        anchors=lambda question: anchors,
    )
    explained = federation.explain_selection("Anspruch auf Krankenbehandlung")
    assert explained["required"] == ["sgb"]
    assert explained["selected"] == ["sgb", "bgb"]
    assert len(explained["anchor_targets"]) == 3
    corpora = {h["corpus_id"] for h in federation.query("Anspruch auf Krankenbehandlung")}
    assert "sgb" in corpora


def test_the_cap_limits_routed_corpora_but_never_drops_a_required_one() -> None:
    retrievers = {"sgb": MemoryRetriever(SGB_V), "bgb": MemoryRetriever(BGB), "gg": MemoryRetriever(GG)}
    capped = FederatedRetriever(registry(**retrievers), max_corpora_per_query=1)
    assert capped.explain_selection(MIETE)["selected"] == ["sgb"]
    required = FederatedRetriever(
        registry(**retrievers),
        max_corpora_per_query=1,
        anchors=lambda q: [Address("gg", "Art. 3", "GG"), Address("bgb", "§ 573c", "BGB")],
    )
    assert required.explain_selection(MIETE)["selected"] == ["gg", "bgb"]


def test_explain_selection_names_available_routed_required_selected_anchor_targets_and_what_was_left_out() -> None:
    federation = FederatedRetriever(
        registry(bgb=MemoryRetriever(BGB)), anchors=lambda q: [Address("bgb", "§ 573c", "BGB", max_chunks=1)]
    )
    explained = federation.explain_selection(MIETE)
    assert set(explained) == {"available", "routed", "required", "selected", "anchor_targets", "always_selected",
                              "left_out", "skipped"}
    assert explained["anchor_targets"][0]["section_id"] == "§ 573c"


# ------------------------------------------------------------------ query


def test_the_question_may_be_positional_or_a_keyword() -> None:
    federation = FederatedRetriever(registry(bgb=MemoryRetriever(BGB)))
    assert federation.query(MIETE) == federation.query(question=MIETE)
    assert federation.query(MIETE)[0]["metadata"]["section_id"] == "§ 573c"


def test_keywords_reach_only_retrievers_that_declare_them_or_take_kwargs() -> None:
    declares_top_k = KeywordOnlyRetriever(BGB)
    takes_all = KwargsRetriever(SGB_V)
    federation = FederatedRetriever(registry(bgb=declares_top_k, sgb=takes_all))
    hits = federation.query(MIETE, top_k=5, principals=["user:anna"], fetch_k=40)
    assert declares_top_k.calls == [{"top_k": 5}]
    assert takes_all.calls == [{"top_k": 5, "principals": ["user:anna"], "fetch_k": 40}]
    assert hits


def test_a_type_error_retries_with_only_top_k_where_and_fetch_k() -> None:
    basic = BasicKeywordsRetriever(BGB)
    federation = FederatedRetriever(registry(bgb=basic))
    hits = federation.query(MIETE, top_k=4, fetch_k=30, principals=["user:anna"], include_neighbors=True)
    assert basic.calls == [{"top_k": 4, "fetch_k": 30}]
    assert hits[0]["metadata"]["section_id"] == "§ 573c"


def test_a_second_type_error_falls_back_to_the_question_and_top_k() -> None:
    only_top_k = TopKOnlyRetriever(BGB)
    federation = FederatedRetriever(registry(bgb=only_top_k))
    hits = federation.query(MIETE, fetch_k=30, principals=["user:anna"])
    assert only_top_k.calls == [{"top_k": 8}]
    assert hits


def test_a_container_where_filter_reaches_only_the_corpus_whose_default_container_it_is() -> None:
    sgb, mixed = MemoryRetriever(SGB_V), MemoryRetriever(BGB + SGB_V)
    federation = FederatedRetriever(MemoryRegistry({"sgb": sgb, "mixed": mixed}, defaults={"sgb": "SGB V"}))
    federation.query("Leistungen der Krankenkasse", where={"container_id": "SGB V"})
    assert sgb.calls[0]["where"] == {"container_id": "SGB V"}
    assert mixed.calls[0]["where"] is None


def test_one_failing_corpus_is_logged_with_its_exception_type_and_the_others_answer(caplog) -> None:
    federation = FederatedRetriever(registry(broken=BrokenRetriever(BGB), bgb=MemoryRetriever(BGB)))
    with caplog.at_level(logging.WARNING):
        hits = federation.query(MIETE)
    assert hits and {h["corpus_id"] for h in hits} == {"bgb"}
    assert any("broken" in m and "ConnectionError" in m and "unreachable" in m for m in warnings_of(caplog))


def test_every_hit_is_tagged_with_its_corpus_also_in_metadata_unless_set() -> None:
    preset = hit("x", "Die Würde des Menschen ist unantastbar.", 0.9)
    preset["metadata"]["corpus_id"] = "grundgesetz"
    federation = FederatedRetriever(registry(gg=FixedHitsRetriever([preset]), bgb=MemoryRetriever(BGB)))
    hits = federation.query("Würde des Menschen Mietverhältnis Kündigung")
    by_corpus = {h["corpus_id"]: h for h in hits}
    assert by_corpus["gg"]["metadata"]["corpus_id"] == "grundgesetz"
    assert by_corpus["bgb"]["metadata"]["corpus_id"] == "bgb"


# ------------------------------------------------------------------ anchors


def test_anchor_hits_keep_score_one_and_gain_norm_anchor_and_section_lookup() -> None:
    federation = FederatedRetriever(
        registry(sgb=MemoryRetriever(SGB_V)), anchors=lambda q: [Address("sgb", "§ 12", "SGB V")]
    )
    hits = federation.query("Wirtschaftlichkeitsgebot", top_k=10)
    anchored = [h for h in hits if "norm_anchor" in h["retrieval_kinds"]]
    assert [h["metadata"]["subsection"] for h in anchored] == ["1", "2"]  # max_chunks defaults to 2
    assert all(h["score"] == 1.0 and "section_lookup" in h["retrieval_kinds"] for h in anchored)
    assert hits[0] in anchored


def test_an_anchor_that_matches_nothing_warns_naming_corpus_container_and_section(caplog) -> None:
    federation = FederatedRetriever(
        registry(sgb=MemoryRetriever(SGB_V)), anchors=lambda q: [Address("sgb", "§ 999", "SGB V")]
    )
    with caplog.at_level(logging.WARNING):
        federation.query("Krankenbehandlung")
    assert any("norm anchor matched nothing" in m and "sgb" in m and "SGB V" in m and "§ 999" in m
               for m in warnings_of(caplog))


def test_an_anchor_on_a_retriever_without_get_units_is_skipped_silently(caplog) -> None:
    federation = FederatedRetriever(
        registry(firm=NoLookupRetriever(BGB)), anchors=lambda q: [Address("firm", "§ 573c", "BGB")]
    )
    with caplog.at_level(logging.WARNING):
        hits = federation.query(MIETE)
    assert hits and not any("norm_anchor" in h["retrieval_kinds"] for h in hits)
    assert warnings_of(caplog) == []


def test_an_anchor_lookup_that_raises_is_a_warning_and_skipped(caplog) -> None:
    broken = BrokenRetriever(BGB)
    federation = FederatedRetriever(
        registry(broken=broken, bgb=MemoryRetriever(BGB)), anchors=lambda q: [Address("broken", "§ 1", "BGB")]
    )
    with caplog.at_level(logging.WARNING):
        hits = federation.query(MIETE)
    assert hits
    assert any("norm anchor" in m and "ConnectionError" in m for m in warnings_of(caplog))


# ------------------------------------------------------------------ fusion


def test_the_same_chunk_from_search_and_anchor_merges_with_the_union_of_kinds() -> None:
    found = record_hit(SGB_V[0], score=0.42, kinds=["semantic", "lexical"])
    retriever = FixedHitsRetriever([found], units={"SGB V|§ 1": [record_hit(SGB_V[0], score=1.0, kinds=["section_lookup"])]})
    federation = FederatedRetriever(registry(sgb=retriever), anchors=lambda q: [Address("sgb", "§ 1", "SGB V")])
    hits = federation.query("Solidargemeinschaft")
    assert len(hits) == 1
    assert hits[0]["score"] == 1.0
    assert hits[0]["retrieval_kinds"] == ["section_lookup", "norm_anchor", "semantic", "lexical"]


def test_without_text_hash_the_key_is_the_address_and_the_first_160_characters() -> None:
    long_text = "Die Krankenkasse " + "x" * 200
    twin = long_text[:170] + " anders endend"
    other_start = "Eine andere Krankenkasse " + "x" * 200
    hits = [hit("sgb", long_text, 0.3), hit("sgb", twin, 0.6), hit("sgb", other_start, 0.5)]
    federation = FederatedRetriever(registry(sgb=FixedHitsRetriever(hits)))
    fused = federation.query("Krankenkasse")
    assert [h["text"] for h in fused] == [twin, other_start]
    assert fused[0]["score"] == 0.6


def test_the_key_reads_container_and_section_from_the_hit_when_metadata_lacks_them() -> None:
    a = {"text": "§ 1 Abs. 1 Satz 1", "score": 0.5, "container_id": "BGB", "section_id": "§ 1"}
    b = {"text": "§ 1 Abs. 1 Satz 1", "score": 0.4, "container_id": "ZPO", "section_id": "§ 1"}
    federation = FederatedRetriever(registry(mixed=FixedHitsRetriever([a, b])))
    assert len(federation.query("Satz")) == 2


def test_the_higher_rank_wins_reading_rank_score_before_score() -> None:
    by_score = hit("sgb", "Sachleistung", 0.9, rank_score=0.2, text_hash="h1")
    by_rank = hit("sgb", "Sachleistung", 0.1, rank_score=0.7, text_hash="h1", kinds=("lexical",))
    federation = FederatedRetriever(registry(sgb=FixedHitsRetriever([by_score, by_rank])))
    [merged] = federation.query("Sachleistung")
    assert merged["rank_score"] == 0.7
    assert merged["retrieval_kinds"] == ["lexical", "semantic"]


def test_the_sort_is_stable_and_an_unreadable_rank_counts_as_zero() -> None:
    hits = [
        hit("a", "erster gleichauf", 0.5, text_hash="1"),
        {"text": "kaputt", "score": "n/a", "metadata": {"text_hash": "2"}, "retrieval_kinds": []},
        hit("a", "zweiter gleichauf", 0.5, text_hash="3"),
        hit("a", "vorn", 0.8, text_hash="4"),
    ]
    federation = FederatedRetriever(registry(a=FixedHitsRetriever(hits)))
    assert [h["text"] for h in federation.query("x", top_k=10)] == ["vorn", "erster gleichauf", "zweiter gleichauf", "kaputt"]


# ------------------------------------------------------------------ Verweise


def cited_by_first_hit(targets):
    return lambda hits, corpora: targets


def test_a_cited_norm_is_fetched_at_score_and_rank_score_050_with_kinds_exactly_verweis() -> None:
    federation = FederatedRetriever(
        registry(sgb=MemoryRetriever(SGB_V)),
        verweise=cited_by_first_hit([Address("sgb", "§ 12", "SGB V")]),
    )
    hits = federation.query("Solidargemeinschaft Eigenkompetenz", top_k=20)
    assert all(h["metadata"]["section_id"] == "§ 1" for h in hits[:-1])
    cited = [h for h in hits if h["metadata"]["section_id"] == "§ 12"]
    assert len(cited) == 1  # max_chunks defaults to 1
    assert cited[0]["score"] == cited[0]["rank_score"] == 0.50
    assert cited[0]["retrieval_kinds"] == ["verweis"]


def test_at_most_max_verweis_normen_targets_are_fetched_and_zero_disables() -> None:
    targets = [Address("sgb", s, "SGB V") for s in ("§ 1", "§ 11", "§ 12", "§ 13", "§ 27")]
    unrelated = "Apothekenpflichtige Arzneimittel"
    limited = FederatedRetriever(registry(sgb=MemoryRetriever(SGB_V)), verweise=cited_by_first_hit(targets),
                                 max_verweis_normen=2)
    cited = [h for h in limited.query(unrelated, top_k=20) if h["retrieval_kinds"] == ["verweis"]]
    assert [h["metadata"]["section_id"] for h in cited] == ["§ 1", "§ 11"]
    disabled = FederatedRetriever(registry(sgb=MemoryRetriever(SGB_V)), verweise=cited_by_first_hit(targets),
                                  max_verweis_normen=0)
    assert not [h for h in disabled.query(unrelated, top_k=20) if "verweis" in h["retrieval_kinds"]]


def test_the_container_is_mandatory_where_the_corpus_has_a_default_container() -> None:
    units = {
        "SGB V|§ 1": [record_hit(SGB_V[0], score=1.0, kinds=["section_lookup"])],
        "None|§ 1": [record_hit(BGB[0], score=1.0, kinds=["section_lookup"])],
    }
    retriever = FixedHitsRetriever([record_hit(SGB_V[1], score=0.3, kinds=["lexical"])], units=units)
    federation = FederatedRetriever(
        MemoryRegistry({"sgb": retriever}, defaults={"sgb": "SGB V"}),
        verweise=cited_by_first_hit([Address("sgb", "§ 1")]),
    )
    hits = federation.query("Leistungen")
    assert retriever.unit_calls == [("§ 1", "SGB V", None, 1)]
    assert [h["metadata"]["container_id"] for h in hits if h["retrieval_kinds"] == ["verweis"]] == ["SGB V"]


def test_an_empty_reference_lookup_is_not_a_warning_and_foreign_targets_are_skipped(caplog) -> None:
    bgb = FixedHitsRetriever([record_hit(BGB[3], score=0.4, kinds=["lexical"])])
    federation = FederatedRetriever(
        registry(bgb=bgb),
        verweise=cited_by_first_hit([Address("bgb", "§ 279", "BGB"), Address("elsewhere", "§ 1", "X")]),
    )
    with caplog.at_level(logging.WARNING):
        hits = federation.query("Mietsache")
    assert len(hits) == 1
    assert bgb.unit_calls == [("§ 279", "BGB", None, 1)]
    assert warnings_of(caplog) == []


def test_a_reference_into_a_corpus_without_get_units_is_skipped(caplog) -> None:
    federation = FederatedRetriever(
        registry(firm=NoLookupRetriever(BGB)), verweise=cited_by_first_hit([Address("firm", "§ 931", "BGB")])
    )
    with caplog.at_level(logging.WARNING):
        hits = federation.query(MIETE)
    assert hits and not any("verweis" in h["retrieval_kinds"] for h in hits)
    assert warnings_of(caplog) == []


def test_a_cited_norm_already_found_keeps_its_rank_and_gains_verweis() -> None:
    federation = FederatedRetriever(
        registry(bgb=MemoryRetriever(BGB)), verweise=cited_by_first_hit([Address("bgb", "§ 573c", "BGB", "1")])
    )
    hits = federation.query(MIETE)
    top = hits[0]
    assert top["metadata"]["section_id"] == "§ 573c" and top["score"] > 0.5
    assert top["retrieval_kinds"] == ["lexical", "verweis"]


def test_reference_following_reads_the_fused_hits() -> None:
    seen = []

    def verweise(hits, corpora):
        seen.append(([h["metadata"].get("section_id") for h in hits], corpora))
        return []

    federation = FederatedRetriever(
        registry(bgb=MemoryRetriever(BGB)), verweise=verweise, anchors=lambda q: [Address("bgb", "§ 931", "BGB")]
    )
    federation.query(MIETE)
    sections, corpora = seen[0]
    assert sections[0] == "§ 931" and "§ 573c" in sections
    assert corpora == ["bgb"]


# ------------------------------------------------------------------ named corpus first


def test_the_best_hit_of_a_named_corpus_moves_to_the_front_at_the_maximum_rank() -> None:
    strong = [hit("big", f"Treffer {i}", 0.9 - i / 100, text_hash=f"b{i}") for i in range(5)]
    weak = [hit("small", "Arzneimittel-Richtlinie Abschnitt F", 0.4, text_hash="s1")]
    federation = FederatedRetriever(
        registry(big=FixedHitsRetriever(strong), small=FixedHitsRetriever(weak)),
        named_corpora=lambda q, ids: ["small"],
        min_hits_per_corpus=0,
    )
    hits = federation.query("Was regelt die Arzneimittel-Richtlinie?", top_k=6)
    assert hits[0]["corpus_id"] == "small"
    assert hits[0]["rank_score"] == 0.9
    assert len(hits) == 6 and [h["text"] for h in hits[1:]] == [f"Treffer {i}" for i in range(5)]


@pytest.mark.parametrize(
    "named",
    [["big", "small"], ["big"], []],
    ids=["names every corpus", "top hit already named", "names none"],
)
def test_named_corpus_first_changes_nothing_when_all_or_the_top_one_or_none_are_named(named) -> None:
    strong = [hit("big", "vorn", 0.9, text_hash="b")]
    weak = [hit("small", "hinten", 0.4, text_hash="s")]
    federation = FederatedRetriever(
        registry(big=FixedHitsRetriever(strong), small=FixedHitsRetriever(weak)), named_corpora=lambda q, ids: named
    )
    assert [h["text"] for h in federation.query("Frage")] == ["vorn", "hinten"]


def test_named_corpus_first_changes_nothing_when_the_named_corpus_was_cut() -> None:
    strong = [hit("big", f"Treffer {i}", 0.9, text_hash=f"b{i}") for i in range(3)]
    weak = [hit("small", "zu schwach", 0.01, text_hash="s")]
    federation = FederatedRetriever(
        registry(big=FixedHitsRetriever(strong), small=FixedHitsRetriever(weak)), named_corpora=lambda q, ids: ["small"]
    )
    assert [h["corpus_id"] for h in federation.query("Frage", top_k=2)] == ["big", "big"]


def test_named_corpus_provider_error_is_a_warning_and_the_order_stays(caplog) -> None:
    def named(question, ids):
        raise LookupError("names table missing")

    strong = [hit("big", "vorn", 0.9, text_hash="b")]
    weak = [hit("small", "hinten", 0.4, text_hash="s")]
    federation = FederatedRetriever(
        registry(big=FixedHitsRetriever(strong), small=FixedHitsRetriever(weak)), named_corpora=named
    )
    with caplog.at_level(logging.WARNING):
        assert [h["text"] for h in federation.query("Frage")] == ["vorn", "hinten"]
    assert any("LookupError" in m and "names table missing" in m for m in warnings_of(caplog))


def test_a_single_hit_is_never_reordered() -> None:
    federation = FederatedRetriever(
        registry(big=FixedHitsRetriever([hit("big", "allein", 0.9)]), small=FixedHitsRetriever([])),
        named_corpora=lambda q, ids: ["small"],
    )
    assert [h["text"] for h in federation.query("Frage")] == ["allein"]


# ------------------------------------------------------------------ negative verification


def test_a_corpus_with_robust_hits_blocks_the_negative_answer() -> None:
    federation = FederatedRetriever(
        registry(bgb=MemoryRetriever(BGB, negative_threshold=0.5), gg=MemoryRetriever(GG, negative_threshold=0.5))
    )
    verdict = federation.verify_negative_result("Kündigung Wohnraum Kalendermonats")
    assert verdict["safe_to_answer_negative"] is False
    assert verdict["reason"].startswith("bgb: ") and " | " not in verdict["reason"]
    assert verdict["strong_result_count"] == 1
    assert verdict["corpora_checked"] == ["bgb", "gg"]
    assert verdict["corpora_with_findings"] == ["bgb"]
    assert verdict["results"] and all(h["corpus_id"] == "bgb" for h in verdict["results"])


def test_reasons_of_several_blocking_corpora_are_joined() -> None:
    federation = FederatedRetriever(registry(a=MemoryRetriever(BGB), b=MemoryRetriever(BGB)))
    verdict = federation.verify_negative_result("Kündigung Wohnraum Kalendermonats")
    assert verdict["reason"].count(" | ") == 1 and verdict["strong_result_count"] == 2


def test_nothing_robust_anywhere_is_safe_with_the_default_reason() -> None:
    federation = FederatedRetriever(registry(bgb=MemoryRetriever(BGB), gg=MemoryRetriever(GG)))
    verdict = federation.verify_negative_result("Photovoltaik Einspeisevergütung Netzbetreiber")
    assert verdict["safe_to_answer_negative"] is True
    assert "no robust hits" in verdict["reason"]
    assert verdict["strong_result_count"] == 0 and verdict["corpora_with_findings"] == []


def test_negative_check_retries_with_only_the_question_and_skips_a_raising_corpus(caplog) -> None:
    class QuestionOnly(MemoryRetriever):
        def verify_negative_result(self, question):  # takes no keywords
            return super().verify_negative_result(question)

    federation = FederatedRetriever(registry(bgb=QuestionOnly(BGB), broken=BrokenRetriever(BGB)))
    with caplog.at_level(logging.WARNING):
        verdict = federation.verify_negative_result("Kündigung Wohnraum Kalendermonats", principals=["user:anna"])
    assert verdict["corpora_checked"] == ["bgb"] and verdict["safe_to_answer_negative"] is False
    assert any("broken" in m and "ConnectionError" in m for m in warnings_of(caplog))


# ------------------------------------------------------------------ diagnostics and provider errors


def test_diagnostics_add_federated_router_quota_and_anchor_facts_to_the_registrys() -> None:
    def law_router(question, ids):
        return ids

    federation = FederatedRetriever(registry(bgb=MemoryRetriever(BGB)), router=law_router, min_hits_per_corpus=3)
    assert federation.diagnostics() == {
        "corpora": ["bgb"],
        "federated": True,
        "router": "law_router",
        "min_hits_per_corpus": 3,
        "anchors_configured": False,
        "corpus_weights": None,
    }
    anchored = FederatedRetriever(registry(bgb=MemoryRetriever(BGB)), anchors=lambda q: [])
    assert anchored.diagnostics()["anchors_configured"] is True


def test_incomparable_embeddings_are_logged_at_start_and_retrieval_keeps_running(caplog) -> None:
    reg = MemoryRegistry({"bgb": MemoryRetriever(BGB)}, warning="embedding signatures differ (a=e5, b=use)")
    with caplog.at_level(logging.WARNING):
        federation = FederatedRetriever(reg)
    assert any("signatures differ" in m for m in warnings_of(caplog))
    assert federation.query(MIETE)


@pytest.mark.parametrize("provider", ["router", "anchors", "verweise"])
def test_a_raising_provider_skips_its_step_with_a_warning_naming_the_exception(provider, caplog) -> None:
    def broken(*args):
        raise ValueError(f"{provider} data corrupt")

    federation = FederatedRetriever(registry(bgb=MemoryRetriever(BGB)), **{provider: broken})
    with caplog.at_level(logging.WARNING):
        hits = federation.query(MIETE)
    assert hits[0]["metadata"]["section_id"] == "§ 573c"
    assert any("ValueError" in m and f"{provider} data corrupt" in m for m in warnings_of(caplog))


def test_a_registry_that_cannot_list_corpora_gives_an_empty_result_not_an_error(caplog) -> None:
    class DownRegistry(MemoryRegistry):
        def available(self):
            raise OSError("database is down")

    with caplog.at_level(logging.WARNING):
        assert FederatedRetriever(DownRegistry({})).query(MIETE) == []
    assert any("OSError" in m for m in warnings_of(caplog))


# ------------------------------------------------------------------ the firm's index and corpora that cannot answer


class StatefulRegistry(MemoryRegistry):
    """A registry that, like CorpusRegistry, names an always-asked corpus and corpora that cannot answer."""

    def __init__(self, retrievers, *, always=(), cannot=None, **kwargs):
        super().__init__(retrievers, **kwargs)
        self.always = list(always)
        self.cannot = dict(cannot or {})

    def always_selected(self):
        return [c for c in self.always if c in self.available()]

    def cannot_answer(self, corpus_id):
        reason = self.cannot.get(corpus_id)
        if isinstance(reason, Exception):
            raise reason
        return reason


def five_statute_corpora() -> dict:
    return {f"statutes-{n}": MemoryRetriever(BGB) for n in range(1, 6)}


FIRM_MEMO = "Gutachten: fristlose Kündigung des Arbeitnehmers wegen Weitergabe vertraulicher Daten an Dritte"


def test_the_firm_index_is_selected_beside_five_corpora_and_never_counts_against_the_cap() -> None:
    firm = FixedHitsRetriever([hit("firm", FIRM_MEMO, 0.7, text_hash="memo")])
    federation = FederatedRetriever(StatefulRegistry({**five_statute_corpora(), "firm": firm}, always=["firm"]))
    question = "Kann der Arbeitgeber wegen Weitergabe vertraulicher Daten fristlos kündigen?"
    explained = federation.explain_selection(question)
    assert explained["selected"] == ["statutes-1", "statutes-2", "statutes-3", "statutes-4", "firm"]
    assert explained["always_selected"] == ["firm"]
    assert explained["left_out"] == {"statutes-5": "over the corpus cap (max_corpora_per_query 4)"}
    assert [h["text"] for h in federation.query(question, top_k=3)][0] == FIRM_MEMO


def test_the_firm_index_stays_outside_the_cap_when_a_router_or_anchors_pick_others() -> None:
    firm = FixedHitsRetriever([hit("firm", FIRM_MEMO, 0.7, text_hash="memo")])
    corpora = {**five_statute_corpora(), "firm": firm}
    federation = FederatedRetriever(
        StatefulRegistry(corpora, always=["firm"]),
        router=lambda q, ids: ["statutes-5"],
        anchors=lambda q: [Address("statutes-1", "§ 573c", "BGB"), Address("statutes-2", "§ 573c", "BGB")],
        max_corpora_per_query=1,
    )
    explained = federation.explain_selection(MIETE)
    assert explained["selected"] == ["statutes-1", "statutes-2", "firm"]
    assert explained["left_out"]["statutes-5"].startswith("over the corpus cap")
    assert explained["left_out"]["statutes-3"] == "not routed: the question names other corpora"


def test_a_caller_naming_other_corpora_only_does_not_get_the_firm_index() -> None:
    class Restricted(StatefulRegistry):
        def available(self):
            return ["statutes-1"]

    corpora = {**five_statute_corpora(), "firm": NoLookupRetriever(BGB)}
    federation = FederatedRetriever(Restricted(corpora, always=["firm"]))
    assert federation.explain_selection(MIETE)["selected"] == ["statutes-1"]


def test_a_corpus_that_cannot_answer_is_not_selected_takes_no_slot_and_the_explanation_says_why() -> None:
    never, asked = MemoryRetriever(BGB), MemoryRetriever(BGB)
    federation = FederatedRetriever(
        StatefulRegistry({"alt": never, "bgb": asked}, cannot={"alt": "indexed with use:512, questions with e5:384"}),
        max_corpora_per_query=1,
    )
    explained = federation.explain_selection(MIETE)
    assert explained["available"] == ["bgb"] and explained["selected"] == ["bgb"]
    assert explained["left_out"] == {"alt": "indexed with use:512, questions with e5:384"}
    assert federation.query(MIETE) and never.calls == [] and asked.calls


def test_a_corpus_whose_check_raises_is_left_out_with_a_warning(caplog) -> None:
    federation = FederatedRetriever(
        StatefulRegistry({"down": MemoryRetriever(BGB), "bgb": MemoryRetriever(BGB)},
                         cannot={"down": ConnectionError("node gone")})
    )
    with caplog.at_level(logging.WARNING):
        hits = federation.query(MIETE)
    assert {h["corpus_id"] for h in hits} == {"bgb"}
    assert "ConnectionError" in federation.explain_selection(MIETE)["left_out"]["down"]
    assert any("answerability check of down" in m and "node gone" in m for m in warnings_of(caplog))


@settings(max_examples=200, deadline=None)
@given(
    corpora=st.integers(1, 7),
    cap=st.integers(1, 5),
    unanswerable=st.sets(st.integers(0, 6)),
    anchored=st.lists(st.integers(0, 6), max_size=4),
    routed=st.lists(st.integers(0, 6), max_size=4),
    with_firm=st.booleans(),
)
def test_selection_rules_hold_for_every_registry(corpora, cap, unanswerable, anchored, routed, with_firm) -> None:
    ids = [f"c{i}" for i in range(corpora)] + (["firm"] if with_firm else [])
    cannot = {f"c{i}": "no index" for i in unanswerable if i < corpora}
    required = [f"c{i}" for i in dict.fromkeys(anchored) if i < corpora and f"c{i}" not in cannot]
    federation = FederatedRetriever(
        StatefulRegistry({c: FixedHitsRetriever([]) for c in ids}, always=["firm"], cannot=cannot),
        router=lambda q, available: [f"c{i}" for i in routed],
        anchors=lambda q: [Address(f"c{i}", "§ 1") for i in anchored],
        max_corpora_per_query=cap,
    )
    explained = federation.explain_selection("Frage")
    selected, left_out = explained["selected"], explained["left_out"]
    assert not set(selected) & set(cannot)
    assert with_firm == ("firm" in selected)
    assert set(required) <= set(selected)
    assert len([c for c in selected if c != "firm"]) <= max(cap, len(required))
    assert set(selected) | set(left_out) == set(ids) and not set(selected) & set(left_out)


# ------------------------------------------------------------------ providers answering with dicts or garbage


def test_anchor_and_verweis_providers_may_answer_with_plain_dicts() -> None:
    federation = FederatedRetriever(
        registry(sgb=MemoryRetriever(SGB_V)),
        anchors=lambda q: [{"corpus_id": "sgb", "container_id": "SGB V", "section_id": "§ 12", "subsection": 1}],
        verweise=lambda hits, ids: [{"corpus_id": "sgb", "container_id": "SGB V", "section_id": "§ 27"}],
    )
    hits = federation.query("Wirtschaftlichkeitsgebot", top_k=10)
    anchored = [h for h in hits if "norm_anchor" in h["retrieval_kinds"]]
    assert [(h["metadata"]["section_id"], h["metadata"]["subsection"]) for h in anchored] == [("§ 12", "1")]
    assert [h["metadata"]["section_id"] for h in hits if h["retrieval_kinds"] == ["verweis"]] == ["§ 27"]
    assert federation.explain_selection("Wirtschaftlichkeitsgebot")["anchor_targets"] == [
        {"corpus_id": "sgb", "section_id": "§ 12", "container_id": "SGB V", "subsection": "1", "max_chunks": None}
    ]


@pytest.mark.parametrize(
    ("provider", "answer"),
    [
        ("router", [{"corpus": "bgb"}]),
        ("router", 42),
        ("anchors", "§ 573c BGB"),
        ("anchors", [{"section_id": "§ 573c"}, 7]),
        ("verweise", {"corpus_id": "bgb", "section_id": "§ 573c"}),
        ("verweise", [None]),
        ("named_corpora", [["bgb"]]),
    ],
    ids=["router dicts", "router int", "anchors str", "anchors bad entries", "verweise one dict", "verweise None entry",
         "named nested list"],
)
def test_a_provider_answering_garbage_is_skipped_with_a_warning_and_a_note(provider, answer, caplog) -> None:
    federation = FederatedRetriever(registry(bgb=MemoryRetriever(BGB), gg=MemoryRetriever(GG)),
                                    **{provider: lambda *args: answer})
    with caplog.at_level(logging.WARNING):
        hits = federation.query(MIETE)
    assert hits[0]["metadata"]["section_id"] == "§ 573c"
    assert warnings_of(caplog)
    noted = federation.explain_selection(MIETE)["skipped"]
    assert noted == [m.removeprefix("federation: ") for m in warnings_of(caplog)]


def test_good_entries_of_a_provider_answer_are_kept_and_the_bad_ones_named(caplog) -> None:
    federation = FederatedRetriever(
        registry(sgb=MemoryRetriever(SGB_V)),
        anchors=lambda q: [{"corpus_id": "sgb", "container_id": "SGB V", "section_id": "§ 12"}, {"corpus_id": "sgb"}],
    )
    with caplog.at_level(logging.WARNING):
        hits = federation.query("Wirtschaftlichkeitsgebot", top_k=10)
    assert {h["metadata"]["section_id"] for h in hits if "norm_anchor" in h["retrieval_kinds"]} == {"§ 12"}
    [warning] = warnings_of(caplog)
    assert "anchor provider: 1 unreadable addresses skipped" in warning and "section_id" in warning


@pytest.mark.parametrize("provider", ["router", "anchors", "verweise", "named_corpora"])
def test_a_raising_provider_is_noted_in_the_explanation_of_the_query(provider) -> None:
    def broken(*args):
        raise RuntimeError(f"{provider} is down")

    federation = FederatedRetriever(registry(bgb=MemoryRetriever(BGB), gg=MemoryRetriever(GG)), **{provider: broken})
    assert federation.query(MIETE)[0]["metadata"]["section_id"] == "§ 573c"
    [note] = federation.explain_selection(MIETE)["skipped"]
    assert "skipped: RuntimeError" in note and f"{provider} is down" in note


def test_a_reference_lookup_that_raises_leaves_the_answer_intact_with_a_warning(caplog) -> None:
    class LookupDown(MemoryRetriever):
        def get_units(self, *args, **kwargs):
            raise TimeoutError("unit store timed out")

    federation = FederatedRetriever(
        registry(bgb=LookupDown(BGB)), verweise=cited_by_first_hit([Address("bgb", "§ 573c", "BGB", "2")])
    )
    with caplog.at_level(logging.WARNING):
        hits = federation.query(MIETE)
    assert hits[0]["metadata"]["section_id"] == "§ 573c" and not any("verweis" in h["retrieval_kinds"] for h in hits)
    assert any("reference bgb: BGB § 573c Abs. 2 skipped: TimeoutError: unit store timed out" in m
               for m in warnings_of(caplog))
    assert federation.explain_selection(MIETE)["skipped"]


@pytest.mark.parametrize("garbage", ["not a list", [{"text": "ok", "metadata": "flat"}], [None]],
                         ids=["a string", "metadata not a mapping", "a None hit"])
def test_a_corpus_answering_garbage_is_skipped_and_the_others_answer(garbage, caplog) -> None:
    class Garbage:
        def query(self, question, top_k=8):
            return garbage

    federation = FederatedRetriever(registry(odd=Garbage(), bgb=MemoryRetriever(BGB)))
    with caplog.at_level(logging.WARNING):
        hits = federation.query(MIETE)
    assert {h["corpus_id"] for h in hits} == {"bgb"}
    assert any("corpus odd skipped: TypeError" in m for m in warnings_of(caplog))


# ------------------------------------------------------------------ limits


def test_max_final_results_reaches_retrievers_that_take_it_and_sets_the_limit() -> None:
    takes_all = KwargsRetriever(BGB + SGB_V)
    federation = FederatedRetriever(registry(all=takes_all))
    hits = federation.query("Kündigung Krankenkasse Leistungen Versicherten", top_k=20, max_final_results=3)
    assert takes_all.calls == [{"top_k": 20, "max_final_results": 3}]
    assert len(hits) == 3


def test_without_a_limit_every_fused_hit_is_returned_up_to_the_documented_cap() -> None:
    many = [hit("big", f"Treffer {i}", 0.9 - i / 10_000, text_hash=f"h{i}") for i in range(ALL_HITS_CAP + 40)]
    federation = FederatedRetriever(registry(big=FixedHitsRetriever(many[:30]), more=FixedHitsRetriever(many[30:])))
    assert len(FederatedRetriever(registry(big=FixedHitsRetriever(many[:30]))).query("Treffer")) == 30
    assert len(federation.query("Treffer")) == ALL_HITS_CAP
    assert len(federation.query("Treffer", top_k=5, max_final_results=0)) == ALL_HITS_CAP
    assert len(federation.query("Treffer", top_k=5)) == 5


def test_a_query_cut_at_the_candidate_cap_says_so_and_one_within_its_limit_does_not(caplog) -> None:
    many = [hit("big", f"Treffer {i}", 0.9 - i / 10_000, text_hash=f"h{i}") for i in range(ALL_HITS_CAP + 40)]
    federation = FederatedRetriever(registry(big=FixedHitsRetriever(many[:30]), more=FixedHitsRetriever(many[30:])))
    with caplog.at_level(logging.WARNING):
        federation.query("Treffer")
    cut = federation.explain_selection("Treffer")
    assert cut["candidates"] == {"cap": ALL_HITS_CAP, "limit": None, "candidates": ALL_HITS_CAP + 40,
                                 "returned": ALL_HITS_CAP, "cut_at_cap": True}
    said = f"no limit given: {ALL_HITS_CAP + 40} fused candidates cut at the candidate cap {ALL_HITS_CAP}"
    assert said in cut["skipped"] and said in " ".join(warnings_of(caplog))
    federation.query("Treffer", top_k=ALL_HITS_CAP + 1)
    above = federation.explain_selection("Treffer")
    assert above["candidates"]["cut_at_cap"] is True and above["candidates"]["limit"] == ALL_HITS_CAP + 1
    federation.query("Treffer", top_k=5)
    within = federation.explain_selection("Treffer")
    assert within["candidates"] == {"cap": ALL_HITS_CAP, "limit": 5, "candidates": ALL_HITS_CAP + 40,
                                    "returned": 5, "cut_at_cap": False}
    assert within["skipped"] == []
    few = FederatedRetriever(registry(big=FixedHitsRetriever(many[:30])))
    few.query("Treffer")
    assert few.explain_selection("Treffer")["candidates"]["cut_at_cap"] is False


# ------------------------------------------------------------------ the question itself


@pytest.mark.parametrize("question", ["", "?", "  ?! … §", "\n"])
def test_a_question_without_words_is_a_usage_error(question) -> None:
    federation = FederatedRetriever(registry(bgb=MemoryRetriever(BGB)))
    with pytest.raises(EmptyQuestion, match="no words to search for"):
        federation.query(question)
    with pytest.raises(EmptyQuestion):
        federation.verify_negative_result(question)
