"""The firm's index beside five statute corpora: the real RetrievalService with grants, on SQLite and PostgreSQL.

The folder world (tests/ki_query/retrieval_fixtures.py) gains one memo that answers a labour-law
question no statute excerpt answers; five corpora are the statute excerpt under five ids.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ki_core.embedding import HashingEmbedder
from ki_query.federation.corpus_loader import corpus_index_exists, load_corpus, remove_corpus
from ki_query.federation.ranking import FOUND, NOTHING_RELEVANT, WEAK, calibration_for
from ki_query.federation.registry import FirmIndexCorpus, cosines
from ki_query.federation.search import FederatedSearch
from ki_query.reading import TextRequest
from tests.ki_query.memory_corpora import FIXTURE as STATUTES
from tests.ki_query.retrieval_fixtures import DIMENSIONS, MEMBER, FolderWorld, fresh_world  # noqa: F401 - fixture
from tests.ki_workers.conftest import FOLDER, ctx, database_url  # noqa: F401 - fixtures

QUESTION = "Kann der Arbeitgeber wegen Weitergabe vertraulicher Daten fristlos kündigen?"
MEMO_FILE = "gutachten-datenweitergabe.txt"
MEMO = (
    "Gutachten zur fristlosen Kündigung\n\n"
    "Der Arbeitgeber kann das Arbeitsverhältnis fristlos kündigen, wenn der Arbeitnehmer vertrauliche Daten "
    "an Dritte weitergibt: die Weitergabe vertraulicher Daten ist ein wichtiger Grund im Sinne des § 626 BGB.\n"
)
CORPORA = [f"gesetze-{n}" for n in range(1, 6)]
# A memo whose one body chunk is far longer than the 320-character excerpt a firm hit carries: the question's
# words stand in its last sentence, the rest is about something else, so chunk and excerpt score apart.
LONG_MEMO_FILE = "vermerk-probezeit.txt"
LONG_MEMO = (
    "Vermerk zur Probezeit\n\n"
    + "Die Akte enthält Schriftverkehr zu Urlaubsansprüchen, Reisekosten, Fortbildungen und Dienstwagen. " * 6
    + "Während der Probezeit kann das Arbeitsverhältnis mit einer Frist von zwei Wochen gekündigt werden.\n"
)
PROBEZEIT = "Kündigungsfrist in der Probezeit zwei Wochen"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The fixture folder plus the firm's memo, in the matter the team is granted."""
    target = tmp_path / "ordner"
    shutil.copytree(FOLDER, target)
    (target / MEMO_FILE).write_text(MEMO, encoding="utf-8")
    (target / LONG_MEMO_FILE).write_text(LONG_MEMO, encoding="utf-8")
    manifest = json.loads((target / "ki-manifest.json").read_text(encoding="utf-8"))
    manifest["files"].append(
        {"path": MEMO_FILE, "document": "gutachten-datenweitergabe", "status": "final", "matter": "Kontorwerk Miete"}
    )
    manifest["files"].append(
        {"path": LONG_MEMO_FILE, "document": "vermerk-probezeit", "status": "final", "matter": "Kontorwerk Miete"}
    )
    (target / "ki-manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return target


@pytest.fixture
def embedder(fresh_world: FolderWorld) -> HashingEmbedder:
    return HashingEmbedder(dimensions=DIMENSIONS, model=fresh_world.ctx.settings.embedding.model)


@pytest.fixture
def world(fresh_world: FolderWorld, embedder: HashingEmbedder) -> FolderWorld:
    for corpus_id in CORPORA:
        load_corpus(fresh_world.ctx.settings, fresh_world.ctx.sessions, embedder, corpus_id, [STATUTES])
    return fresh_world


def federated_search(world: FolderWorld, embedder: HashingEmbedder) -> FederatedSearch:
    service, _index, _embedder = world.service()
    return FederatedSearch.from_settings(world.ctx.settings, firm_service=service, sessions=world.ctx.sessions,
                                         embedder=embedder)


def test_the_firm_index_is_selected_beside_five_corpora_and_answers_what_only_the_firm_holds(world, embedder) -> None:
    search = federated_search(world, embedder)
    try:
        answer = search.ask(QUESTION, [MEMBER], top_k=5, explain=True)
        stranger = search.ask(QUESTION, ["bob"], top_k=5)
    finally:
        search.close()
    assert answer.selection["selected"] == [*CORPORA[:4], "firm"]
    assert answer.selection["left_out"] == {"gesetze-5": "over the corpus cap (max_corpora_per_query 4)"}
    [memo] = [h for h in answer.hits if "Weitergabe vertraulicher Daten" in h.text]
    assert memo.corpus_id == "firm" and memo.address == "Gutachten zur fristlosen Kündigung"
    # The same citation /v1/search gives: the cited version and the file it can be opened from.
    citation = memo.metadata["citation"]
    assert citation["version"]["id"] == memo.metadata["document_version_id"]
    assert citation["document"]["title"] == "Gutachten zur fristlosen Kündigung"
    assert [s["source_kind"] for s in citation["source_objects"]] == ["local_fs"]
    assert citation["source_objects"][0]["external_id"].endswith(".txt")
    assert all(h.corpus_id != "firm" for h in stranger.hits)  # no grant, no firm hit


def test_a_corpus_loaded_with_another_embedder_is_not_selected(world, embedder) -> None:
    other = HashingEmbedder(dimensions=DIMENSIONS, model="another-model")
    load_corpus(world.ctx.settings, world.ctx.sessions, other, "fremd", [STATUTES])
    search = federated_search(world, embedder)
    try:
        answer = search.ask("Kündigung des Mietverhältnisses über Wohnraum", [MEMBER], explain=True)
    finally:
        search.close()
    assert "fremd" not in answer.selection["selected"] and "firm" in answer.selection["selected"]
    assert answer.selection["left_out"]["fremd"].startswith(
        f"corpus fremd was indexed with hashing:another-model:{DIMENSIONS} but questions are embedded with"
    )
    assert "fremd" not in {h.corpus_id for h in answer.hits}


def test_a_removed_corpus_is_gone_from_sql_the_index_and_the_selection(world, embedder) -> None:
    settings, sessions = world.ctx.settings, world.ctx.sessions
    report = remove_corpus(settings, sessions, "gesetze-1")
    assert report.index_removed and report.units == 70
    assert not corpus_index_exists(settings, report.index_name)
    search = federated_search(world, embedder)
    try:
        assert search.registry.available() == [*CORPORA[1:], "firm"]
        answer = search.ask(QUESTION, [MEMBER], explain=True)
    finally:
        search.close()
    assert answer.selection["selected"] == [*CORPORA[1:], "firm"] and answer.selection["left_out"] == {}


def test_a_firm_hit_is_scored_on_its_whole_chunk_not_on_the_excerpt(world, embedder) -> None:
    service, _index, _embedder = world.service()
    firm = FirmIndexCorpus(service, embedder=embedder)
    [hit] = [h for h in firm.query(PROBEZEIT, top_k=10, principals=[MEMBER]) if h["metadata"]["title"] == "Vermerk zur Probezeit"]
    citation = hit["metadata"]["citation"]
    chunk = service.read_text(
        hit["metadata"]["document_id"],
        TextRequest(version=citation["version"]["id"], offset=citation["passage_start"],
                    limit=citation["passage_end"] - citation["passage_start"]),
        [MEMBER],
    ).text
    assert "Probezeit" in chunk and len(chunk) > len(citation["excerpt"]) + 200
    on_chunk, on_excerpt = cosines(embedder, PROBEZEIT, [chunk, citation["excerpt"]])
    assert abs(on_chunk - on_excerpt) > 0.01  # the two texts score apart, so the test can tell them apart
    assert hit["rank_score"] == pytest.approx(float(on_chunk), abs=1e-5)
    assert hit["metadata"]["scored_on"] == "chunk"
    # Whoever may not see the memo gets no hit and reads no chunk.
    assert firm.query(PROBEZEIT, top_k=10, principals=["bob"]) == []


def test_the_firm_index_is_weak_where_its_best_hit_is_weak_and_found_where_it_is_strong(world, embedder) -> None:
    service, _index, _embedder = world.service()
    best = max(h["rank_score"] for h in FirmIndexCorpus(service, embedder=embedder).query(
        PROBEZEIT, top_k=20, principals=[MEMBER]))
    # Thresholds placed around the measured best cosine: the found cosine just above it gives "weak"
    # (between the weak and the found cosine), just below it "found", and far above it "nothing relevant".
    null = calibration_for(embedder.signature).null_cosine
    found_above = best + (best - null) * 0.5
    weak = FirmIndexCorpus(service, embedder=embedder, negative_threshold=found_above)
    check = weak.verify_negative_result(PROBEZEIT, principals=[MEMBER])
    assert check["verdict"] == WEAK and check["safe_to_answer_negative"] is False and check["results"] == []
    assert check["reason"].startswith("no document hit at cosine >=")
    found = FirmIndexCorpus(service, embedder=embedder, negative_threshold=best - 1e-4)
    assert found.verify_negative_result(PROBEZEIT, principals=[MEMBER])["verdict"] == FOUND
    nothing = FirmIndexCorpus(service, embedder=embedder, negative_threshold=null + (best - null) * 10)
    assert nothing.verify_negative_result(PROBEZEIT, principals=[MEMBER])["verdict"] == NOTHING_RELEVANT
    # The federation reads the firm's weak verdict as such: weak, never safe to answer negatively.
    search = federated_search(world, embedder)
    search.registry.firm.negative_threshold = found_above
    try:
        answer = search.ask(PROBEZEIT, [MEMBER], corpora=["firm"])
    finally:
        search.close()
    assert answer.verdict.status == WEAK and answer.verdict.corpora_with_findings == ["firm"]
    assert answer.verdict.reason.startswith("firm: no document hit at cosine")
