"""Train the offline reranker (ki_query/rerank) on queries over loaded training corpora.

The shipped model: the eight corpora of bench/training/README.md (53 laws of statutes-extra that
no evaluation set covers), each with its generated xref and heading queries and the handwritten
lay questions and decision-style sentences of bench/training:

    for g in a b c d e f g h; do   # the laws of each corpus: bench/training/README.md
        python bench/eval_sets.py train-$g /tmp/gen-train-$g.jsonl ../shared/data/statutes-extra/{...}.jsonl.gz \
            --xref 300 --heading 200
        KI_EMBEDDING__PROVIDER=e5-small ki corpus load train-$g ../shared/data/statutes-extra/{...}.jsonl.gz
    done
    KI_EMBEDDING__PROVIDER=e5-small python bench/train_reranker.py --cache /tmp/lists \
        --corpus train-a --queries /tmp/gen-train-a.jsonl,bench/training/lay-train-a.jsonl,bench/training/decision-train-a.jsonl \
        ... (the same for train-b to train-h) --out src/ki_query/rerank/offline-ranker.json

`--check CORPUS=QUERIES` scores the new model on a development set without a `ki eval` run per
variant: its candidate lists and each single leg's nDCG@10 are retrieved once (cached in
`--cache`), then nDCG@10 fused and reranked, and how often the reranked hybrid is at or above the
better single leg, are computed from the lists. These sets pick a variant; they never train it.

    python bench/train_reranker.py --cache /tmp/lists [--corpus ... --queries ...] \
        --check statutes=tests/fixtures/eval/statutes-decisions.jsonl --check extra16=tests/fixtures/eval/extra16-caselaw.jsonl

Training pairs: every training query (an xref query is a citing Absatz with its reference masked,
a heading query a § heading that is not indexed, a caselaw query a handwritten lay question or
court sentence) is run through the corpus retriever without reranking; of its first `--prefix`
fused candidates (its citing Absatz excluded, as in `ki eval`), each pair of a relevant (grade
1-2) and a less relevant candidate is one pair, weighted by the grade difference, each query type
weighing as `--type-balance` says. The laws must never be BGB, ZPO, SGB V or GG (the dev corpus)
nor the laws of tests/fixtures/eval/extra16-*. Prints the 5-fold cross-validated nDCG@10 of the training queries
before and after reranking, then the weights, and writes the model trained on all of them.
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from ki_core.config import load_settings
from ki_core.db import engine_from_settings, session_factory
from ki_core.embedding import embedder_from_settings
from ki_core.search.types import Leg, oversampled_window
from ki_query.federation.corpus_retriever import ALL_LEGS
from ki_query.federation.evaluation import RANKING_DEPTH, load_queries, ndcg_at, ranked_records
from ki_query.federation.registry import CorpusRegistry
from ki_query.rerank.features import FEATURE_NAMES, feature_matrix
from ki_query.rerank.model import LinearRanker, reordered

FOLDS = 5
SINGLE_LEGS = (Leg.LEXICAL, Leg.SEMANTIC)


def candidate_lists(corpus: str, queries_path: Path, prefix: int, *, single_legs: bool = False) -> list[dict]:
    """Per query: what the reranker reads of its candidates, their grades, and the records in fused order;
    with `single_legs`, also the nDCG@10 of the lexical and of the semantic leg alone (as `ki eval` runs them)."""
    settings = load_settings()
    engine = engine_from_settings(settings)
    registry = CorpusRegistry(settings, session_factory(engine), embedder_from_settings(settings))
    rows = []
    try:
        retriever = registry.retriever(corpus)
        queries = load_queries(queries_path)
        for n, query in enumerate(queries, start=1):
            vector = retriever.embedder.embed_query(query.query)
            lookups, ranked = retriever.candidates(
                query.query, vector, legs=ALL_LEGS, where=None,
                size=oversampled_window(RANKING_DEPTH + len(query.exclude_ids)), exclude_records=query.exclude_ids,
            )
            head = ranked[:prefix]
            retriever.count_citations(head)
            row = {
                "query": query,
                "evidence": [r.evidence for r in head],
                "grades": np.array([query.relevant.get(r.hit["metadata"]["record_id"], 0) for r in head]),
                "lookups": [slim(h) for h in lookups],
                "ranked": [slim(r.hit) for r in ranked[:RANKING_DEPTH]],
            }
            if single_legs:
                row["legs"] = {leg.value: single_leg_ndcg(retriever, query, leg) for leg in SINGLE_LEGS}
            rows.append(row)
            if n % 50 == 0:
                print(f"  {n}/{len(queries)} queries", file=sys.stderr)
    finally:
        registry.close()
        engine.dispose()
    return rows


def slim(hit: dict) -> dict:
    """What scoring reads of a hit (its record and §), so that thousands of cached lists stay small."""
    return {"metadata": {key: hit["metadata"][key] for key in ("record_id", "container_id", "section_id")}}


def single_leg_ndcg(retriever, query, leg: Leg, k: int = 10) -> float:
    hits = retriever.query(query.query, top_k=RANKING_DEPTH + len(query.exclude_ids), legs={leg},
                           exclude_records=query.exclude_ids, rerank=False)
    return ndcg_at(ranked_records(hits, query.exclude_ids), query.relevant, k)


def ndcg_of(row: dict, order: list, k: int = 10) -> float:
    ranked = ranked_records([*row["lookups"], *order], row["query"].exclude_ids)
    return ndcg_at(ranked, row["query"].relevant, k)


def fold_of(qid: str) -> int:
    return int(hashlib.sha256(qid.encode()).hexdigest(), 16) % FOLDS


def report(rows: list[dict], prefix: int, l2: float, balance: float) -> None:
    """5-fold cross-validated nDCG@10 per query type, fused vs reranked."""
    before: dict[str, list[float]] = {}
    after: dict[str, list[float]] = {}
    for fold in range(FOLDS):
        train = [r for r in rows if fold_of(r["query"].qid) != fold]
        model = fitted(train, l2=l2, prefix=prefix, balance=balance)
        for row in (r for r in rows if fold_of(r["query"].qid) == fold):
            kind = row["query"].type
            scores = model.scores(row["matrix"]) if len(row["matrix"]) else np.zeros(0)
            before.setdefault(kind, []).append(ndcg_of(row, row["ranked"]))
            after.setdefault(kind, []).append(ndcg_of(row, reordered(row["ranked"], scores, prefix)))
    print(f"{'type':10} {'queries':>7} {'fused':>7} {'reranked':>8}   (nDCG@10, {FOLDS}-fold cross-validated)")
    for kind in sorted(before) + ["all"]:
        b = [x for t in before for x in before[t]] if kind == "all" else before[kind]
        a = [x for t in after for x in after[t]] if kind == "all" else after[kind]
        print(f"{kind:10} {len(b):7d} {np.mean(b):7.3f} {np.mean(a):8.3f}")


def check(model: LinearRanker, label: str, rows: list[dict]) -> None:
    """nDCG@10 fused and reranked per query type, and how often the reranked hybrid is at or above
    the better single leg, on a development set's cached lists."""
    by_type: dict[str, list[tuple[float, float, bool]]] = {}
    for row in rows:
        order = reordered(row["ranked"], model.scores(row["matrix"]), model.prefix) if len(row["matrix"]) else row["ranked"]
        after = ndcg_of(row, order)
        at_or_above = after >= max(row["legs"].values()) - 1e-12
        by_type.setdefault(row["query"].type, []).append((ndcg_of(row, row["ranked"]), after, at_or_above))
    print(f"{label}: {'type':8} {'queries':>7} {'fused':>7} {'reranked':>8} {'at/above':>8}")
    for kind in [*sorted(by_type), "all"]:
        values = [v for t in by_type.values() for v in t] if kind == "all" else by_type[kind]
        before, after, wins = (np.array(column) for column in zip(*values, strict=True))
        print(f"{label}: {kind:8} {len(values):7d} {before.mean():7.3f} {after.mean():8.3f} {int(wins.sum()):5d} ({wins.mean():.0%})")


def cached(path: Path | None, build):
    if path is not None and path.exists():
        return pickle.loads(path.read_bytes())
    rows = build()
    if path is not None:
        path.write_bytes(pickle.dumps(rows))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", default=[],
                        help="a loaded training corpus (never a dev or eval corpus); repeatable, one per --queries")
    parser.add_argument("--queries", action="append", default=[],
                        help="training queries over the --corpus of the same position (.jsonl; several joined by commas)")
    parser.add_argument("--model", type=Path,
                        help="without --corpus: check this model file (default: the shipped one) instead of training")
    parser.add_argument("--out", type=Path, help="where to write the model (default: print only)")
    parser.add_argument("--prefix", type=int, default=100, help="leading candidates the model reorders")
    parser.add_argument("--l2", type=float, default=3e-3, help="L2 weight (the shipped model: 0.003)")
    parser.add_argument("--type-balance", type=float, default=0.25,
                        help="weigh each query type by (its share) ** -this (0: every query the same)")
    parser.add_argument("--describe", default="", help="what the model was trained on, stored in the file")
    parser.add_argument("--cache", type=Path,
                        help="a directory that keeps the candidate lists (a re-fit or re-check skips the retrieval)")
    parser.add_argument("--check", action="append", default=[], metavar="CORPUS=QUERIES",
                        help="a development set to score the model on (repeatable)")
    args = parser.parse_args()
    if len(args.corpus) != len(args.queries):
        parser.error("give one --queries file per --corpus")
    checks = [tuple(item.split("=", 1)) for item in args.check]
    if any(len(item) != 2 for item in checks):
        parser.error("--check takes CORPUS=QUERIES")
    if args.cache:
        args.cache.mkdir(parents=True, exist_ok=True)
    model = trained(args) if args.corpus else LinearRanker.load(args.model)
    for corpus, queries in checks:
        rows = cached(list_file(args.cache, "check", corpus, Path(queries)),
                      lambda: candidate_lists(corpus, Path(queries), args.prefix, single_legs=True))
        with_features(rows)
        check(model, f"{corpus}:{Path(queries).stem}", rows)
    if args.out and args.corpus:
        model.save(args.out)
        print(f"model -> {args.out}")


def trained(args: argparse.Namespace) -> LinearRanker:
    """The model fitted on every training query, after the cross-validated report and with its weights printed."""
    rows = []
    for corpus, files in zip(args.corpus, args.queries, strict=True):
        for queries in (Path(f) for f in files.split(",")):
            rows += cached(list_file(args.cache, "train", corpus, queries),
                           lambda: candidate_lists(corpus, queries, args.prefix))
    with_features(rows)
    report(rows, args.prefix, args.l2, args.type_balance)
    kinds = Counter(r["query"].type for r in rows)
    described = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    model = fitted(rows, l2=args.l2, prefix=args.prefix, balance=args.type_balance,
                   trained_on=args.describe or f"corpora {', '.join(args.corpus)}: {len(rows)} queries ({described})")
    for name, weight in zip(FEATURE_NAMES, model.weights, strict=True):
        print(f"  {name:18} {weight:+.3f}")
    return model


def fitted(rows: list[dict], *, l2: float, prefix: int, balance: float, trained_on: str = "") -> LinearRanker:
    """The model of these rows, each query type weighing (share of the rows) ** -balance.

    balance 0 weighs every query the same, so the 2,400 generated xref queries drown the 640
    handwritten caselaw ones; 1 gives every type the same total; 0.25 (the shipped model) lifts
    caselaw on the development sets (+0.035 nDCG@10 on 156 queries) and costs xref nothing."""
    kinds = Counter(r["query"].type for r in rows)
    weights = [(len(rows) / (len(kinds) * kinds[r["query"].type])) ** balance for r in rows]
    return LinearRanker.fit([(r["matrix"], r["grades"]) for r in rows], l2=l2, prefix=prefix,
                            trained_on=trained_on, query_weights=weights)


def list_file(cache: Path | None, kind: str, corpus: str, queries: Path) -> Path | None:
    return cache / f"{kind}-{corpus}-{queries.stem}.pickle" if cache else None


def with_features(rows: list[dict]) -> None:
    """Features from the cached evidence: a re-fit with new features needs no retrieval."""
    for row in rows:
        row["matrix"] = feature_matrix(row["evidence"], row["query"].query)


if __name__ == "__main__":
    main()
