"""FederatedSearch end to end: real corpora (embedded backend, hashing embedder), shipped providers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ki_core.config import load_settings
from ki_core.db import make_engine, session_factory
from ki_core.embedding import HashingEmbedder
from ki_core.models.corpora import CorpusKind
from ki_query.federation.errors import UnknownCorpus
from ki_query.federation.corpus_loader import load_corpus
from ki_query.federation.search import FederatedSearch

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "statutes-excerpt.jsonl"
EMBEDDER = HashingEmbedder(dimensions=384)
# A framework contract and its annex: both have a § 1 and a § 2, like the statutes do.
CONTRACT = [
    {"law": "Rahmenvertrag", "section": "§ 1", "subsection": "1", "heading": "Gegenstand",
     "text": "Dieser Vertrag regelt die Versorgung der Versicherten mit Hilfsmitteln nach § 2.", "repealed": False},
    {"law": "Rahmenvertrag", "section": "§ 2", "subsection": "1", "heading": "Vergütung",
     "text": "Die Vergütung der Leistungserbringer richtet sich nach der Preisvereinbarung.", "repealed": False},
    {"law": "Anlage 11", "section": "§ 1", "subsection": None, "heading": "Preise",
     "text": "Die Preise der Hilfsmittel ergeben sich aus der Preisliste dieser Anlage.", "repealed": False},
    {"law": "Anlage 11", "section": "§ 2", "subsection": None, "heading": "Anpassung",
     "text": "Die Preisliste wird jährlich zum ersten Januar angepasst.", "repealed": False},
]


@pytest.fixture
def search(sqlite_url, tmp_path):
    settings = load_settings(state_dir=str(tmp_path / "state"), database={"url": sqlite_url},
                             embedding={"provider": "hashing", "model": "hashing"})
    engine = make_engine(sqlite_url)
    sessions = session_factory(engine)
    contract = tmp_path / "rahmenvertrag.jsonl"
    contract.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in CONTRACT), encoding="utf-8")
    load_corpus(settings, sessions, EMBEDDER, "statutes", [FIXTURE])
    load_corpus(settings, sessions, EMBEDDER, "hilfsmittel-rv", [contract], kind=CorpusKind.CONTRACTS,
                default_container="Rahmenvertrag", title="Rahmenvertrag Hilfsmittel")
    search = FederatedSearch.from_settings(settings, sessions=sessions, embedder=EMBEDDER)
    yield search
    search.close()
    engine.dispose()


def test_a_bare_section_cited_in_the_contract_is_fetched_from_the_contract_not_its_annex(search) -> None:
    federation = search.retriever(["hilfsmittel-rv"])
    # one hit per corpus (§ 1 of the contract, which cites "§ 2"), room for the cited norm after it
    hits = federation.query("Versorgung der Versicherten mit Hilfsmitteln", top_k=1, max_final_results=4)
    assert hits[0]["metadata"]["address"] == "§ 1 Abs. 1 Rahmenvertrag"
    cited = [h for h in hits if h["retrieval_kinds"] == ["verweis"]]
    assert [(h["metadata"]["container_id"], h["metadata"]["section_id"]) for h in cited] == [("Rahmenvertrag", "§ 2")]
    assert cited[0]["score"] == cited[0]["rank_score"] == pytest.approx(0.5 * hits[0]["rank_score"])


def test_a_question_naming_a_law_is_routed_to_the_corpus_holding_it(search) -> None:
    answer = search.ask("Was gilt nach § 573c BGB?", ["user:anna"], explain=True)
    assert answer.selection["routed"] == ["statutes"]
    assert answer.hits[0].address == "§ 573c Abs. 1 BGB"
    assert "section_lookup" in answer.hits[0].retrieval_kinds


def test_a_question_naming_no_law_reaches_every_corpus(search) -> None:
    answer = search.ask("Preisliste der Hilfsmittel und Leistungen der Krankenkasse", ["user:anna"], top_k=6,
                        explain=True)
    assert answer.selection["selected"] == ["hilfsmittel-rv", "statutes"]
    assert {h.corpus_id for h in answer.hits} == {"hilfsmittel-rv", "statutes"}
    assert answer.diagnostics["router"] == "law-mention-router"


def test_a_container_filter_reaches_only_the_corpus_whose_default_container_it_is(search) -> None:
    federation = search.retriever()
    hits = federation.query("Preisliste Vergütung Hilfsmittel", top_k=10, where={"container_id": "Rahmenvertrag"})
    contract = {h["metadata"]["container_id"] for h in hits if h["corpus_id"] == "hilfsmittel-rv"}
    assert contract == {"Rahmenvertrag"}


def test_asking_only_named_corpora_and_an_unknown_one(search) -> None:
    answer = search.ask("Kündigung Wohnraum", ["user:anna"], corpora=["statutes"])
    assert {h.corpus_id for h in answer.hits} == {"statutes"}
    with pytest.raises(UnknownCorpus):
        search.ask("Kündigung", ["user:anna"], corpora=["nope"])


# ------------------------------------------------------------------ the verdict


def test_the_answer_says_found_when_the_question_names_a_section_the_corpus_holds(search) -> None:
    answer = search.ask("Was gilt nach § 573c BGB?", ["user:anna"])
    assert answer.verdict.status == "found" and answer.verdict.safe_to_answer_negative is False
    assert "statutes" in answer.verdict.corpora_with_findings
    assert answer.model_dump(mode="json")["verdict"]["status"] == "found"  # what the surfaces serialize


def test_an_off_topic_question_is_not_found_and_no_cited_norm_leads_its_list(search) -> None:
    answer = search.ask("Hundesteuer Kampfhund Hamburg", ["user:anna"], corpora=["statutes"])
    assert answer.verdict.status in ("weak", "nothing relevant")
    assert not any("verweis" in hit.retrieval_kinds for hit in answer.hits)


def test_hits_carry_their_level_on_the_common_scale_and_the_raw_cosine(search) -> None:
    answer = search.ask("Kündigung des Mietverhältnisses über Wohnraum", ["user:anna"], corpora=["statutes"],
                        explain=True)
    levels = [hit.rank_score for hit in answer.hits]
    assert levels == sorted(levels, reverse=True) and all(0.0 <= level <= 1.0 for level in levels)
    assert all("cosine" in hit.metadata for hit in answer.hits)
    assert answer.diagnostics["scale"] == {"embedder": EMBEDDER.signature, "null_cosine": 0.30, "measured": True}
