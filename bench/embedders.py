"""Speed and retrieval quality of the offline embedders, to choose the default.

Speed: chunks/s of each embedder itself (no cache) on ~200 real 1200-character
chunks of court decisions, and on short statute Absaetze.
Quality: exact dense search over the statutes corpus (text only, not headings)
with the dev queries of the statutes eval: nDCG@10 (linear gain, as trec_eval)
and Recall@10/100, exclude_ids removed before scoring, overall and per type.
Corpus embeddings go through the CachedEmbedder, so a second run takes seconds.

    .venv/bin/python bench/embedders.py --embedders use-multilingual,hashing
    nohup .venv/bin/python bench/embedders.py --embedders e5-small > e5.log 2>&1 &
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ki_core.config import load_settings
from ki_query.federation.evaluation import ndcg_at, recall_at  # the product's own scoring, one definition
from ki_core.embedding import (
    CACHE_FILE_NAME,
    CachedEmbedder,
    Embedder,
    VectorCacheFile,
    uncached_embedder,
)

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"
CHUNK_CHARS = 1200
PROGRESS_EVERY = 512

Record = tuple[str, str]  # (statute record id, text)


@dataclass(frozen=True)
class EvalQuery:
    qid: str
    type: str
    query: str
    relevant: dict[str, int]
    exclude_ids: frozenset[str]


@dataclass
class Scores:
    ndcg10: list[float] = field(default_factory=list)
    recall10: list[float] = field(default_factory=list)
    recall100: list[float] = field(default_factory=list)

    def add(self, ranked: list[str], query: EvalQuery) -> None:
        self.ndcg10.append(ndcg_at(ranked, query.relevant, 10))
        self.recall10.append(recall_at(ranked, query.relevant, 10))
        self.recall100.append(recall_at(ranked, query.relevant, 100))

    def means(self) -> dict[str, float]:
        return {
            "n": len(self.ndcg10),
            "ndcg@10": float(np.mean(self.ndcg10)),
            "recall@10": float(np.mean(self.recall10)),
            "recall@100": float(np.mean(self.recall100)),
        }


# ------------------------------------------------------------------ data


def load_statutes(data_dir: Path) -> list[Record]:
    """(record id, text) of every Absatz of statutes/, in file order."""
    records = []
    for path in sorted((data_dir / "statutes").glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            records.extend((r["id"], r["text"]) for r in map(json.loads, lines))
    return records


def load_queries(data_dir: Path) -> list[EvalQuery]:
    path = data_dir / "eval" / "statute-queries-dev.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [
        EvalQuery(r["qid"], r["type"], r["query"], r["relevant"], frozenset(r["exclude_ids"]))
        for r in rows
    ]


def decision_chunks(data_dir: Path, count: int) -> list[str]:
    """Consecutive ~CHUNK_CHARS windows of the decisions, round-robin so every court is in."""
    path = data_dir / "decisions" / "decisions.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"] for line in lines if line]
    chunks = [c for row in _round_robin([windows(t, CHUNK_CHARS) for t in texts]) for c in row]
    return chunks[:count]


def windows(text: str, size: int) -> list[str]:
    """Cuts of up to `size` characters ending at a space, overlapping by a quarter.

    The overlap only serves to get ~200 full-size chunks out of 15 decisions;
    throughput does not depend on it. The short tail of each text is dropped.
    """
    cuts, start = [], 0
    while len(text) - start >= size:
        end = text.rfind(" ", start + size // 2, start + size) + 1 or start + size
        cuts.append(text[start:end].strip())
        start = text.find(" ", start + size * 3 // 4) + 1 or end
    return cuts


def _round_robin(lists: list[list[str]]) -> list[list[str]]:
    depth = max(map(len, lists))
    return [[items[i] for items in lists if i < len(items)] for i in range(depth)]


def absatz_sample(records: list[Record], count: int) -> list[str]:
    step = max(1, len(records) // count)
    return [text for _, text in records[::step][:count]]


def corpus_subset(
    records: list[Record], queries: list[EvalQuery], limit: int | None
) -> list[Record]:
    """All records, or with --limit the relevant ones plus `limit` others (development only)."""
    if limit is None:
        return records
    relevant = {rid for q in queries for rid in q.relevant}
    others = [r for r in records if r[0] not in relevant][:limit]
    return [r for r in records if r[0] in relevant] + others


# ------------------------------------------------------------------ metrics


def ranked_ids(scores: np.ndarray, ids: list[str], excluded: list[int], k: int) -> list[str]:
    """The top-k ids by score after removing the excluded rows."""
    scores = scores.copy()
    scores[excluded] = -np.inf
    k = min(k, len(ids))
    top = np.argpartition(-scores, k - 1)[:k]
    return [ids[i] for i in top[np.argsort(-scores[top], kind="stable")]]


# ------------------------------------------------------------------ runs


def build_embedder(name: str) -> Embedder:
    """The product's own embedder for `name`, uncached: the same code path as ingest."""
    return uncached_embedder(load_settings(embedding={"provider": name, "model": "bench"}))


def chunks_per_second(embedder: Embedder, texts: list[str]) -> float:
    # Loads the model outside the clock; not one of `texts`, so no cache hit later.
    embedder.embed_passages(["Das Modell wird vor der Messung geladen."])
    started = time.perf_counter()
    embedder.embed_passages(texts)
    return len(texts) / (time.perf_counter() - started)


def cpu_ms_per_chunk(embedder: Embedder, texts: list[str]) -> float:
    """CPU time of this process per chunk: stays meaningful when other jobs share the cores."""
    started = time.process_time()
    embedder.embed_passages(texts)
    return 1000 * (time.process_time() - started) / len(texts)


def cold_cache_chunks_per_second(embedder: Embedder, texts: list[str], batch_size: int) -> float:
    """Throughput through a CachedEmbedder on an empty cache file: what a first ingest pays."""
    with tempfile.TemporaryDirectory() as scratch:
        cache = VectorCacheFile(Path(scratch) / CACHE_FILE_NAME)
        speed = chunks_per_second(CachedEmbedder(embedder, cache, batch_size=batch_size), texts)
        cache.close()
    return speed


def embed_corpus(embedder: CachedEmbedder, texts: list[str]) -> np.ndarray:
    """Corpus vectors via the cache, with progress on stderr for long runs."""
    started = time.perf_counter()
    parts = []
    for start in range(0, len(texts), PROGRESS_EVERY):
        parts.append(embedder.embed_passages(texts[start : start + PROGRESS_EVERY]))
        done = start + len(parts[-1])
        rate = done / max(time.perf_counter() - started, 1e-9)
        eta = (len(texts) - done) / rate
        progress = f"{done}/{len(texts)} ({rate:.1f}/s, eta {eta / 60:.1f} min)"
        print(f"  [{embedder.signature}] {progress}", file=sys.stderr, flush=True)
    return np.vstack(parts)


def evaluate(embedder: CachedEmbedder, records: list[Record], queries: list[EvalQuery]) -> dict:
    ids = [rid for rid, _ in records]
    row_of = {rid: i for i, rid in enumerate(ids)}
    started = time.perf_counter()
    matrix = embed_corpus(embedder, [text for _, text in records])
    embed_seconds = time.perf_counter() - started
    by_type: dict[str, Scores] = defaultdict(Scores)
    for query in queries:
        excluded = [row_of[rid] for rid in query.exclude_ids if rid in row_of]
        ranked = ranked_ids(matrix @ embedder.embed_query(query.query), ids, excluded, 100)
        by_type["all"].add(ranked, query)
        by_type[query.type].add(ranked, query)
    return {
        "corpus_records": len(records),
        "corpus_embed_seconds": round(embed_seconds, 1),
        "cache_hits": embedder.hits,
        "cache_misses": embedder.misses,
        "scores": {name: scores.means() for name, scores in sorted(by_type.items())},
    }


def run_one(name: str, args: argparse.Namespace, data: dict) -> dict:
    embedder = build_embedder(name)
    result: dict = {"embedder": embedder.signature}
    if not args.skip_speed:
        result["chunks_per_s_1200"] = round(chunks_per_second(embedder, data["chunks"]), 1)
        result["cold_cache_chunks_per_s_1200"] = round(
            cold_cache_chunks_per_second(embedder, data["chunks"], args.batch_size), 1
        )
        result["absaetze_per_s"] = round(chunks_per_second(embedder, data["absaetze"]), 1)
        result["cpu_ms_per_chunk_1200"] = round(cpu_ms_per_chunk(embedder, data["chunks"][:50]), 1)
        result["load_average"] = round(os.getloadavg()[0], 1)
        print(f"{name}: {json.dumps(result)}", file=sys.stderr, flush=True)
    if not args.skip_quality:
        cache = VectorCacheFile(Path(args.cache_dir) / CACHE_FILE_NAME)
        cached = CachedEmbedder(embedder, cache, batch_size=args.batch_size)
        result.update(evaluate(cached, data["corpus"], data["queries"]))
        cache.close()
    return result


def report(results: list[dict], data: dict) -> str:
    lines = [
        f"speed: {len(data['chunks'])} decision chunks of ~{CHUNK_CHARS} chars "
        f"(mean {np.mean([len(c) for c in data['chunks']]):.0f}), {len(data['absaetze'])} Absaetze "
        f"(mean {np.mean([len(t) for t in data['absaetze']]):.0f} chars)",
        f"quality: {len(data['corpus'])} records, {len(data['queries'])} queries, "
        "exact search, text only",
        "chunks/s: the embedder alone; cached: the same through a CachedEmbedder on an empty cache;",
        "cpu ms: CPU time per 1200-char chunk (all threads); load: 1-min load average at the end",
        "",
        f"{'embedder':<22}{'chunks/s':>10}{'cached':>8}{'Abs./s':>9}{'cpu ms':>8}{'load':>6}"
        f"{'nDCG@10':>9}{'R@10':>7}{'R@100':>7}"
        f"{'xref':>7}{'heading':>8}{'caselaw':>8}{'embed s':>9}",
    ]
    for r in results:
        s = r.get("scores", {})

        def cell(key: str, metric: str = "ndcg@10", width: int = 7) -> str:
            return f"{s[key][metric]:>{width}.3f}" if key in s else " " * (width - 1) + "-"

        lines.append(
            f"{r['embedder']:<22}{r.get('chunks_per_s_1200', '-'):>10}"
            f"{r.get('cold_cache_chunks_per_s_1200', '-'):>8}{r.get('absaetze_per_s', '-'):>9}"
            f"{r.get('cpu_ms_per_chunk_1200', '-'):>8}{r.get('load_average', '-'):>6}"
            f"{cell('all', width=9)}{cell('all', 'recall@10')}{cell('all', 'recall@100')}"
            f"{cell('xref')}{cell('heading', width=8)}{cell('caselaw', width=8)}"
            f"{r.get('corpus_embed_seconds', '-'):>9}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--embedders", default="use-multilingual,e5-small,hashing")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--cache-dir", default=".ki/embeddings")
    parser.add_argument(
        "--limit", type=int, default=None, help="embed the relevant records plus this many others"
    )
    parser.add_argument("--speed-chunks", type=int, default=200)
    parser.add_argument("--speed-absaetze", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    records = load_statutes(args.data_dir)
    queries = load_queries(args.data_dir)
    data = {
        "chunks": decision_chunks(args.data_dir, args.speed_chunks),
        "absaetze": absatz_sample(records, args.speed_absaetze),
        "corpus": corpus_subset(records, queries, args.limit),
        "queries": queries,
    }
    names = [name.strip() for name in args.embedders.split(",") if name.strip()]
    results = [run_one(name, args, data) for name in names]
    print(report(results, data))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
