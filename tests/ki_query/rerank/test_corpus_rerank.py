"""The offline reranker on a statute corpus: on by default, reorders without dropping, reads citations
of the best hits, and never the citations of an excluded record."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ki_core.search.types import Leg
from ki_query.federation.corpus_retriever import ALL_LEGS
from ki_query.federation.registry import CorpusRegistry
from ki_query.rerank.model import LinearRanker
# The statute-excerpt corpus of the registry tests (SGB V, BGB, GG, ZPO), loaded the same way.
from tests.ki_query.federation.test_registry import EMBEDDER, FIXTURE, loaded, registry, retriever, sessions, settings  # noqa: F401

CITING = "BGB|§ 986|2"  # "... die nach § 931 durch Abtretung ... veräußert worden ist ..."
CITED = ("BGB", "§ 931")


def _text_of(record_id: str) -> str:
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["id"] == record_id:
            return record["text"]
    raise AssertionError(record_id)


def test_the_registry_gives_statute_corpora_the_shipped_ranker_by_default(retriever):
    assert isinstance(retriever.reranker, LinearRanker)
    assert retriever.reranker.features == LinearRanker.load().features


@pytest.mark.parametrize("update", [{"rerank_enabled": False}, {"rerank_provider": "gateway"}])
def test_no_offline_ranker_when_reranking_is_off_or_left_to_the_gateway(settings, sessions, loaded, update):
    changed = settings.model_copy(update={"retrieval": settings.retrieval.model_copy(update=update)})
    registry = CorpusRegistry(changed, sessions, EMBEDDER)
    try:
        assert registry.retriever("statutes").reranker is None
    finally:
        registry.close()


@pytest.mark.parametrize("question", ["Kündigung von Wohnraum", "Leistungen der Krankenkasse", "Würde des Menschen"])
def test_reranking_reorders_and_drops_nothing(retriever, question, monkeypatch):
    # The excerpt corpus holds 70 units, fewer than the shipped prefix: a shorter prefix shows that
    # the candidates past it keep their place below it.
    monkeypatch.setattr(retriever, "reranker", replace(retriever.reranker, prefix=40))
    plain = retriever.query(question, top_k=100, rerank=False)
    reranked = retriever.query(question, top_k=100)
    assert len(plain) > retriever.reranker.prefix
    assert [h["metadata"]["record_id"] for h in plain[40:]] == [h["metadata"]["record_id"] for h in reranked[40:]]
    assert sorted(h["metadata"]["record_id"] for h in plain) == sorted(h["metadata"]["record_id"] for h in reranked)
    scores = [h["score"] for h in reranked]
    assert scores == sorted(scores, reverse=True)


def test_the_best_hits_citations_credit_the_cited_section(retriever):
    question = _text_of(CITING)
    vector = EMBEDDER.embed_query(question)
    _, ranked = retriever.candidates(question, vector, legs=ALL_LEGS, where=None, size=100)
    assert ranked[0].hit["metadata"]["record_id"] == CITING
    retriever.count_citations(ranked[:50])
    cited = [r.evidence.cited_by for r in ranked[:50] if (r.hit["metadata"]["container_id"], r.hit["metadata"]["section_id"]) == CITED]
    assert cited and min(cited) >= 1.0  # cited by the top hit: 1 / (1 + 0)
    own = [r.evidence.cited_by for r in ranked[:50] if r.hit["metadata"]["record_id"] == CITING]
    assert own == [0.0]  # a hit does not credit its own section


def test_an_excluded_record_is_no_candidate_and_its_citations_count_for_nothing(retriever):
    question = _text_of(CITING)
    vector = EMBEDDER.embed_query(question)
    _, ranked = retriever.candidates(question, vector, legs=ALL_LEGS, where=None, size=100, exclude_records=[CITING])
    assert CITING not in {r.hit["metadata"]["record_id"] for r in ranked}
    retriever.count_citations(ranked[:50])
    cited = [r.evidence.cited_by for r in ranked[:50] if (r.hit["metadata"]["container_id"], r.hit["metadata"]["section_id"]) == CITED]
    assert cited and max(cited) < 1.0
    hits = retriever.query(question, top_k=100, exclude_records=[CITING])
    assert CITING not in {h["metadata"]["record_id"] for h in hits}


def test_single_legs_are_never_reranked(retriever):
    """`ki eval --legs lexical` scores the leg itself: the baseline the hybrid is compared with."""
    question = "Kündigung von Wohnraum"
    for leg in (Leg.LEXICAL, Leg.SEMANTIC):
        assert retriever.query(question, top_k=50, legs=[leg]) == retriever.query(question, top_k=50, legs=[leg], rerank=False)
