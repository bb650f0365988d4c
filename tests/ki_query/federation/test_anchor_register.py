"""The shipped example anchor register (ki_core/data/anchors.example.json) against real questions.

It is written for the statutes corpus from the subjects of the lay questions in
tests/fixtures/eval/statutes-caselaw.jsonl. Two promises are checked: a question it fires on gets
its norm into the top 10 (a real corpus: the statutes excerpt plus the anchored norms, embedded
backend, hashing embedder), and it costs no other question: over every question of the own sets
(tests/fixtures/eval) it fires only norms the question asks for, and a question it does not fire on
gets the very same list as without it.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest

from ki_core.config import load_settings
from ki_core.db import make_engine, session_factory
from ki_core.embedding import HashingEmbedder
from ki_core.identifiers import normalize_law
from ki_query.federation.corpus_loader import load_corpus
from ki_query.federation.evaluation import EvalQuery, load_queries, ndcg_at, ranked_records
from ki_query.federation.providers import AnchorRegister
from ki_query.federation.search import FederatedSearch

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
OWN_SETS = sorted((FIXTURES / "eval").glob("*.jsonl"))
REGISTER = Path(str(files("ki_core.data").joinpath("anchors.example.json")))
EMBEDDER = HashingEmbedder(dimensions=384)


def own_questions() -> list[EvalQuery]:
    return [query for path in OWN_SETS for query in load_queries(path)]


def section_of(record_id: str) -> tuple[str, str]:
    """'SGB 5|§ 33|1' -> ('SGB V', '§ 33'): the law as the corpus loads it."""
    law, section, _ = record_id.split("|", 2)
    return normalize_law(law), section


def anchored_sections(register: AnchorRegister, question: str) -> set[tuple[str, str]]:
    return {(normalize_law(a.container_id or ""), a.section_id) for a in register(question)}


def test_the_register_is_off_by_default() -> None:
    assert load_settings().federation.anchors_file is None


def test_the_register_fires_on_real_questions_and_only_with_norms_they_ask_for() -> None:
    register = AnchorRegister.from_file(REGISTER)
    fired = 0
    for query in own_questions():
        anchored = anchored_sections(register, query.query)
        asked = {section_of(record) for record in query.relevant}
        assert anchored <= asked, f"{query.qid} fires {sorted(anchored - asked)}, asks for {sorted(asked)}"
        fired += bool(anchored)
    assert fired >= 10  # of the 368 own questions; the earlier example fired on none


@pytest.fixture
def search(sqlite_url, tmp_path):
    settings = load_settings(state_dir=str(tmp_path / "state"), database={"url": sqlite_url},
                             embedding={"provider": "hashing", "model": "hashing"},
                             federation={"anchors_file": str(REGISTER)})
    engine = make_engine(sqlite_url)
    sessions = session_factory(engine)
    load_corpus(settings, sessions, EMBEDDER, "statutes",
                [FIXTURES / "statutes-excerpt.jsonl", FIXTURES / "statutes-anchored.jsonl"])
    search = FederatedSearch.from_settings(settings, sessions=sessions, embedder=EMBEDDER)
    yield search
    search.close()
    engine.dispose()


def test_a_fired_anchor_brings_its_norm_into_the_top_10_and_no_other_question_changes(search) -> None:
    register = AnchorRegister.from_file(REGISTER)
    with_anchors, without = search.retriever(["statutes"]), search.retriever(["statutes"], anchors=None)
    questions = load_queries(FIXTURES / "eval" / "statutes-caselaw.jsonl")
    lifted = 0
    for query in questions:
        hits = with_anchors.query(query.query, top_k=10)
        plain = without.query(query.query, top_k=10)
        anchored = anchored_sections(register, query.query)
        if not anchored:
            assert hits == plain, f"{query.qid}: the register fired on nothing but changed the list"
            continue
        top = {(h["metadata"]["container_id"], h["metadata"]["section_id"]) for h in hits}
        assert anchored <= top, f"{query.qid}: {sorted(anchored - top)} not in the top 10"
        ranked, ranked_plain = ranked_records(hits, ()), ranked_records(plain, ())
        assert ndcg_at(ranked, query.relevant, 10) >= ndcg_at(ranked_plain, query.relevant, 10)
        lifted += ndcg_at(ranked, query.relevant, 10) > ndcg_at(ranked_plain, query.relevant, 10)
    assert lifted >= 5  # the register does something on this corpus, not only in principle
    assert json.loads(REGISTER.read_text(encoding="utf-8"))["anchors"]
