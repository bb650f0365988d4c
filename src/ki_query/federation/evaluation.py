"""Retrieval evaluation: nDCG@10, Recall@10 and Recall@100 of a corpus or of the federated path,
overall and per query type, and the verdict (found / weak / nothing relevant) on a question set.

Query format (shared/data/eval): {qid, type, query, target, relevant: {record_id: grade},
exclude_ids: [...], law_scope}. Chunks map back to their record id and a record counts once
(at its best rank); `exclude_ids` are removed before scoring (the citing Absatz contains the
answer). `law_scope` is informational, never a filter. nDCG uses linear gain, as trec_eval.

The federated path is scored as a caller gets it and exactly as one corpus is: its ranking cut to
100 with the corpus quota, the top-k figures on its first k records (a record counts once), and
`exclude_ids` leave every corpus's candidates before it ranks them (the citing Absatz's own
references would hand the target to the reranker and to reference following). Cutting the
federation to k chunks instead scored it on fewer records than the corpus it is compared with
(several chunks of one Absatz fill the first ten): a federation of one corpus lost 0.11 nDCG@10
on a query whose first ten records it returned unchanged (issue 44). Each mechanism
(anchors, Verweise, quota, named first) is then turned off alone to count the queries whose
top k it changed.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ki_query.federation.errors import EvalFileError
from ki_query.federation.ranking import FOUND, FOUND_LEVEL, LOOKUP_KINDS, Hit, hit_corpus, finite

M = TypeVar("M", bound=BaseModel)

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
    return _load_jsonl(path, EvalQuery, "an eval query")


def _load_jsonl(path: str | Path, model: type[M], what: str) -> list[M]:
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise EvalFileError(f"{path}: cannot read: {exc}") from None
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(model.model_validate_json(line))
        except ValidationError as exc:
            raise EvalFileError(f"{path}:{number}: not {what} ({exc.errors()[0]['msg']})") from None
    return rows


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


def at_or_above_better_leg(hybrid: EvalReport, legs: Sequence[EvalReport]) -> tuple[int, int]:
    """(queries whose hybrid nDCG@k is at least the best single leg's, queries): how often fusion pays."""
    metric = metric_names(hybrid.k)[0]
    by_leg = [{r.qid: r.scores[metric] for r in leg.results} for leg in legs]
    results = [r for r in hybrid.results if all(r.qid in scores for scores in by_leg)]
    wins = sum(r.scores[metric] >= max(scores[r.qid] for scores in by_leg) - 1e-12 for r in results)
    return wins, len(results)


def evaluate(
    retriever: Retriever, queries: Sequence[EvalQuery], *, label: str, k: int = 10, **query_kwargs: Any
) -> EvalReport:
    """Run every query to depth max(k, 100) (plus room for excluded records) and score the ranking.

    A query's exclude_ids are handed to the retriever too (`exclude_records`), so they leave the
    candidates before the reranker reads the citations of the best hits, as on the federated path.
    """
    report = EvalReport(label, k)
    depth = max(k, RANKING_DEPTH)
    started = time.perf_counter()
    for query in queries:
        asked = excluding_kwargs(query, query_kwargs)
        hits = retriever.query(query.query, top_k=depth + len(query.exclude_ids), **asked)
        ranked = ranked_records(hits, query.exclude_ids)
        report.results.append(QueryResult(query.qid, query.type, scored(query, ranked, ranked, k)))
    report.seconds = time.perf_counter() - started
    return report


def excluding_kwargs(query: EvalQuery, query_kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The retriever's keywords for one query: the caller's, plus its exclude_ids as `exclude_records`."""
    return {**query_kwargs, "exclude_records": query.exclude_ids} if query.exclude_ids else dict(query_kwargs)


def scored(query: EvalQuery, top: Sequence[str], deep: Sequence[str], k: int) -> dict[str, float]:
    """nDCG@k and Recall@k of the top ranking, Recall@100 of the deep one (one ranking for a corpus)."""
    ndcg, recall_k, recall_depth = metric_names(k)
    return {
        ndcg: ndcg_at(top, query.relevant, k),
        recall_k: recall_at(top, query.relevant, k),
        recall_depth: recall_at(deep, query.relevant, RANKING_DEPTH),
    }


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


# ------------------------------------------------------------------ the federated path

# Each mechanism turned off alone, as overrides of the federation's wiring (FederatedSearch.retriever).
MECHANISMS: dict[str, dict[str, Any]] = {
    "anchors": {"anchors": None},
    "Verweise": {"max_verweis_normen": 0},
    "quota": {"min_hits_per_corpus": 0},
    "named first": {"named_corpora": None},
}


class WithoutExcluded:
    """The federation's scale step after dropping the current query's exclude_ids from a corpus's hits.

    The citing Absatz holds the answer, and reference following would read its masked references.
    A corpus retriever that takes `exclude_records` has dropped them before its reranker read the
    best hits' citations (evaluate_federated hands them over); this step catches every other one.
    A firm's index must not hold the documents the queries quote either (the caselaw queries are
    sentences of decisions/decisions.jsonl): that is for whoever loads it (docs/federation.md).
    """

    def __init__(self, scale: Callable[[list[Hit]], list[Hit]] | None):
        self.scale = scale
        self.excluded: frozenset[str] = frozenset()

    def __call__(self, hits: list[Hit]) -> list[Hit]:
        kept = [h for h in hits if (h.get("metadata") or {}).get("record_id") not in self.excluded]
        return self.scale(kept) if self.scale is not None else kept


@dataclass
class MechanismEffect:
    """What turning one mechanism off does: queries whose top k changed (set or order), and the scores."""

    mechanism: str
    changed: int
    report: EvalReport

    def top_k_means(self) -> dict[str, float]:
        """nDCG@k and Recall@k without the mechanism (its runs are cut to k: no Recall@100)."""
        ndcg, recall_k, _ = self.report.metrics
        means = self.report.means()
        return {ndcg: means[ndcg], recall_k: means[recall_k]}


@dataclass
class FederatedEvalReport:
    federated: EvalReport
    effects: list[MechanismEffect] = field(default_factory=list)
    # Over the federated top k of all queries: hits per corpus, Verweis and anchor hits.
    top_k_hits: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.federated.as_dict(),
            "top_k_hits": dict(self.top_k_hits),
            "mechanisms": {
                e.mechanism: {"top_k_changed": e.changed, "without": e.top_k_means()}
                for e in self.effects
            },
        }


def evaluate_federated(
    make_retriever: Callable[..., Retriever],
    queries: Sequence[EvalQuery],
    *,
    scale: Callable[[list[Hit]], list[Hit]] | None,
    k: int = 10,
    label: str = "federated",
    **query_kwargs: Any,
) -> FederatedEvalReport:
    """Score the federated path; `make_retriever(**overrides)` builds it (with MECHANISMS' overrides).

    Each corpus gets the query's exclude_ids as `exclude_records`, as `evaluate` hands them to one
    corpus: dropped only after a corpus ranked its hits, the citing Absatz would still have handed
    the reranker its masked reference (cited_by_top), and the federation would score above the same
    corpus alone for that reason only."""
    excluding = WithoutExcluded(scale)
    federation = make_retriever(scale=excluding)
    ablations = {name: make_retriever(scale=excluding, **off) for name, off in MECHANISMS.items()}
    report = FederatedEvalReport(EvalReport(label, k))
    without = {name: EvalReport(f"without {name}", k) for name in MECHANISMS}
    changed: Counter[str] = Counter()
    started = time.perf_counter()
    for query in queries:
        excluding.excluded = frozenset(query.exclude_ids)
        depth = max(k, RANKING_DEPTH) + len(query.exclude_ids)
        asked = excluding_kwargs(query, query_kwargs)
        top_hits = federation.query(query.query, top_k=depth, max_final_results=k, **asked)
        deep = federation.query(query.query, top_k=depth, max_final_results=RANKING_DEPTH, **asked)
        ranked = ranked_records(deep, query.exclude_ids)
        report.federated.results.append(QueryResult(query.qid, query.type, scored(query, ranked, ranked, k)))
        report.top_k_hits.update(top_k_kinds(top_hits))
        for name, retriever in ablations.items():
            hits = retriever.query(query.query, top_k=depth, max_final_results=k, **asked)
            changed[name] += hit_keys(hits) != hit_keys(top_hits)
            alone = ranked_records(retriever.query(query.query, top_k=depth, max_final_results=RANKING_DEPTH, **asked),
                                   query.exclude_ids)
            without[name].results.append(QueryResult(query.qid, query.type, scored(query, alone, alone, k)))
    report.federated.seconds = time.perf_counter() - started
    report.effects = [MechanismEffect(name, changed[name], without[name]) for name in MECHANISMS]
    return report


def hit_keys(hits: Iterable[Hit]) -> list[tuple[str | None, str | None]]:
    """What a caller sees of a ranking: corpus and text of each hit, in order."""
    return [(hit_corpus(h), str(h.get("text") or "")) for h in hits]


def top_k_kinds(hits: Iterable[Hit]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for hit in hits:
        kinds = set(hit.get("retrieval_kinds") or ())
        counts[f"corpus {hit_corpus(hit)}"] += 1
        counts["verweis"] += kinds == {"verweis"}
        counts["anchor"] += "norm_anchor" in kinds
    return counts


# ------------------------------------------------------------------ the verdict on a question set


class VerdictQuestion(BaseModel):
    """One line of a verdict question set (tests/fixtures/federation-verdict-questions.jsonl)."""

    model_config = ConfigDict(extra="ignore")

    question: str
    expected: Literal["found", "nothing relevant"]
    norm: str | None = None


@dataclass
class VerdictResult:
    question: str
    expected: str
    status: str
    reason: str
    best_cosine: float | None

    @property
    def agrees(self) -> bool:
        """Found is right for an answerable question; weak or nothing relevant for an off-topic one."""
        return (self.status == FOUND) == (self.expected == FOUND)


@dataclass
class VerdictReport:
    results: list[VerdictResult] = field(default_factory=list)

    def counts(self, expected: str) -> Counter[str]:
        return Counter(r.status for r in self.results if r.expected == expected)

    def agreeing(self, expected: str) -> tuple[int, int]:
        chosen = [r for r in self.results if r.expected == expected]
        return sum(r.agrees for r in chosen), len(chosen)

    def suggested_null_cosine(self) -> float | None:
        """The null cosine that puts the found level mid-way between the best off-topic and the
        weakest on-topic best hit of this set: how to calibrate an embedder nobody has measured."""
        off = [r.best_cosine for r in self.results if r.expected != FOUND and r.best_cosine is not None]
        on = [r.best_cosine for r in self.results if r.expected == FOUND and r.best_cosine is not None]
        if not off or not on:
            return None
        found_cosine = (max(off) + min(on)) / 2
        return (found_cosine - FOUND_LEVEL) / (1.0 - FOUND_LEVEL)

    def as_dict(self) -> dict[str, Any]:
        return {
            "by_expected": {e: dict(self.counts(e)) for e in sorted({r.expected for r in self.results})},
            "suggested_null_cosine": self.suggested_null_cosine(),
            "per_question": [vars(r) for r in self.results],
        }


def load_verdict_questions(path: str | Path) -> list[VerdictQuestion]:
    return _load_jsonl(path, VerdictQuestion, "a verdict question")


def evaluate_verdicts(ask: Callable[[str], Any], questions: Sequence[VerdictQuestion]) -> VerdictReport:
    """`ask(question)` answers like FederatedSearch.ask: `.verdict.status`, `.verdict.reason`, `.hits`."""
    report = VerdictReport()
    for item in questions:
        answer = ask(item.question)
        report.results.append(
            VerdictResult(item.question, item.expected, answer.verdict.status, answer.verdict.reason,
                          best_similarity_cosine(answer.hits))
        )  # fmt: skip
    return report


def best_similarity_cosine(hits: Iterable[Any]) -> float | None:
    """The best raw cosine among the hits found by similarity (not fetched by address)."""
    cosines = [
        finite(hit.metadata.get("cosine"))
        for hit in hits
        if hit.metadata.get("cosine") is not None and not LOOKUP_KINDS.intersection(hit.retrieval_kinds)
        and "verweis" not in hit.retrieval_kinds
    ]
    return max(cosines, default=None)
