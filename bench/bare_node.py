"""The product's OpenSearch path side by side with the bare node: how much is the node, how much ki.

One run on one node, same mapping (`index_body`), same documents (bench/index.py's statute chunks,
random unit vectors unless --e5 gives real ones), variants interleaved round by round; the machine's
load average is printed beside every table, since the machine is shared.

(a) bulk: the product's `OpenSearchIndex.bulk` (IndexChunk in, BULK_BATCH_ITEMS per `_bulk` request) against
    opensearch-py's `helpers.streaming_bulk` (batch sizes swept) and `helpers.parallel_bulk` (2 threads)
    of pre-built actions; every load into a fresh index with refresh_interval -1, one refresh included.
(b) search: the product's `multi_search` + RRF fusion (scope as compiled: whole projects) against a bare
    `_msearch` of the same three leg bodies with the same filter, both at the product's leg depth.
    Not included on either side: scope compilation and SQL re-verification (bench/scope.py, bench/query.py).
(c) access-only change of N documents: `update_access` against bare `_bulk` partial updates of the same
    fields on the same chunks.
(d) recall@10 of the kNN leg against exact `script_score` (knn_score) with the same filter at 1 %, 10 %,
    50 % and 90 % scopes, for k (= size) 10, 100 and the product's depth, and with ef_search raised.

    .venv/bin/python bench/bare_node.py [--n 10000] [--rounds 2] [--queries 40] [--access-docs 200]
        [--e5 /tmp/e5.npz] [--opensearch-url http://127.0.0.1:9200]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import backends
import numpy as np
from index import DEFAULT_DATA, DOCUMENTS, PROJECTS, Corpus, build_corpus, chunk, queries
from opensearchpy import helpers

from ki_core.config import RetrievalSettings
from ki_core.search.contract import IndexOp
from ki_core.search.embedded import EmbeddedIndex
from ki_core.search.opensearch import (
    ACCESS_SUFFIX,
    BULK_BATCH_ITEMS,
    OpenSearchIndex,
    access_index_body,
    chunk_document,
    filter_clauses,
    index_body,
    leg_body,
    make_client,
)
from ki_core.search.types import AccessProjection, Leg, MultiSearchRequest, ScopeFilter
from ki_query.fusion import fuse
from ki_query.retrieval import RANKED_LEG_DEPTH

RETRIEVAL = RetrievalSettings()
WEIGHTS = {"lexical": RETRIEVAL.weight_lexical, "semantic": RETRIEVAL.weight_semantic,
           "identifier": RETRIEVAL.weight_identifier}


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} / {five:.1f} (1 / 5 min, 2 cores)"


def p50_p95(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


class Node:
    """Fresh concrete indices of the product's body on one node; each deleted at the end."""

    def __init__(self, url: str, dims: int) -> None:
        self.settings = backends.opensearch_settings(url, dims, "unused")
        self.client = make_client(self.settings.search.opensearch)  # the bench timeout is in the settings
        self.dims = dims
        self.created: list[str] = []

    def fresh(self, bulk_load: bool = True, name: str | None = None) -> str:
        name = name or f"ki-bare-{uuid.uuid4().hex[:10]}"
        body = index_body(self.settings.retrieval, self.settings.search.opensearch, self.dims, None)
        if bulk_load:
            body["settings"]["index"]["refresh_interval"] = "-1"
        self.client.indices.create(index=name, body=body)
        # The product's projection index beside it (bare writes leave it empty).
        self.client.indices.create(index=name + ACCESS_SUFFIX, body=access_index_body(self.settings.search.opensearch, None))
        self.created.append(name)
        return name

    def product(self, name: str, bulk_concurrency: int | None = None) -> OpenSearchIndex:
        opensearch = self.settings.search.opensearch
        if bulk_concurrency is not None:
            opensearch = opensearch.model_copy(update={"bulk_concurrency": bulk_concurrency})
        return OpenSearchIndex(self.client, alias=name, dimensions=self.dims, signature="bench",
                               retrieval=self.settings.retrieval, opensearch=opensearch)  # fmt: skip

    def drop(self, name: str) -> None:
        self.client.indices.delete(index=f"{name},{name}{ACCESS_SUFFIX}", params={"ignore_unavailable": "true"})
        self.created.remove(name)

    def close(self) -> None:
        for name in list(self.created):
            self.drop(name)


# ------------------------------------------------------------------ (a) bulk


def product_bulk(node: Node, chunks: list, concurrency: int) -> float:
    name = node.fresh()
    started = time.perf_counter()
    node.product(name, concurrency).bulk(IndexOp(c) for c in chunks)
    node.client.indices.refresh(index=name)
    seconds = time.perf_counter() - started
    node.drop(name)
    return len(chunks) / seconds


def bare_bulk(node: Node, documents: list[dict], batch: int, threads: int) -> float:
    name = node.fresh()
    actions = ({"_index": name, "_id": str(d["chunk_id"]), "_source": d} for d in documents)
    started = time.perf_counter()
    if threads > 1:
        results = helpers.parallel_bulk(node.client, actions, thread_count=threads, chunk_size=batch,
                                        max_chunk_bytes=200 * 2**20)  # fmt: skip
    else:
        results = helpers.streaming_bulk(node.client, actions, chunk_size=batch, max_chunk_bytes=200 * 2**20)
    failed = sum(1 for ok, _ in results if not ok)
    node.client.indices.refresh(index=name)
    seconds = time.perf_counter() - started
    node.drop(name)
    assert not failed, f"{failed} bare bulk items failed"
    return len(documents) / seconds


def bench_bulk(node: Node, chunks: list, rounds: int, batches: list[int]) -> None:
    documents = [chunk_document(c) for c in chunks]
    print(f"\n(a) bulk of {len(chunks):,} chunks ({node.dims}-d), fresh index each, refresh_interval -1, "
          f"final refresh included; {load()}", flush=True)  # fmt: skip
    sweep = {batch: bare_bulk(node, documents, batch, 1) for batch in batches} if len(batches) > 1 else {}
    best = max(sweep, key=sweep.__getitem__) if sweep else batches[0]
    if sweep:
        print("  bare streaming_bulk batch sweep: " + ", ".join(f"{b}: {r:,.0f}/s" for b, r in sweep.items()), flush=True)
    rows: dict[str, list[float]] = {f"product bulk ({BULK_BATCH_ITEMS}/request, 1 in flight)": [],
                                    f"product bulk ({BULK_BATCH_ITEMS}/request, 2 in flight)": [], f"bare streaming_bulk ({best})": [],
                                    f"bare parallel_bulk (2 threads, {best})": []}  # fmt: skip
    for _ in range(rounds):
        for concurrency in (1, 2):
            rows[f"product bulk ({BULK_BATCH_ITEMS}/request, {concurrency} in flight)"].append(product_bulk(node, chunks, concurrency))
        rows[f"bare streaming_bulk ({best})"].append(bare_bulk(node, documents, best, 1))
        rows[f"bare parallel_bulk (2 threads, {best})"].append(bare_bulk(node, documents, best, 2))
        print("  round: " + ", ".join(f"{label} {rates[-1]:,.0f}/s" for label, rates in rows.items())
              + f"   [{load()}]", flush=True)
    bare_best = max(statistics.median(v) for k, v in rows.items() if k.startswith("bare"))
    print(f"  {'path':<40} {'chunks/s (median of rounds)':>28} {'share of best bare':>20}   [{load()}]")
    for label, rates in rows.items():
        rate = statistics.median(rates)
        print(f"  {label:<40} {rate:>28,.0f} {rate / bare_best:>19.0%}   ({', '.join(f'{r:,.0f}' for r in rates)})")


# ------------------------------------------------------------------ (b) search


def scope_of(corpus: Corpus, share: float, rng: random.Random) -> tuple[ScopeFilter, np.ndarray]:
    """Whole projects for 10 % and more; listed documents below (1 % is one project in 50 less)."""
    project_of_chunk = corpus.project_of_document[corpus.document_of[: len(corpus.vectors)]]
    if share < 0.05:
        documents = rng.sample(range(DOCUMENTS), max(1, int(DOCUMENTS * share)))
        return (ScopeFilter(document_ids=frozenset(f"d{d:04d}" for d in documents)),
                np.isin(corpus.document_of[: len(corpus.vectors)], documents))  # fmt: skip
    chosen = rng.sample(range(PROJECTS), max(1, round(PROJECTS * share)))
    return ScopeFilter(project_ids=frozenset(f"p{p:02d}" for p in chosen)), np.isin(project_of_chunk, chosen)


def bench_search(node: Node, name: str, corpus: Corpus, qs: list, rng: random.Random,
                 embedded: EmbeddedIndex | None) -> None:  # fmt: skip
    """Product (OpenSearch), bare `_msearch` and, when given, the embedded backend's multi_search +
    fusion on the same chunks, the same scope and the same requests, in turn per query (order rotated)."""
    scope, _ = scope_of(corpus, 0.10, rng)
    index = node.product(name)
    samples: dict[str, list[float]] = {"product multi_search + fusion (OpenSearch)": [], "bare _msearch, same bodies": []}
    if embedded is not None:
        samples["embedded multi_search + fusion"] = []
    for number, (text, identifier, vector) in enumerate(qs):
        request = MultiSearchRequest(query_text=f"{text} {identifier}", query_vector=tuple(vector.tolist()),
                                     scope=scope, size=RANKED_LEG_DEPTH, identifier_terms=((identifier, 1.5),),
                                     principals=("anna",))  # fmt: skip
        bare_lines = []
        for leg in request.legs_to_send():
            bare_lines += [{"index": name}, leg_body(leg, request)]

        def fused(backend: OpenSearchIndex | EmbeddedIndex, request: MultiSearchRequest = request) -> None:
            result = backend.multi_search(request)
            fuse(result.legs, WEIGHTS, RETRIEVAL.fusion_rrf_k, RETRIEVAL.version_status_boost, request.query_text)

        runs: list[Callable[[], None]] = [lambda: fused(index), lambda lines=bare_lines: node.client.msearch(body=lines)]
        if embedded is not None:
            runs.append(lambda: fused(embedded))
        turn = number % len(runs)
        for label, run in list(zip(samples, runs))[turn:] + list(zip(samples, runs))[:turn]:
            started = time.perf_counter()
            run()
            samples[label].append((time.perf_counter() - started) * 1000)
    print(f"\n(b) full search, 3 legs at depth {RANKED_LEG_DEPTH}, 10 % scope (5 projects), {len(corpus.vectors):,} "
          f"chunks, {len(qs)} queries interleaved; {load()}")  # fmt: skip
    print(f"  {'path':<52} {'p50 ms':>8} {'p95 ms':>8}")
    for label, values in samples.items():
        p50, p95 = p50_p95(values)
        print(f"  {label:<52} {p50:>8.1f} {p95:>8.1f}")
    product, bare = (p50_p95(values)[0] for values in list(samples.values())[:2])
    line = f"  product / bare p50: {product / bare:.2f}x"
    if embedded is not None:
        alone = p50_p95(samples["embedded multi_search + fusion"])[0]
        line += f"; product / embedded p50: {product / alone:.2f}x; bare / embedded p50: {bare / alone:.2f}x"
    print(f"{line}   [{load()}]")


def load_embedded(path: Path, chunks: list, dims: int) -> EmbeddedIndex:
    """The same chunks in the embedded backend (tantivy + faiss) in a scratch directory."""
    embedded = EmbeddedIndex(path, dimensions=dims)
    started = time.perf_counter()
    embedded.bulk(IndexOp(c) for c in chunks)
    embedded.refresh()
    print(f"  embedded backend loaded: {len(chunks):,} chunks in {time.perf_counter() - started:.0f} s", flush=True)
    return embedded


# ------------------------------------------------------------------ (c) access


def bench_access(node: Node, name: str, corpus: Corpus, documents: int, rounds: int, rng: random.Random) -> None:
    index = node.product(name)
    chunks_of: dict[int, list[int]] = {}
    for row, document in enumerate(corpus.document_of[: len(corpus.vectors)].tolist()):
        chunks_of.setdefault(document, []).append(row + 1)
    rows = {"product update_access (a projection per version)": [], "bare _bulk partial updates of the chunks": []}
    chunk_count = 0
    for generation in range(rounds):
        chosen = rng.sample(sorted(chunks_of), documents)
        chunk_count = sum(len(chunks_of[d]) for d in chosen)
        projections = [AccessProjection(document_id=f"d{d:04d}", document_version_id=f"d{d:04d}-v1", chunk_ids=tuple(chunks_of[d]),
                                        allowed_principals=(f"group:g{generation}",), denied_principals=(),
                                        access_version=generation + 10) for d in chosen]  # fmt: skip
        bare: list[dict] = []  # the product's partial-update lines (bulk_lines), written out plainly
        for projection in projections:
            doc = {"allowed_principals": ["bare"], "denied_principals": [], "access_version": generation + 100}
            for chunk_id in projection.chunk_ids:
                bare += [{"update": {"_id": str(chunk_id)}}, {"doc": doc}]
        for label, run in (("product update_access (a projection per version)", lambda p=projections: index.update_access(p)),
                           ("bare _bulk partial updates of the chunks", lambda b=bare: node.client.bulk(body=b, index=name))):
            started = time.perf_counter()
            run()
            rows[label].append(documents / (time.perf_counter() - started))
    print(f"\n(c) access-only change of {documents} documents ({chunk_count} chunks), {rounds} rounds; {load()}")
    for label, rates in rows.items():
        print(f"  {label:<52} {statistics.median(rates):>10,.0f} documents/s   ({', '.join(f'{r:,.0f}' for r in rates)})")
    print(f"  [{load()}]")


# ------------------------------------------------------------------ (d) recall


def exact_top(node: Node, name: str, vector: list[float], clauses: list, k: int = 10) -> list[str]:
    body = {"size": k, "_source": False, "query": {"script_score": {
        "query": {"bool": {"filter": clauses}},
        "script": {"source": "knn_score", "lang": "knn",
                   "params": {"field": "embedding", "query_value": vector, "space_type": "cosinesimil"}}}}}  # fmt: skip
    return [hit["_id"] for hit in node.client.search(index=name, body=body)["hits"]["hits"]]


def knn_top(node: Node, name: str, vector: list[float], clauses: list, k: int, ef_search: int | None) -> list[str]:
    knn: dict = {"vector": vector, "k": k, "filter": {"bool": {"filter": clauses}}}
    if ef_search:
        knn["method_parameters"] = {"ef_search": ef_search}
    body = {"size": k, "_source": False, "query": {"knn": {"embedding": knn}}}
    return [hit["_id"] for hit in node.client.search(index=name, body=body)["hits"]["hits"]][:10]


def bench_recall(node: Node, name: str, corpus: Corpus, vectors: np.ndarray, count: int, label: str,
                 rng: random.Random) -> None:  # fmt: skip
    print(f"\n(d) recall@10 of the kNN leg against exact script_score, {label}, {count} queries per scope; {load()}")
    settings = [(10, None), (100, None), (RANKED_LEG_DEPTH, None), (10, 200), (100, 500)]
    header = "".join(f"{f'k={k}' + (f',ef={ef}' if ef else ''):>16}" for k, ef in settings)
    print(f"  {'scope':<28}{header}")
    for share in (0.01, 0.10, 0.50, 0.90):
        scope, mask = scope_of(corpus, share, rng)
        clauses = filter_clauses(scope, None)
        recalls: dict[tuple, list[float]] = {s: [] for s in settings}
        for _ in range(count):
            query = vectors[rng.randrange(len(vectors))] + np.random.default_rng(rng.randrange(10**6)).normal(
                0, 0.02, vectors.shape[1])  # fmt: skip
            query = (query / np.linalg.norm(query)).astype(float).tolist()
            truth = set(exact_top(node, name, query, clauses))
            for k, ef in settings:
                found = set(knn_top(node, name, query, clauses, k, ef))
                recalls[(k, ef)].append(len(found & truth) / max(1, len(truth)))
        row = "".join(f"{statistics.mean(recalls[s]):>16.3f}" for s in settings)
        print(f"  {f'{share:.0%} ({int(mask.sum()):,} chunks)':<28}{row}")
    print(f"  [{load()}]")


# ------------------------------------------------------------------ main


def e5_corpus(path: Path, data: Path, rng: np.random.Generator) -> tuple[Corpus, int]:
    """Real e5-small vectors as a Corpus of that size: from an npz (vectors and their texts) or, for a
    directory, every vector of ki's embedding cache there (`embeddings.sqlite3`, opened read-only; it
    keeps no texts, so the chunks carry other statute texts: (d) reads only the kNN leg)."""
    texts: list[str] | None = None
    if path.is_dir():
        vectors = cached_vectors(path / "embeddings.sqlite3")
    else:
        saved = np.load(path, allow_pickle=True)
        vectors, texts = saved["vectors"].astype(np.float32), [str(t) for t in saved["texts"]]
    corpus = build_corpus(len(vectors), vectors.shape[1], data, rng)
    corpus.vectors = vectors
    corpus.texts = texts or corpus.texts
    return corpus, len(vectors)


def cached_vectors(database: Path) -> np.ndarray:
    """The e5 vectors of ki's embedding cache (float32 little-endian blobs), in key order."""
    import sqlite3

    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        rows = connection.execute(
            "SELECT vector FROM vectors WHERE signature LIKE 'e5-small:%' ORDER BY text_sha256").fetchall()
    return np.stack([np.frombuffer(blob, dtype="<f4") for (blob,) in rows]).astype(np.float32)


def loaded_index(node: Node, chunks: list, keep: str | None) -> tuple[str, int]:
    """The index (b)-(d) read and how many of the chunks it holds: fresh and deleted at the end, or
    `keep`, reused when it holds the first K chunks (chunk ids 1..K: a load of this corpus that was
    stopped; a 100,000-chunk load on a busy shared 2-core node takes longer than the measurements)."""
    if keep and node.client.indices.exists(index=keep):
        node.client.indices.refresh(index=keep)
        held = node.client.count(index=keep)["count"]
        highest = node.client.search(index=keep, body={"size": 0, "aggs": {"top": {"max": {"field": "chunk_id"}}}})
        if 0 < held <= len(chunks) and int(highest["aggregations"]["top"]["value"]) == held:
            print(f"\nreusing index {keep}: the first {held:,} of the {len(chunks):,} chunks; {load()}", flush=True)
            return keep, held
        node.client.indices.delete(index=f"{keep},{keep}{ACCESS_SUFFIX}", params={"ignore_unavailable": "true"})
    name = node.fresh(name=keep)
    if keep:
        node.created.remove(keep)
    started = time.perf_counter()
    node.product(name).bulk(IndexOp(c) for c in chunks)
    node.client.indices.refresh(index=name)
    print(f"\nproduct bulk of the {len(chunks):,} chunks for (b)-(d): {len(chunks) / (time.perf_counter() - started):,.0f} "
          f"chunks/s (refresh_interval -1, one refresh); {load()}", flush=True)  # fmt: skip
    return name, len(chunks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--recall-queries", type=int, default=20)
    parser.add_argument("--access-docs", type=int, default=200)
    parser.add_argument("--e5", type=Path, help="npz of e5 vectors and texts, or a ki embedding cache directory "
                        "(KI_EMBEDDING__CACHE_DIR of an e5-small run, read-only): recall on real vectors")
    parser.add_argument("--bulk-n", type=int, help="chunks per load in (a) (default --n)")
    parser.add_argument("--keep-index", help="index name for (b)-(d), kept at the end and reused when it holds --n chunks")
    parser.add_argument("--embedded", action="store_true", help="(b) also runs the embedded backend on the same chunks")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--opensearch-url", default=backends.DEFAULT_OPENSEARCH_URL)
    parser.add_argument("--only", default="abcd", help="which tables, e.g. 'bd'")
    parser.add_argument("--bulk-batches", type=int, nargs="+", default=[250, 500, 1000],
                        help="bare streaming_bulk batch sizes to sweep (one: no sweep, that size)")
    args = parser.parse_args()
    backends.terminate_like_ctrl_c()
    rng = random.Random(11)
    corpus = build_corpus(args.n, args.dims, args.data, np.random.default_rng(3))
    chunks = [chunk(corpus, i) for i in range(args.n)]
    node = Node(args.opensearch_url, args.dims)
    try:
        if "a" in args.only:
            bench_bulk(node, chunks[: args.bulk_n or args.n], args.rounds, args.bulk_batches)
        if not set(args.only) & set("bcd"):
            return 0
        name, held = loaded_index(node, chunks, args.keep_index)
        chunks, corpus.vectors = chunks[:held], corpus.vectors[:held]
        if "b" in args.only:
            with tempfile.TemporaryDirectory(prefix="ki-bare-embedded-") as scratch:
                embedded = load_embedded(Path(scratch), chunks, args.dims) if args.embedded else None
                bench_search(node, name, corpus, queries(corpus, args.queries, rng, args.dims), rng, embedded)
                if embedded is not None:
                    embedded.close()
        if "c" in args.only:
            bench_access(node, name, corpus, args.access_docs, args.rounds, rng)
        if "d" in args.only:
            bench_recall(node, name, corpus, corpus.vectors, args.recall_queries,
                         f"{len(chunks):,} random {args.dims}-d vectors", rng)  # fmt: skip
            if args.e5:
                e5, count = e5_corpus(args.e5, args.data, np.random.default_rng(4))
                e5_node = Node(args.opensearch_url, e5.vectors.shape[1])
                e5_name = e5_node.fresh(bulk_load=False)
                e5_node.product(e5_name).bulk(IndexOp(chunk(e5, i)) for i in range(count))
                e5_node.client.indices.refresh(index=e5_name)
                try:
                    bench_recall(e5_node, e5_name, e5, e5.vectors, args.recall_queries,
                                 f"{count:,} statute Absätze embedded with e5-small", rng)  # fmt: skip
                finally:
                    e5_node.close()
    finally:
        node.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
