"""Eval metrics: chunks map back to records (once each), exclude_ids removed, linear-gain nDCG."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ki_query.federation.evaluation import EvalQuery, evaluate, ndcg_at, ranked_records, recall_at

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def hit(record_id: str) -> dict:
    return {"text": record_id, "score": 1.0, "metadata": {"record_id": record_id}}


def test_pieces_of_one_record_count_once_and_excluded_records_are_removed() -> None:
    hits = [hit("BGB|§ 986|2"), hit("SGB 5|§ 31|6"), hit("SGB 5|§ 31|6"), hit("BGB|§ 931|")]
    assert ranked_records(hits, ["BGB|§ 986|2"]) == ["SGB 5|§ 31|6", "BGB|§ 931|"]


def test_ndcg_uses_linear_gain_against_the_ideal_order() -> None:
    relevant = {"a": 2, "b": 1}
    assert ndcg_at(["a", "b"], relevant, 10) == 1.0
    swapped = (1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3))
    assert ndcg_at(["b", "a"], relevant, 10) == pytest.approx(swapped)
    assert ndcg_at(["x"] * 10 + ["a"], relevant, 10) == 0.0


def test_recall_counts_relevant_records_within_the_cutoff() -> None:
    assert recall_at(["a", "x", "b"], {"a": 2, "b": 1, "c": 1}, 2) == pytest.approx(1 / 3)
    assert recall_at(["a", "x", "b"], {"a": 2, "b": 1, "c": 1}, 100) == pytest.approx(2 / 3)


def test_evaluate_asks_for_depth_plus_the_excluded_and_reports_per_type() -> None:
    class Fixed:
        asked: list[int] = []

        def query(self, question: str, top_k: int = 8, **kwargs) -> list[dict]:
            self.asked.append(top_k)
            return [hit("cited"), hit("target"), hit("other")]

    queries = [
        EvalQuery(qid="q1", type="xref", query="…", relevant={"target": 2}, exclude_ids=["cited"]),
        EvalQuery(qid="q2", type="heading", query="…", relevant={"nowhere": 1}),
    ]
    retriever = Fixed()
    report = evaluate(retriever, queries, label="fixed", k=10)
    assert retriever.asked == [101, 100]
    assert report.means("xref")["ndcg@10"] == 1.0 and report.means("heading")["recall@100"] == 0.0
    assert report.means()["ndcg@10"] == 0.5 and report.types() == ["heading", "xref"]


# ------------------------------------------------------------------ the federated path


def statute_hit(record_id: str, text: str, score: float) -> dict:
    law, section, _ = record_id.split("|")
    return {"text": text, "score": score, "retrieval_kinds": ["lexical"],
            "metadata": {"record_id": record_id, "text_hash": record_id, "container_id": law, "section_id": section}}


def test_federated_eval_drops_the_citing_absatz_before_reference_following_and_counts_what_changed() -> None:
    from ki_query.federation.evaluation import evaluate_federated
    from ki_query.federation.retriever import Address, FederatedRetriever
    from tests.ki_query.memory_corpora import FixedHitsRetriever, MemoryRegistry

    citing = statute_hit("BGB|§ 1|", "Es gilt § 9 entsprechend.", 0.9)
    other = statute_hit("BGB|§ 2|", "Ein Satz ohne Verweis.", 0.8)
    target = statute_hit("BGB|§ 9|", "Die Regel.", 1.0)
    corpus = FixedHitsRetriever([citing, other], units={"BGB|§ 9": [target]})

    def cited(hits, corpus_ids):
        return [Address("statutes", "§ 9", "BGB")] if any("§ 9" in h["text"] for h in hits) else []

    def make(**wiring):
        return FederatedRetriever(MemoryRegistry({"statutes": corpus}), **{"verweise": cited, **wiring})

    queries = [
        EvalQuery(qid="q1", type="xref", query="Es gilt […] entsprechend.", relevant={"BGB|§ 9|": 2},
                  exclude_ids=["BGB|§ 1|"]),
        EvalQuery(qid="q2", type="xref", query="Welche Regel gilt?", relevant={"BGB|§ 9|": 2}),
    ]
    report = evaluate_federated(make, queries, scale=None, k=10)
    by_qid = {r.qid: r.scores["ndcg@10"] for r in report.federated.results}
    assert by_qid["q1"] == 0.0  # the cited norm came only from the excluded Absatz
    assert by_qid["q2"] > 0.0
    changed = {e.mechanism: e.changed for e in report.effects}
    assert changed == {"anchors": 0, "Verweise": 1, "quota": 0, "named first": 0}
    assert report.top_k_hits["verweis"] == 1 and report.top_k_hits["corpus statutes"] == 4
    assert report.as_dict()["mechanisms"]["Verweise"]["without"] == {"ndcg@10": 0.0, "recall@10": 0.0}


def test_a_federation_of_one_corpus_scores_exactly_as_the_corpus_alone() -> None:
    """Several chunks of one Absatz fill the first ten hits: both runs are scored on their first ten
    records, so the federation is not charged for the corpus's own duplicates (issue 44)."""
    from ki_query.federation.evaluation import evaluate_federated
    from ki_query.federation.retriever import FederatedRetriever
    from tests.ki_query.memory_corpora import FixedHitsRetriever, MemoryRegistry

    records = [f"BGB|§ {n}|" for n in range(1, 9)]
    hits = []
    for position, record in enumerate(records):
        for piece in range(2):  # two chunks per record: 16 chunks, 8 records
            chunk = statute_hit(record, f"Teil {piece} von {record}", 0.9 - 0.01 * position - 0.001 * piece)
            hits.append({**chunk, "metadata": {**chunk["metadata"], "text_hash": f"{record}#{piece}"}})
    corpus = FixedHitsRetriever(hits)
    query = EvalQuery(qid="q1", type="heading", query="Regel", relevant={records[5]: 2, records[7]: 1})

    def make(**wiring):
        return FederatedRetriever(MemoryRegistry({"statutes": corpus}), **{"max_verweis_normen": 0, **wiring})

    alone = evaluate(corpus, [query], label="statutes alone").results[0].scores
    federated = evaluate_federated(make, [query], scale=None, k=10).federated.results[0].scores
    assert alone["recall@10"] == 1.0  # both relevant records are among the first ten records ...
    assert federated == alone  # ... though they are the 12th and 16th chunk


class CitationReadingRetriever:
    """A corpus whose ranking reads its own candidates, as the reranker's cited_by_top does: a norm
    that a candidate cites joins the list at the top. `exclude_records` leave before that read."""

    def __init__(self, candidates: list[dict], cited: dict[str, dict]):
        self.candidates = candidates
        self.cited = cited
        self.excluded_asked: list[list[str]] = []

    def query(self, question: str, top_k: int = 8, exclude_records=()) -> list[dict]:
        self.excluded_asked.append(list(exclude_records))
        excluded = set(exclude_records)
        kept = [dict(h) for h in self.candidates if h["metadata"]["record_id"] not in excluded]
        lifted = [dict(self.cited[ref]) for ref in self.cited if any(ref in h["text"] for h in kept)]
        return (lifted + kept)[:top_k]


def test_federated_eval_hands_each_corpus_the_excluded_records_before_it_ranks() -> None:
    from ki_query.federation.evaluation import evaluate_federated
    from ki_query.federation.retriever import FederatedRetriever
    from tests.ki_query.memory_corpora import MemoryRegistry

    citing = statute_hit("BGB|§ 1|", "Es gilt § 9 entsprechend.", 0.9)
    other = statute_hit("BGB|§ 2|", "Ein Satz ohne Verweis.", 0.8)
    target = statute_hit("BGB|§ 9|", "Die Regel.", 1.0)
    corpus = CitationReadingRetriever([citing, other], cited={"§ 9": target})

    def make(**wiring):
        return FederatedRetriever(MemoryRegistry({"statutes": corpus}), **{"max_verweis_normen": 0, **wiring})

    query = EvalQuery(qid="q1", type="xref", query="Es gilt […] entsprechend.", relevant={"BGB|§ 9|": 2},
                      exclude_ids=["BGB|§ 1|"])
    report = evaluate_federated(make, [query], scale=None, k=10)
    # Dropped only after the corpus ranked, the citing Absatz would have put § 9 first (nDCG 1.0).
    assert report.federated.results[0].scores["ndcg@10"] == 0.0
    assert corpus.excluded_asked and all(asked == ["BGB|§ 1|"] for asked in corpus.excluded_asked)


# ------------------------------------------------------------------ the verdict on a question set


def test_a_verdict_report_counts_agreement_and_suggests_the_null_cosine() -> None:
    from ki_query.federation.evaluation import VerdictReport, VerdictResult

    report = VerdictReport([
        VerdictResult("Apfelstrudel", "nothing relevant", "nothing relevant", "", 0.80),
        VerdictResult("Hundesteuer", "nothing relevant", "weak", "", 0.83),
        VerdictResult("Zugspitze", "nothing relevant", "found", "", 0.85),
        VerdictResult("Kündigungsfrist", "found", "found", "", 0.87),
        VerdictResult("Volljährig", "found", "weak", "", 0.86),
    ])
    assert report.agreeing("nothing relevant") == (2, 3) and report.agreeing("found") == (1, 2)
    # The found cosine mid-way between 0.85 and 0.86 is 0.855; null + 0.25 x (1 - null) = 0.855.
    assert report.suggested_null_cosine() == pytest.approx(0.80667, abs=1e-4)


def test_the_committed_question_set_reads_and_a_bad_line_names_its_place(tmp_path) -> None:
    from ki_query.federation.errors import EvalFileError
    from ki_query.federation.evaluation import load_verdict_questions

    questions = load_verdict_questions(FIXTURES / "federation-verdict-questions.jsonl")
    assert sum(q.expected == "found" for q in questions) >= 10
    assert sum(q.expected == "nothing relevant" for q in questions) >= 10
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "x", "expected": "maybe"}\n', encoding="utf-8")
    with pytest.raises(EvalFileError, match="bad.jsonl:1: not a verdict question"):
        load_verdict_questions(bad)


# ------------------------------------------------------------------ ki eval --federated / --verdict


@pytest.fixture
def cli(monkeypatch, tmp_path):
    """A CliRunner and the ki app over an empty state with the hashing embedder; load(corpus, file)."""
    from typer.testing import CliRunner

    from ki.cli import app

    monkeypatch.setenv("KI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KI_EMBEDDING__PROVIDER", "hashing")
    monkeypatch.setenv("KI_EMBEDDING__MODEL", "hashing")
    runner = CliRunner()

    def load(corpus: str, fixture: str) -> None:
        loaded = runner.invoke(app, ["corpus", "load", corpus, str(FIXTURES / fixture)])
        assert loaded.exit_code == 0, loaded.output

    return runner, app, load


def test_ki_eval_scores_the_federation_beside_one_corpus_and_gives_verdicts(cli) -> None:
    import json

    runner, app, load = cli
    load("statutes", "statutes-excerpt.jsonl")
    load("extra", "statutes-verdict-supplement.jsonl")
    queries = str(FIXTURES / "statute-queries-excerpt.jsonl")
    result = runner.invoke(app, ["eval", "--federated", "--queries", queries, "--baseline", "statutes", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["corpora"] == ["extra", "statutes"]
    assert set(report["federated"]["mechanisms"]) == {"anchors", "Verweise", "quota", "named first"}
    assert report["alone"][0]["label"] == "statutes alone"
    verdicts = runner.invoke(app, ["eval", "--verdict", str(FIXTURES / "federation-verdict-questions.jsonl"), "--json"])
    assert verdicts.exit_code == 0, verdicts.output
    per_question = json.loads(verdicts.stdout)["per_question"]
    assert len(per_question) == 28 and {r["status"] for r in per_question} <= {"found", "weak", "nothing relevant"}
    missing = runner.invoke(app, ["eval", "--federated"])
    assert missing.exit_code == 2 and "--queries" in missing.output


def test_ki_eval_no_rerank_reaches_the_federation_and_its_baseline(cli) -> None:
    import json

    runner, app, load = cli
    load("statutes", "statutes-excerpt.jsonl")
    queries = str(FIXTURES / "statute-queries-excerpt.jsonl")

    def per_query(args: list[str], pick) -> list[float]:
        result = runner.invoke(app, ["eval", "--queries", queries, "--json", *args])
        assert result.exit_code == 0, result.output
        return [q["ndcg@10"] for q in pick(json.loads(result.stdout))["per_query"]]

    flags = ("--rerank", "--no-rerank")
    single = {flag: per_query(["--corpus", "statutes", flag], lambda r: r["runs"][0]) for flag in flags}
    assert single["--rerank"] != single["--no-rerank"]  # the fixture shows whether the flag arrives
    for flag in flags:
        alone = per_query(["--federated", "--baseline", "statutes", flag], lambda r: r["alone"][0])
        assert alone == single[flag]
