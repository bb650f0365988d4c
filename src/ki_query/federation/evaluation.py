"""Retrieval evaluation of a corpus: nDCG@10, Recall@10 and Recall@100, overall and per query type.

Query format (shared/data/eval): {qid, type, query, target, relevant: {record_id: grade},
exclude_ids: [...], law_scope}. Chunks map back to their record id and a record counts once
(at its best rank); `exclude_ids` are removed before scoring (the citing Absatz contains the
answer). `law_scope` is informational, never a filter. nDCG uses linear gain, as trec_eval.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from ki_query.federation.errors import EvalFileError

RANKING_DEPTH = 100


def metric_names(k: int) -> tuple[str, str, str]:
    return (f"ndcg@{k}", f"recall@{k}", f"recall@{RANKING_DEPTH}")


class EvalQuery(BaseModel):
    model_config = ConfigDict(extra="ignore")

    qid: str
    type: str
    query: str
    relevant: dict[str, int]
    exclude_ids: list[str] = []
    target: str | None = None
    law_scope: str | None = None


class Retriever(Protocol):
    def query(self, question: str, top_k: int = ..., **kwargs: Any) -> list[dict[str, Any]]: ...


def load_queries(path: str | Path) -> list[EvalQuery]:
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise EvalFileError(f"{path}: cannot read: {exc}") from None
    queries = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            queries.append(EvalQuery.model_validate_json(line))
        except ValidationError as exc:
            raise EvalFileError(f"{path}:{number}: not an eval query ({exc.errors()[0]['msg']})") from None
    return queries


def ranked_records(hits: Iterable[Mapping[str, Any]], exclude: Iterable[str]) -> list[str]:
    """Record ids in hit order, each once, excluded ones removed."""
    excluded = set(exclude)
    ranked: list[str] = []
    for hit in hits:
        record = (hit.get("metadata") or {}).get("record_id")
        if record and record not in excluded and record not in ranked:
            ranked.append(record)
    return ranked


def ndcg_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    dcg = sum(relevant.get(rid, 0) / math.log2(i + 2) for i, rid in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    wanted = {rid for rid, grade in relevant.items() if grade > 0}
    return len(wanted & set(ranked[:k])) / len(wanted) if wanted else 0.0


@dataclass
class QueryResult:
    qid: str
    type: str
    scores: dict[str, float]


@dataclass
class EvalReport:
    label: str
    k: int = 10
    results: list[QueryResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def metrics(self) -> tuple[str, str, str]:
        return metric_names(self.k)

    def means(self, query_type: str | None = None) -> dict[str, float]:
        chosen = [r for r in self.results if query_type is None or r.type == query_type]
        if not chosen:
            return {m: 0.0 for m in self.metrics}
        return {m: sum(r.scores[m] for r in chosen) / len(chosen) for m in self.metrics}

    def types(self) -> list[str]:
        return sorted({r.type for r in self.results})

    def count(self, query_type: str | None = None) -> int:
        return sum(1 for r in self.results if query_type is None or r.type == query_type)

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "k": self.k,
            "queries": self.count(),
            "seconds": round(self.seconds, 2),
            "overall": self.means(),
            "by_type": {t: {"queries": self.count(t), **self.means(t)} for t in self.types()},
            "per_query": [{"qid": r.qid, "type": r.type, **r.scores} for r in self.results],
        }


def evaluate(
    retriever: Retriever, queries: Sequence[EvalQuery], *, label: str, k: int = 10, **query_kwargs: Any
) -> EvalReport:
    """Run every query to depth max(k, 100) (plus room for excluded records) and score the ranking."""
    report = EvalReport(label, k)
    depth = max(k, RANKING_DEPTH)
    ndcg, recall_k, recall_depth = report.metrics
    started = time.perf_counter()
    for query in queries:
        hits = retriever.query(query.query, top_k=depth + len(query.exclude_ids), **query_kwargs)
        ranked = ranked_records(hits, query.exclude_ids)
        scores = {
            ndcg: ndcg_at(ranked, query.relevant, k),
            recall_k: recall_at(ranked, query.relevant, k),
            recall_depth: recall_at(ranked, query.relevant, RANKING_DEPTH),
        }
        report.results.append(QueryResult(query.qid, query.type, scores))
    report.seconds = time.perf_counter() - started
    return report


def table_rows(reports: Sequence[EvalReport]) -> list[list[str]]:
    """One row per (run, query type), the overall row of each run first."""
    rows = []
    for report in reports:
        for query_type in [None, *report.types()]:
            means = report.means(query_type)
            rows.append(
                [report.label, query_type or "all", str(report.count(query_type))]
                + [f"{means[m]:.3f}" for m in report.metrics]
            )
    return rows


def table_header(k: int) -> list[str]:
    return ["legs", "type", "n", *metric_names(k)]
