"""Eval metrics: chunks map back to records (once each), exclude_ids removed, linear-gain nDCG."""

from __future__ import annotations

import math

import pytest

from ki_query.federation.evaluation import EvalQuery, evaluate, ndcg_at, ranked_records, recall_at


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
