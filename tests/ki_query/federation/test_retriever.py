"""FederatedRetriever against spec/federation.md: selection, query, anchors, fusion, Verweise,
named corpus first, negative verification, diagnostics, provider errors.

Corpora are statute excerpts (tests/fixtures/statutes-excerpt.jsonl) in small real retrievers.
"""

from __future__ import annotations

import logging

import pytest

from ki_query.federation.retriever import Address, FederatedRetriever
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


def test_explain_selection_names_available_routed_required_selected_and_anchor_targets() -> None:
    federation = FederatedRetriever(
        registry(bgb=MemoryRetriever(BGB)), anchors=lambda q: [Address("bgb", "§ 573c", "BGB", max_chunks=1)]
    )
    explained = federation.explain_selection(MIETE)
    assert set(explained) == {"available", "routed", "required", "selected", "anchor_targets"}
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
