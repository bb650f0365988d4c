"""Statute corpora: loading (SQL + own index), the corpus retriever, the registry, the firm adapter.

Real embedded backend (tantivy + faiss) and SQLite, with the hashing embedder (fast).
"""

from __future__ import annotations

import gzip
import json
import shutil
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

from ki_core.config import Settings, load_settings
from ki_core.db import make_engine, session_factory
from ki_core.embedding import HashingEmbedder
from ki_core.models.corpora import Corpus, CorpusKind, CorpusUnit
from ki_core.search import open_index
from ki_core.search.types import LegHits, MultiSearchResult, SearchFilters
from ki_query.federation.registry import CorpusRegistry, FirmIndexCorpus
from ki_query.federation.corpus_loader import (
    corpus_index_exists,
    drop_corpus_index,
    load_corpus,
    remove_corpus,
    split_text,
)
from ki_query.federation.errors import CorpusEmbeddingMismatch, CorpusIndexMissing, CorpusLoadError, UnknownCorpus
from ki_query.federation.corpus_retriever import CorpusRetriever, HybridWeights
from ki_query.federation.corpus_units import UnitStore
from ki_query.federation.retriever import FederatedRetriever
from tests.ki_core.search.backends import CONTRACT_BACKENDS, OPENSEARCH_URL

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "statutes-excerpt.jsonl"
EMBEDDER = HashingEmbedder(dimensions=384)


@pytest.fixture
def settings(sqlite_url: str, tmp_path: Path) -> Settings:
    return load_settings(
        state_dir=str(tmp_path / "state"), database={"url": sqlite_url}, embedding={"provider": "hashing", "model": "hashing"}
    )


@pytest.fixture
def sessions(sqlite_url: str):
    engine = make_engine(sqlite_url)
    yield session_factory(engine)
    engine.dispose()


@pytest.fixture
def loaded(settings, sessions):
    return load_corpus(settings, sessions, EMBEDDER, "statutes", [FIXTURE])


@pytest.fixture
def registry(settings, sessions, loaded):
    registry = CorpusRegistry(settings, sessions, EMBEDDER)
    yield registry
    registry.close()


@pytest.fixture
def retriever(registry) -> CorpusRetriever:
    return registry.retriever("statutes")


def units_of(sessions, **where) -> list[CorpusUnit]:
    with sessions() as session:
        query = select(CorpusUnit).where(*(getattr(CorpusUnit, k) == v for k, v in where.items()))
        return list(session.scalars(query.order_by(CorpusUnit.position)))


# ------------------------------------------------------------------ loading


def test_loading_registers_the_corpus_with_index_name_signature_and_metric(loaded, sessions) -> None:
    with sessions() as session:
        corpus = session.get(Corpus, "statutes")
    assert corpus.kind is CorpusKind.STATUTES
    assert corpus.index_name == loaded.index_name == "corpus-statutes-hashing-hashing-384"
    assert corpus.embedding_signature == "hashing:hashing:384" and corpus.metric == "cosine"
    assert corpus.default_container is None  # four laws, none chosen
    assert corpus.attributes["containers"] == ["BGB", "GG", "SGB V", "ZPO"]
    assert corpus.unit_count == loaded.units > loaded.records == 55


def test_sgb_5_is_loaded_as_sgb_v_and_record_ids_stay_as_in_the_source(loaded, sessions) -> None:
    [unit] = units_of(sessions, container_id="SGB V", section_id="§ 1")
    assert unit.record_id == "SGB 5|§ 1|" and unit.subsection is None


def test_a_long_absatz_is_split_into_chunks_that_keep_address_and_record_id(loaded, sessions) -> None:
    pieces = units_of(sessions, record_id="SGB 5|§ 31|6")  # 3,780 characters
    assert len(pieces) == 4 and [p.piece for p in pieces] == [0, 1, 2, 3]
    assert {(p.container_id, p.section_id, p.subsection) for p in pieces} == {("SGB V", "§ 31", "6")}
    assert all(len(p.text) <= 1200 for p in pieces)
    assert len({p.text_hash for p in pieces}) == 4
    section = units_of(sessions, container_id="SGB V", section_id="§ 31")
    assert [u.chunk_index_in_section for u in section] == list(range(len(section)))


def test_split_text_cuts_at_sentence_ends_and_drops_nothing() -> None:
    text = "Erster Satz ist hier. " * 40 + "Ein sehr langer Satz ohne Ende " * 60
    pieces = split_text(text.strip(), 300)
    assert all(len(p) <= 300 for p in pieces)
    assert " ".join(pieces).split() == text.split()


def test_repealed_records_are_indexed_and_marked(loaded, settings, sessions) -> None:
    [repealed] = units_of(sessions, record_id="BGB|§ 279|")
    [placeholder] = units_of(sessions, record_id="SGB 5|§ 31|2a")  # "(weggefallen)" without the flag
    assert repealed.repealed and placeholder.repealed
    with open_index(settings, index_name=loaded.index_name, read_only=True) as index:
        index.ensure()
        stored = index.stored_fields(repealed.chunk_id)
    assert stored["version_status"] == "repealed"
    assert stored["meta"]["repealed"] is True
    assert stored["meta"]["address"] == "§ 279 BGB" and stored["meta"]["record_id"] == "BGB|§ 279|"
    assert stored["meta"]["text_hash"] == repealed.text_hash
    assert stored["project_id"] == "statutes" and stored["document_id"] == "BGB"


def test_reloading_is_idempotent_and_drops_records_no_longer_in_the_file(loaded, settings, sessions, tmp_path) -> None:
    again = load_corpus(settings, sessions, EMBEDDER, "statutes", [FIXTURE])
    assert again.units == loaded.units and again.deleted_units == 0
    fewer = tmp_path / "bgb-fewer.jsonl.gz"
    rows = [line for line in FIXTURE.read_text(encoding="utf-8").splitlines() if '"law": "BGB"' in line]
    with gzip.open(fewer, "wt", encoding="utf-8") as out:
        out.write("\n".join(r for r in rows if '"id": "BGB|§ 931|"' not in r) + "\n")
    report = load_corpus(settings, sessions, EMBEDDER, "statutes", [fewer])
    assert report.deleted_units == 1
    assert units_of(sessions, record_id="BGB|§ 931|") == []
    assert len(units_of(sessions, container_id="SGB V")) > 0  # other containers stay
    with open_index(settings, index_name=loaded.index_name, read_only=True) as index:
        index.ensure()
        assert index.count(filters=SearchFilters(chunk_kind="chunk")) == loaded.units - 1
        # one row per § for section-level BM25: the 18 sections of the fixture less § 931
        assert index.count(filters=SearchFilters(chunk_kind="section")) == 17


def test_contracts_load_the_same_way_with_a_default_container(settings, sessions, tmp_path) -> None:
    path = tmp_path / "rahmenvertrag.jsonl"
    rows = [
        {"law": "Rahmenvertrag", "section": "§ 1", "subsection": "1", "heading": "Gegenstand",
         "text": "Dieser Vertrag regelt die Versorgung mit Hilfsmitteln.", "repealed": False},
        {"law": "Anlage 11", "section": "§ 1", "subsection": None, "heading": "Preise",
         "text": "Die Vergütung ergibt sich aus der Preisliste.", "repealed": False},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    report = load_corpus(settings, sessions, EMBEDDER, "hilfsmittel-rv", [path], kind=CorpusKind.CONTRACTS,
                         default_container="Rahmenvertrag")
    assert report.containers == ["Anlage 11", "Rahmenvertrag"]
    with sessions() as session:
        assert session.get(Corpus, "hilfsmittel-rv").default_container == "Rahmenvertrag"
    assert [u.record_id for u in units_of(sessions, corpus_id="hilfsmittel-rv")] == [
        "Rahmenvertrag|§ 1|1", "Anlage 11|§ 1|"]


def test_a_malformed_record_names_file_and_line(settings, sessions, tmp_path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"law": "BGB", "section": "§ 1", "text": "ok"}\n{"law": "BGB"}\n', encoding="utf-8")
    with pytest.raises(CorpusLoadError, match=r"bad.jsonl:2: .*section"):
        load_corpus(settings, sessions, EMBEDDER, "broken", [path])


def test_a_repeated_record_id_loads_as_one_unit_that_keeps_every_live_text(settings, sessions, tmp_path) -> None:
    """Real dumps repeat ids (KStG has two § 34, WpHG lists § 17 Abs. 4 live and repealed):
    the load must neither fail on the unit key nor drop a text."""
    path = tmp_path / "repeats.jsonl"
    rows = [
        {"id": "KStG|§ 34|2", "law": "KStG", "section": "§ 34", "subsection": "2",
         "text": "Genossenschaften sowie Vereine können bis zum 31. Dezember beantragen."},
        {"id": "WpHG|§ 17|4", "law": "WpHG", "section": "§ 17", "subsection": "4",
         "text": "Die Bundesanstalt darf die nach Absatz 1 erhobenen Daten verwenden."},
        {"id": "KStG|§ 34|2", "law": "KStG", "section": "§ 34", "subsection": "2",
         "text": "Die Teilbeträge sind um die Gewinnausschüttungen zu verringern."},
        {"id": "WpHG|§ 17|4", "law": "WpHG", "section": "§ 17", "subsection": "4", "text": "(weggefallen)"},
        {"id": "WpHG|§ 18|1", "law": "WpHG", "section": "§ 18", "subsection": "1", "text": "Gleicher Wortlaut."},
        {"id": "WpHG|§ 18|1", "law": "WpHG", "section": "§ 18", "subsection": "1", "text": "Gleicher Wortlaut."},
    ]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    report = load_corpus(settings, sessions, EMBEDDER, "repeats", [path])
    assert report.merged_ids == ["KStG|§ 34|2", "WpHG|§ 17|4", "WpHG|§ 18|1"]
    assert report.records == 6 and report.units == 3
    units = {u.record_id: u for u in units_of(sessions, corpus_id="repeats")}
    assert units["KStG|§ 34|2"].text == (
        "Genossenschaften sowie Vereine können bis zum 31. Dezember beantragen.\n\n"
        "Die Teilbeträge sind um die Gewinnausschüttungen zu verringern."
    )
    assert (units["WpHG|§ 17|4"].text, units["WpHG|§ 17|4"].repealed) == (rows[1]["text"], False)
    assert units["WpHG|§ 18|1"].text == "Gleicher Wortlaut."


# ------------------------------------------------------------------ get_units


def test_get_units_reads_the_address_in_the_named_container_scored_one(retriever) -> None:
    bgb = retriever.get_units("§ 1", container="BGB")
    sgb = retriever.get_units("§ 1", container="SGB V")
    assert [h["metadata"]["record_id"] for h in bgb] == ["BGB|§ 1|"]
    assert [h["metadata"]["record_id"] for h in sgb] == ["SGB 5|§ 1|"]
    assert all(h["score"] == 1.0 and h["rank_score"] == 1.0 for h in bgb + sgb)
    assert bgb[0]["retrieval_kinds"] == ["section_lookup"]


def test_get_units_narrows_to_the_subsection_and_caps_at_max_chunks(retriever) -> None:
    assert [h["metadata"]["subsection"] for h in retriever.get_units("§ 573c", "BGB", max_chunks=2)] == ["1", "2"]
    assert [h["metadata"]["subsection"] for h in retriever.get_units("§ 573c", "BGB", "3")] == ["3"]
    assert retriever.get_units("§ 573c", "BGB", "9") == []
    # a § without numbered Absätze answers a subsection lookup with its text
    assert [h["metadata"]["record_id"] for h in retriever.get_units("§ 931", "BGB", "1")] == ["BGB|§ 931|"]
    assert retriever.get_units("§ 573c", "SGB V") == []


def test_get_units_accepts_the_source_spelling_of_a_law(retriever) -> None:
    assert retriever.get_units("§ 12", container="SGB 5", subsection="2")[0]["metadata"]["container_id"] == "SGB V"


# ------------------------------------------------------------------ query


def test_query_returns_the_spec_hit_shape(retriever) -> None:
    [top] = retriever.query("Kündigung des Mietverhältnisses über Wohnraum zum Ablauf des übernächsten Monats", top_k=1)
    assert set(top) == {"text", "score", "rank_score", "metadata", "retrieval_kinds", "corpus_id"}
    assert top["corpus_id"] == "statutes"
    assert {"container_id", "section_id", "subsection", "chunk_index_in_section", "text_hash", "corpus_id",
            "record_id", "repealed"} <= set(top["metadata"])
    assert top["metadata"]["record_id"] == "BGB|§ 573c|1"
    assert set(top["retrieval_kinds"]) <= {"lexical", "semantic", "identifier"}


def test_rank_score_is_the_plain_cosine_of_question_and_chunk(retriever) -> None:
    question = "Würde des Menschen unantastbar"
    for hit in retriever.query(question, top_k=5):
        expected = float(EMBEDDER.embed_passages([hit["text"]])[0] @ EMBEDDER.embed_query(question))
        assert hit["rank_score"] == pytest.approx(expected, abs=1e-5)


def test_a_section_named_in_the_question_is_looked_up_first(retriever) -> None:
    hits = retriever.query("Was regelt § 573c Abs. 2 BGB?", top_k=3)
    assert hits[0]["metadata"]["record_id"] == "BGB|§ 573c|2"
    assert hits[0]["retrieval_kinds"] == ["section_lookup"] and hits[0]["score"] == 1.0


def test_bm25_reads_the_text_not_the_heading(retriever) -> None:
    # "Wirtschaftlichkeitsgebot" is the heading of SGB V § 12 and occurs in the text of § 2 Abs. 1 only.
    hits = retriever.query("Wirtschaftlichkeitsgebot", legs="lexical")
    assert [h["metadata"]["record_id"] for h in hits if "lexical" in h["retrieval_kinds"]] == ["SGB 5|§ 2|1"]
    # § 2 Abs. 1 cites § 12 ("Wirtschaftlichkeitsgebots (§ 12)"): its Absätze follow as cited, not as BM25 hits,
    # and then the other Absätze of § 2 (whole sections).
    assert {h["metadata"]["section_id"] for h in hits[1:4]} == {"§ 12"}
    assert all(h["retrieval_kinds"] == ["cited"] for h in hits[1:4])
    assert [h["metadata"]["record_id"] for h in hits[4:]] == ["SGB 5|§ 2|1a", "SGB 5|§ 2|2", "SGB 5|§ 2|3", "SGB 5|§ 2|4"]
    assert all(h["retrieval_kinds"] == ["same_section"] for h in hits[4:])


def test_where_filters_by_container_section_and_repealed(retriever) -> None:
    hits = retriever.query("Vollendung", top_k=10, where={"container_id": "BGB"})
    assert hits and {h["metadata"]["container_id"] for h in hits} == {"BGB"}
    section = retriever.query("Kündigung", top_k=10, where={"container_id": "BGB", "section_id": "§ 573c"})
    assert {h["metadata"]["section_id"] for h in section} == {"§ 573c"}
    repealed = retriever.query("weggefallen", top_k=10, where={"repealed": True}, legs="lexical")
    assert repealed and all(h["metadata"]["repealed"] for h in repealed)
    with pytest.raises(ValueError, match="unknown where key"):
        retriever.query("x", where={"matter": "1"})


def test_legs_choose_what_runs(retriever) -> None:
    lexical = retriever.query("Festbetrag Krankenkasse", top_k=5, legs=["lexical"])
    semantic = retriever.query("Festbetrag Krankenkasse", top_k=5, legs="semantic")
    assert all(h["retrieval_kinds"] == ["lexical"] for h in lexical)
    assert all(h["retrieval_kinds"] == ["semantic"] for h in semantic)
    with pytest.raises(ValueError, match="unknown leg"):
        retriever.query("x", legs="fuzzy")


def test_include_neighbors_adds_the_adjacent_absaetze_of_a_hit(retriever) -> None:
    hits = retriever.query("Geltendmachung eines weiteren Schadens", top_k=1, include_neighbors=True, legs="lexical")
    assert [h["metadata"]["record_id"] for h in hits] == ["BGB|§ 546a|2", "BGB|§ 546a|1"]
    assert hits[1]["retrieval_kinds"] == ["neighbor"] and hits[1]["rank_score"] is not None


def test_section_evidence_lifts_a_section_matching_in_several_legs(settings, sessions, loaded) -> None:
    question = "Kündigung des Mietverhältnisses über Wohnraum: Fristen"
    with open_index(settings, index_name=loaded.index_name, read_only=True) as index:
        index.ensure()

        def ranked(section_weight: float) -> list[dict]:
            retriever = CorpusRetriever("statutes", index=index, units=UnitStore(sessions, "statutes"),
                                        embedder=EMBEDDER, weights=HybridWeights(section_weight=section_weight))
            return retriever.query(question, top_k=100)

        chunks_alone, with_sections = ranked(0.0), ranked(1.0)
    assert {h["metadata"]["record_id"] for h in chunks_alone} == {h["metadata"]["record_id"] for h in with_sections}
    # Every Absatz of a section gains the same section evidence: the sections' Absätze move up together.
    gain = {h["metadata"]["record_id"]: h["score"] for h in with_sections}
    for hit in chunks_alone:
        assert gain[hit["metadata"]["record_id"]] > hit["score"]
    top_section = with_sections[0]["metadata"]["section_id"]
    assert top_section == "§ 573c"
    def top_four(hits: list[dict]) -> int:
        return [h["metadata"]["section_id"] for h in hits[:4]].count("§ 573c")

    assert top_four(with_sections) >= top_four(chunks_alone)


@pytest.fixture(params=CONTRACT_BACKENDS)
def either_backend(request, sqlite_url, sessions, tmp_path):
    """The statute excerpt loaded into a corpus index of each backend: (settings, index name)."""
    search = {"backend": request.param, "opensearch": {"hosts": [OPENSEARCH_URL or "http://127.0.0.1:9200"],
                                                       "number_of_replicas": 0}}
    settings = load_settings(state_dir=str(tmp_path / "state"), database={"url": sqlite_url}, search=search,
                             embedding={"provider": "hashing", "model": "hashing"})
    corpus_id = f"candidates-{uuid.uuid4().hex[:10]}"  # OpenSearch index names are global on the node
    report = load_corpus(settings, sessions, EMBEDDER, corpus_id, [FIXTURE])
    try:
        with open_index(settings, index_name=report.index_name, read_only=True) as index:
            index.ensure()
            yield lambda **weights: CorpusRetriever(
                corpus_id, index=index, units=UnitStore(sessions, corpus_id), embedder=EMBEDDER,
                containers=["BGB", "GG", "SGB V", "ZPO"], weights=HybridWeights(**weights))
    finally:
        drop_corpus_index(settings, report.index_name)


def test_the_sections_the_best_hits_cite_join_the_candidates_unless_excluded_or_turned_off(either_backend) -> None:
    # Only SGB V § 2 Abs. 1 has the word; it cites § 12, whose Absätze no leg returns.
    on = either_backend(whole_sections=False).query("Wirtschaftlichkeitsgebot", legs="lexical")
    off = either_backend(cited_sections=False, whole_sections=False).query("Wirtschaftlichkeitsgebot", legs="lexical")
    excluded = either_backend(whole_sections=False).query(
        "Wirtschaftlichkeitsgebot", legs="lexical", exclude_records=["SGB 5|§ 12|1"]
    )
    assert [h["metadata"]["record_id"] for h in off] == ["SGB 5|§ 2|1"]
    assert [h["metadata"]["record_id"] for h in on] == ["SGB 5|§ 2|1", "SGB 5|§ 12|1", "SGB 5|§ 12|2", "SGB 5|§ 12|3"]
    assert [h["retrieval_kinds"] for h in on[1:]] == [["cited"]] * 3
    assert [h["score"] for h in on] == sorted((h["score"] for h in on), reverse=True)
    assert "SGB 5|§ 12|1" not in [h["metadata"]["record_id"] for h in excluded]


def test_a_compound_the_text_never_uses_is_searched_by_its_parts(either_backend) -> None:
    # "Krankenkassenleistung" occurs nowhere; "Krankenkassen" and "Leistung" do.
    only_legs = {"cited_sections": False, "whole_sections": False}
    assert either_backend(compound_split=False, **only_legs).query("Krankenkassenleistung", legs="lexical") == []
    hits = either_backend(**only_legs).query("Krankenkassenleistung", legs="lexical")
    assert hits and all(h["retrieval_kinds"] == ["lexical"] for h in hits)
    assert all("Krankenkassen" in h["text"] or "Leistung" in h["text"] for h in hits)


def test_the_other_absaetze_of_the_best_sections_join_the_candidates_in_force_and_not_excluded(either_backend) -> None:
    # Only SGB V § 31 Abs. 4 speaks of "therapiegerechten Packungsgrößen"; § 31 has nine more Absätze,
    # Abs. 2a of them "(weggefallen)". A court citing § 31 is graded on all of them.
    question, alone = "therapiegerechte Packungsgrößen", {"cited_sections": False}
    off = either_backend(whole_sections=False, **alone).query(question, legs="lexical", top_k=30)
    on = either_backend(**alone).query(question, legs="lexical", top_k=30)
    excluded = either_backend(**alone).query(question, legs="lexical", top_k=30, exclude_records=["SGB 5|§ 31|7"])
    assert [h["metadata"]["record_id"] for h in off] == ["SGB 5|§ 31|4"]
    assert on[0]["metadata"]["record_id"] == "SGB 5|§ 31|4" and on[0]["retrieval_kinds"] == ["lexical"]
    siblings = list(dict.fromkeys(h["metadata"]["record_id"] for h in on[1:]))
    assert siblings == [f"SGB 5|§ 31|{a}" for a in ("1", "1a", "1b", "2", "3", "5", "6", "7")]
    assert all(h["retrieval_kinds"] == ["same_section"] for h in on[1:])
    assert [h["score"] for h in on] == sorted((h["score"] for h in on), reverse=True)
    assert "SGB 5|§ 31|7" not in {h["metadata"]["record_id"] for h in excluded}


def test_units_no_leg_returned_keep_to_the_where_filter(either_backend) -> None:
    # § 2 Abs. 1 cites § 12; a search inside § 2 gets the other Absätze of § 2, never § 12.
    where = {"container_id": "SGB V", "section_id": "§ 2"}
    hits = either_backend().query("Wirtschaftlichkeitsgebot", legs="lexical", where=where, top_k=20)
    assert [h["metadata"]["record_id"] for h in hits] == [f"SGB 5|§ 2|{a}" for a in ("1", "1a", "2", "3", "4")]
    repealed = either_backend().query("weggefallen", legs="lexical", where={"repealed": True}, top_k=50)
    assert repealed and all(h["metadata"]["repealed"] for h in repealed)


# ------------------------------------------------------------------ negative check


def test_a_named_section_or_a_close_hit_blocks_a_negative_answer(retriever) -> None:
    verdict = retriever.verify_negative_result("Was regelt § 573c BGB?")
    assert verdict["safe_to_answer_negative"] is False and verdict["strong_result_count"] >= 1
    assert "§ 573c" in verdict["reason"]


def test_nothing_above_the_control_threshold_is_safe(retriever) -> None:
    verdict = retriever.verify_negative_result("Photovoltaik Einspeisevergütung Netzbetreiber", threshold=0.99)
    assert verdict["safe_to_answer_negative"] is True and verdict["results"] == []
    assert "no hit at cosine >= 0.99" in verdict["reason"]


# ------------------------------------------------------------------ OpenSearch score scale


class HalfCosineIndex:
    """An index that scores kNN as OpenSearch's cosinesimil does, (1 + cos) / 2, and can undo it."""

    def __init__(self, inner):
        self.inner = inner

    def multi_search(self, request):
        result = self.inner.multi_search(request)
        legs = {
            leg: LegHits.of([replace(h, score=(1 + h.score) / 2) if leg.value == "semantic" else h for h in hits])
            for leg, hits in result.legs.items()
        }
        return MultiSearchResult(legs=legs)

    def cosine(self, score: float) -> float:
        return 2.0 * score - 1.0


def test_rank_score_undoes_the_opensearch_knn_score_transform(settings, sessions, loaded) -> None:
    question = "Gleichberechtigung von Männern und Frauen"
    with open_index(settings, index_name=loaded.index_name, read_only=True) as index:
        index.ensure()
        wrapped = CorpusRetriever("statutes", index=HalfCosineIndex(index), units=UnitStore(sessions, "statutes"),
                                  embedder=EMBEDDER)
        hits = wrapped.query(question, top_k=5, legs="semantic")
    vector = EMBEDDER.embed_query(question)
    for hit in hits:
        assert hit["rank_score"] == pytest.approx(float(EMBEDDER.embed_passages([hit["text"]])[0] @ vector), abs=1e-5)


# ------------------------------------------------------------------ registry


def test_the_registry_lists_specs_and_opens_retrievers(registry) -> None:
    assert registry.available() == ["statutes"]
    spec = registry.spec("statutes")
    assert spec.containers == ("BGB", "GG", "SGB V", "ZPO") and spec.public
    assert registry.retriever("statutes") is registry.retriever("statutes")
    with pytest.raises(UnknownCorpus, match="no corpus 'nope'"):
        registry.spec("nope")
    assert registry.assert_consistent_embedding() is None
    diagnostics = registry.diagnostics()
    assert diagnostics["query_embedder"] == "hashing:hashing:384"
    assert [c["id"] for c in diagnostics["corpora"]] == ["statutes"]


def test_a_corpus_of_another_embedder_gives_a_warning_not_an_error(settings, sessions, loaded) -> None:
    other = HashingEmbedder(dimensions=384, model="other-model")
    load_corpus(settings, sessions, other, "sozialrecht", [FIXTURE])
    registry = CorpusRegistry(settings, sessions, EMBEDDER)
    warning = registry.assert_consistent_embedding()
    assert "not comparable" in warning and "sozialrecht=hashing:other-model:384" in warning
    with pytest.raises(CorpusEmbeddingMismatch, match="sozialrecht was indexed with hashing:other-model:384"):
        registry.retriever("sozialrecht")
    federation = FederatedRetriever(registry, max_corpora_per_query=1)
    assert {h["corpus_id"] for h in federation.query("Würde des Menschen")} == {"statutes"}
    explained = federation.explain_selection("Würde des Menschen")
    assert explained["selected"] == ["statutes"]  # the cap of one is not taken by the corpus that cannot answer
    assert explained["left_out"]["sozialrecht"].startswith(
        "corpus sozialrecht was indexed with hashing:other-model:384 but questions are embedded with hashing:hashing:384"
    )
    assert registry.cannot_answer("statutes") is None
    registry.close()


def test_a_corpus_without_its_index_cannot_answer_and_says_so(settings, sessions, loaded) -> None:
    shutil.rmtree(settings.embedded_index_path / loaded.index_name)
    registry = CorpusRegistry(settings, sessions, EMBEDDER)
    assert registry.cannot_answer("statutes") == (
        "corpus statutes has no index corpus-statutes-hashing-hashing-384: reload it with `ki corpus load statutes`"
    )
    with pytest.raises(CorpusIndexMissing, match="corpus statutes has no index"):
        registry.retriever("statutes")
    [listed] = registry.diagnostics()["corpora"]
    assert listed["can_answer_now"] is False and "has no index" in listed["cannot_answer_because"]
    assert FederatedRetriever(registry).query("Würde des Menschen") == []


def test_a_reload_under_another_embedder_replaces_the_index_and_deletes_the_previous_one(settings, sessions, loaded) -> None:
    other = HashingEmbedder(dimensions=384, model="other-model")
    report = load_corpus(settings, sessions, other, "statutes", [FIXTURE])
    assert report.index_name == "corpus-statutes-hashing-other-model-384"
    assert not corpus_index_exists(settings, loaded.index_name) and corpus_index_exists(settings, report.index_name)
    registry = CorpusRegistry(settings, sessions, other)
    assert registry.cannot_answer("statutes") is None
    registry.close()


@pytest.mark.parametrize("backend", CONTRACT_BACKENDS)
def test_a_corpus_index_is_checked_never_created_by_a_reader_and_removed_on_either_backend(
    backend, sqlite_url, sessions, tmp_path
) -> None:
    search = {"backend": backend, "opensearch": {"hosts": [OPENSEARCH_URL or "http://127.0.0.1:9200"],
                                                 "number_of_replicas": 0}}
    settings = load_settings(state_dir=str(tmp_path / "state"), database={"url": sqlite_url}, search=search,
                             embedding={"provider": "hashing", "model": "hashing"})
    corpus_id = f"lifecycle-{uuid.uuid4().hex[:10]}"  # OpenSearch index names are global on the node
    report = load_corpus(settings, sessions, EMBEDDER, corpus_id, [FIXTURE])
    try:
        registry = CorpusRegistry(settings, sessions, EMBEDDER)
        assert registry.cannot_answer(corpus_id) is None
        assert registry.retriever(corpus_id).query("Würde des Menschen", top_k=1)
        registry.close()
        assert drop_corpus_index(settings, report.index_name) is True
        registry = CorpusRegistry(settings, sessions, EMBEDDER)
        assert "has no index" in registry.cannot_answer(corpus_id)
        with pytest.raises(CorpusIndexMissing):
            registry.retriever(corpus_id)
        assert not corpus_index_exists(settings, report.index_name)  # the reader created no empty index
        if backend == "opensearch":  # nor is the access-projection index beside it left behind
            from ki_core.search.opensearch import make_client

            client = make_client(settings.search.opensearch)
            assert client.indices.get(index=f"{report.index_name}*", params={"ignore_unavailable": "true"}) == {}
            client.close()
    finally:
        drop_corpus_index(settings, report.index_name)
    removed = remove_corpus(settings, sessions, corpus_id)
    assert (removed.units, removed.index_removed) == (report.units, False)
    assert CorpusRegistry(settings, sessions, EMBEDDER).available() == []


def test_removing_a_corpus_deletes_its_index_units_and_registration(settings, sessions, loaded) -> None:
    report = remove_corpus(settings, sessions, "statutes")
    assert (report.units, report.index_removed) == (loaded.units, True)
    assert units_of(sessions, corpus_id="statutes") == []
    assert not (settings.embedded_index_path / loaded.index_name).exists()
    registry = CorpusRegistry(settings, sessions, EMBEDDER)
    assert registry.available() == []
    with pytest.raises(UnknownCorpus):
        remove_corpus(settings, sessions, "statutes")


# ------------------------------------------------------------------ the firm's index as a corpus


class TinyRetrievalService:
    """The smallest real service: documents per principal, scored by shared words."""

    def __init__(self) -> None:
        self.documents = {
            "user:anna": [
                {"chunk_id": 7, "document_id": "doc-1", "project_id": "p1", "title": "Gutachten Mietrecht",
                 "text": "Die Kündigung des Mietverhältnisses über Wohnraum ist zum Ablauf des übernächsten Monats zulässig."},
            ],
        }
        self.requests: list = []

    def search(self, request, principals):
        self.requests.append((request, list(principals)))
        words = set(request.query.casefold().split())
        found = [
            {**doc, "score": len(words & set(doc["text"].casefold().split())) / 60}
            for p in principals for doc in self.documents.get(p, [])
        ]
        return {"hits": found[: request.limit]}


def test_the_firm_index_answers_only_with_principals(settings, sessions, loaded) -> None:
    service = TinyRetrievalService()
    firm = FirmIndexCorpus(service, embedder=EMBEDDER)
    assert firm.query("Kündigung Wohnraum") == []
    assert service.requests == []
    [hit] = firm.query("Kündigung Wohnraum", top_k=5, principals=["user:anna"])
    assert hit["corpus_id"] == "firm" and hit["metadata"]["document_id"] == "doc-1"
    assert hit["rank_score"] == pytest.approx(
        float(EMBEDDER.embed_passages([hit["text"]])[0] @ EMBEDDER.embed_query("Kündigung Wohnraum")), abs=1e-5
    )
    assert service.requests[0][0].limit == 5 and service.requests[0][1] == ["user:anna"]


def test_the_firm_index_joins_the_federation_through_the_principals_keyword(settings, sessions, loaded) -> None:
    firm = FirmIndexCorpus(TinyRetrievalService(), embedder=EMBEDDER)
    registry = CorpusRegistry(settings, sessions, EMBEDDER, firm=firm)
    assert registry.available() == ["statutes", "firm"]
    assert registry.spec("firm").public is False
    assert registry.always_selected() == ["firm"] and registry.cannot_answer("firm") is None
    assert registry.assert_consistent_embedding() is None  # the firm's index is embedded like the corpora
    federation = FederatedRetriever(registry)
    question = "Kündigung des Mietverhältnisses über Wohnraum"
    assert {h["corpus_id"] for h in federation.query(question, top_k=8)} == {"statutes"}
    with_principals = federation.query(question, top_k=8, principals=["user:anna"])
    assert "firm" in {h["corpus_id"] for h in with_principals}
    assert all(np.isfinite(h["rank_score"]) for h in with_principals)
    registry.close()


def test_loading_a_gzipped_file(settings, sessions, tmp_path) -> None:
    packed = tmp_path / "excerpt.jsonl.gz"
    with open(FIXTURE, "rb") as source, gzip.open(packed, "wb") as target:
        shutil.copyfileobj(source, target)
    assert load_corpus(settings, sessions, EMBEDDER, "packed", [packed]).records == 55
