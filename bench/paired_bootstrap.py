"""Paired bootstrap of two `ki eval --json` runs: the mean difference per metric and its 95 % interval.

    ki eval --corpus statutes --queries Q --json > before.json     # e.g. on the old code
    ki eval --corpus statutes --queries Q --json > after.json
    python bench/paired_bootstrap.py before.json after.json [--label hybrid] [--resamples 10000]

Queries are paired by qid within the run of the same label (the legs: lexical, semantic, hybrid, ...;
a --federated run is its label "federated"), per query type and overall. Resampling the queries with
replacement keeps each query's pair together, so the interval is that of the difference, not of
either mean. Seeded: the same files give the same figures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

SEED = 44
METRICS = ("ndcg@10", "recall@10", "recall@100")


def runs(path: Path) -> dict[str, dict[str, dict]]:
    """label -> qid -> per-query scores, from a single-corpus or a federated --json output."""
    data = json.loads(path.read_text(encoding="utf-8"))
    reports = data.get("runs") or [data["federated"], *data.get("alone", [])]
    return {r["label"]: {q["qid"]: q for q in r["per_query"]} for r in reports}


def interval(differences: np.ndarray, resamples: int, rng: np.random.Generator) -> tuple[float, float, float]:
    """(mean, 2.5 %, 97.5 %) of the mean of paired differences over bootstrap resamples."""
    picks = rng.integers(0, len(differences), size=(resamples, len(differences)))
    means = differences[picks].mean(axis=1)
    return float(differences.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def compare(before: dict[str, dict], after: dict[str, dict], resamples: int) -> list[tuple]:
    rng = np.random.default_rng(SEED)
    paired = [qid for qid in before if qid in after]
    rows = []
    for query_type in [None, *sorted({before[q]["type"] for q in paired})]:
        chosen = [q for q in paired if query_type is None or before[q]["type"] == query_type]
        for metric in METRICS:
            old = np.array([before[q][metric] for q in chosen])
            new = np.array([after[q][metric] for q in chosen])
            mean, low, high = interval(new - old, resamples, rng)
            rows.append((query_type or "all", len(chosen), metric, old.mean(), new.mean(), mean, low, high))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--label", action="append", help="Run label(s) to compare (default: every shared one).")
    parser.add_argument("--resamples", type=int, default=10_000)
    args = parser.parse_args()
    old_runs, new_runs = runs(args.before), runs(args.after)
    for label in args.label or [lb for lb in old_runs if lb in new_runs]:
        print(f"{label}: type n metric before after diff [95 % interval]")
        for query_type, n, metric, old, new, mean, low, high in compare(old_runs[label], new_runs[label], args.resamples):
            mark = " *" if low > 0 or high < 0 else ""
            print(f"  {query_type:8s} {n:4d} {metric:10s} {old:.3f} {new:.3f} {mean:+.3f} [{low:+.3f}, {high:+.3f}]{mark}")


if __name__ == "__main__":
    main()
