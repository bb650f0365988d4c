"""Choose the federation's corpus weighting on the own sets (issue 44), never on the dev queries.

    KI_STATE_DIR=... KI_EMBEDDING__PROVIDER=e5-small python bench/federation_weights.py \\
        --corpus statutes --corpus extra16 --strengths 0,0.5,1,2 --out /tmp/weights.json

For each own set (tests/fixtures/eval) the corpus that holds its laws alone is the baseline (statutes
for statutes-*, extra16 for extra16-*); the federation over all --corpus is scored at each strength
of federation.corpus_prior_strength exactly as `ki eval --federated` scores it (evaluation.py). Each
corpus answers a question once: its hits are kept in memory (and in --cache, so a rerun is cheap) and
handed to every strength, so the strengths differ only in what the federation does with them.
The cache holds the corpora's answers, not the code that gave them: start a new --cache after a
change to a corpus retriever, the state or the embedder.

Per set and query type: the mean nDCG@10 of federation minus baseline, its paired 95 % bootstrap
interval (queries resampled), and every query that loses more than 0.1.
"""

from __future__ import annotations

import argparse
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
from paired_bootstrap import SEED, interval

from ki_core.config import load_settings
from ki_query.federation.corpus_prior import CorpusPrior, CorpusPriors
from ki_query.federation.evaluation import EvalReport, evaluate, evaluate_federated, load_queries
from ki_query.federation.ranking import calibration_for
from ki_query.federation.retriever import accepted_kwargs
from ki_query.federation.search import FederatedSearch

EVAL = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "eval"
BASELINE = {"statutes": "statutes", "extra16": "extra16"}  # set prefix -> the corpus holding its laws
LOSS = 0.1


class Remembered:
    """A corpus retriever whose answers are kept: the same corpus, question and keywords are asked once.

    The corpus is part of the key: one cache serves every corpus, and without it the second corpus
    asked a question got the first one's hits under its own name (the figures of 2026-12-07's
    evening run compared the statutes with a copy of themselves)."""

    def __init__(self, corpus_id: str, inner: Any, cache: dict):
        self.corpus_id = corpus_id
        self.inner = inner
        self.cache = cache

    def query(self, question: str, **kwargs: Any) -> list[dict]:
        asked = accepted_kwargs(self.inner.query, kwargs)
        key = (self.corpus_id, "query", question, json.dumps(asked, sort_keys=True, default=str))
        if key not in self.cache:
            self.cache[key] = self.inner.query(question, **asked)
        return [{**h, "metadata": dict(h["metadata"])} for h in self.cache[key]]

    def get_units(self, *args: Any, **kwargs: Any) -> list[dict]:
        key = (self.corpus_id, "units", json.dumps([args, kwargs], sort_keys=True, default=str))
        if key not in self.cache:
            self.cache[key] = self.inner.get_units(*args, **kwargs)
        return [{**h, "metadata": dict(h["metadata"])} for h in self.cache[key]]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def bootstrap(deltas: list[float], rounds: int = 10_000) -> tuple[float, float]:
    """The paired 95 % interval of the mean difference, queries resampled with replacement."""
    _, low, high = interval(np.asarray(deltas, dtype=float), rounds, np.random.default_rng(SEED))
    return low, high


def compare(federated: EvalReport, alone: EvalReport) -> dict[str, Any]:
    metric = federated.metrics[0]
    base = {r.qid: r for r in alone.results}
    rows: dict[str, Any] = {}
    for query_type in ["all", *federated.types()]:
        chosen = [r for r in federated.results if query_type == "all" or r.type == query_type]
        deltas = [r.scores[metric] - base[r.qid].scores[metric] for r in chosen]
        low, high = bootstrap(deltas)
        rows[query_type] = {
            "n": len(chosen),
            "federated": sum(r.scores[metric] for r in chosen) / len(chosen),
            "alone": sum(base[r.qid].scores[metric] for r in chosen) / len(chosen),
            "delta": sum(deltas) / len(deltas), "ci": [low, high],
            "losses": [(r.qid, round(d, 3)) for r, d in zip(chosen, deltas, strict=True) if d < -LOSS],
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", action="append", required=True)
    parser.add_argument("--strengths", default="0,0.5,1,2", help="strength or strength:floor, comma-separated")
    parser.add_argument("--sets", default="statutes-generated,statutes-caselaw,statutes-decisions,"
                        "extra16-generated,extra16-caselaw,extra16-decisions")
    parser.add_argument("--cache", default="/tmp/federation-weights-cache.pkl")
    parser.add_argument("--out", required=True)
    parser.add_argument("--no-verweise", action="store_true", help="reference following off: the weighting alone")
    args = parser.parse_args()
    cache_path = Path(args.cache)
    cache = pickle.loads(cache_path.read_bytes()) if cache_path.exists() else {}
    settings = load_settings()
    search = FederatedSearch.from_settings(settings)
    registry = search.registry
    for corpus_id in args.corpus:
        registry._retrievers[corpus_id] = Remembered(corpus_id, registry.retriever(corpus_id), cache)
    scale = calibration_for(registry.embedder.signature)
    learned = None
    off = {"max_verweis_normen": 0} if args.no_verweise else {}
    results: dict[str, Any] = {}
    try:
        for name in args.sets.split(","):
            queries = load_queries(EVAL / f"{name}.jsonl")
            baseline = BASELINE[name.split("-")[0]]
            alone = evaluate(registry.retriever(baseline), queries, label=f"{baseline} alone")
            results[name] = {"baseline": baseline, "alone": alone.as_dict(), "strengths": {}}
            for setting in args.strengths.split(","):
                head, _, tail = setting.partition(":")
                strength, floor = float(head), float(tail or 0.0)
                if strength > 0 and learned is None:
                    learned = CorpusPriors(registry, strength).for_corpora(args.corpus)
                weights = CorpusPrior(learned.prior, learned.holders, strength, floor) if strength > 0 else None
                report = evaluate_federated(
                    lambda **wiring: search.retriever(args.corpus, corpus_weights=weights, **{**off, **wiring}),
                    queries, scale=scale,
                )
                results[name]["strengths"][setting] = {
                    "compare": compare(report.federated, alone), "top_k_hits": dict(report.top_k_hits),
                    "per_query": report.federated.as_dict()["per_query"],
                }
                row = results[name]["strengths"][setting]["compare"]
                print(name, setting, {t: (round(v["federated"], 3), round(v["alone"], 3), round(v["delta"], 3),
                                           [round(x, 3) for x in v["ci"]], len(v["losses"])) for t, v in row.items()},
                      dict(report.top_k_hits), flush=True)
            cache_path.write_bytes(pickle.dumps(cache))
    finally:
        cache_path.write_bytes(pickle.dumps(cache))
        Path(args.out).write_text(json.dumps(results, indent=1, ensure_ascii=False), encoding="utf-8")
        search.close()


if __name__ == "__main__":
    main()
