"""End-to-end ingest speed: is the pipeline the bottleneck, or the embedder?

Builds a folder from real data (the court decisions and a slice of statutes,
one file per §), ingests it in-process on the embedded default with each
embedder, and prints documents/s, chunks/s, the time inside the embedder vs
everything else, and the embedder alone on the very same inputs.

    .venv/bin/python bench/ingest.py                       # hashing, use-multilingual, e5-small
    .venv/bin/python bench/ingest.py --embedders hashing --statute-sections 400
    .venv/bin/python bench/ingest.py --embedders hashing --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test

With --database-url (a PostgreSQL server) each embedder's run gets a database of its own, created
and dropped here; the index stays the embedded one.
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
from pathlib import Path

import numpy as np
from sqlalchemy import event

from ki_core.embedding import EmbedderWrapper

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def build_corpus(target: Path, decisions: Path, statutes: Path, sections: int, per_file: int) -> int:
    """One file per decision, and one per `per_file` consecutive § (a chapter-sized document)."""
    target.mkdir(parents=True)
    count = 0
    for line in decisions.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        (target / f"decision-{record['doc_id']}.txt").write_text(record["text"], encoding="utf-8")
        count += 1
    grouped: dict[str, list[str]] = defaultdict(list)
    with gzip.open(statutes, "rt", encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            key = f"{record['law']} {record['section']}"
            if key not in grouped and len(grouped) >= sections:
                break
            grouped[key].append(record["text"])
    items = list(grouped.items())
    for n in range(0, len(items), per_file):
        part = items[n : n + per_file]
        text = "\n\n".join(f"{key}\n" + "\n".join(texts) for key, texts in part)
        (target / f"statute-{n:05d}.txt").write_text(text, encoding="utf-8")
        count += 1
    return count


class TimedEmbedder(EmbedderWrapper):
    """Counts time inside the embedder and remembers what it embedded."""

    def __init__(self, inner):
        super().__init__(inner)
        self.reset()

    def reset(self) -> None:
        self.seconds, self.cpu_seconds, self.inputs = 0.0, 0.0, []

    def embed_passages(self, texts):
        start, cpu = time.perf_counter(), time.process_time()
        try:
            return self.inner.embed_passages(texts)
        finally:
            self.seconds += time.perf_counter() - start
            self.cpu_seconds += time.process_time() - cpu
            self.inputs.extend(texts)


def warm_up(ctx, folder: Path, sync_folder) -> None:
    """Small documents of their own project through the whole pipeline before the clock starts.

    A worker that has run once has its statement caches, regexes and converters
    warm (the first document costs about 90 ms more than the next), and a sync of
    as many files as these has started the helper process that runs the metadata
    rules ahead (stages.rules_ahead; spawned once per process, about a second of
    imports on the other core). Those one-time costs are start-up, like the model
    load, not throughput.
    """
    from ki_workers.folder_sync import LONG_SYNC_FILES

    folder.mkdir(parents=True)
    for n in range(LONG_SYNC_FILES):
        (folder / f"aufwaermen-{n}.txt").write_text(
            f"Mietvertrag {n}\n\n§ 1 Mietsache\nDer Vermieter vermietet dem Mieter die Wohnung. "
            f"Az. 4 C {n}/05, vgl. § 573 Abs. 2 BGB.\n", encoding="utf-8"
        )
    sync_folder(ctx, folder, "bench-warm-up")
    wait_for_the_rules_helper(ctx)


def wait_for_the_rules_helper(ctx, timeout: float = 60.0) -> None:
    """Until the helper has answered a question: its imports end before the clock starts."""
    helper = ctx.rules_helper
    if helper is None or not helper.alive:
        return
    helper.ask("bench-warm-up-question")
    deadline = time.monotonic() + timeout
    while "bench-warm-up-question" not in helper.arrived and time.monotonic() < deadline and helper.alive:
        helper.collect()
        time.sleep(0.01)
    helper.forget(["bench-warm-up-question"])


class StatementCount:
    """SQL statements and commits the pipeline sends while inside the block: round trips are what a
    PostgreSQL server costs per document, whatever the CPU figures say."""

    def __init__(self, engine):
        self.engine, self.count, self.commits = engine, 0, 0

    def _statement(self, *_args) -> None:
        self.count += 1

    def _commit(self, *_args) -> None:
        self.commits += 1

    def __enter__(self) -> StatementCount:
        event.listen(self.engine, "before_cursor_execute", self._statement)
        event.listen(self.engine, "commit", self._commit)
        return self

    def __exit__(self, *_exc) -> None:
        event.remove(self.engine, "before_cursor_execute", self._statement)
        event.remove(self.engine, "commit", self._commit)


def run(provider: str, corpus: Path, workdir: Path, alone_runs: int = 2, database_url: str | None = None) -> dict:
    from query import fresh_database

    (workdir / provider).mkdir(parents=True, exist_ok=True)
    with fresh_database(database_url, workdir / provider) as url:
        os.environ.update(KI_STATE_DIR=str(workdir / provider), KI_EMBEDDING__PROVIDER=provider, KI_DATABASE__URL=url)
        return measure(provider, corpus, workdir, alone_runs)


def measure(provider: str, corpus: Path, workdir: Path, alone_runs: int) -> dict:
    from ki.commands.storage.store import prepare_store
    from ki_core.config import get_settings
    from ki_core.embedding import CachedEmbedder, VectorCacheFile, uncached_embedder
    from ki_workers import tasks  # noqa: F401 - a worker imports its tasks at start, not per document
    from ki_workers.context import reset_worker_context, worker_context
    from ki_workers.folder_sync import sync_folder

    get_settings.cache_clear()
    reset_worker_context()
    settings = get_settings()
    prepare_store(settings)
    ctx = worker_context()
    timed = TimedEmbedder(uncached_embedder(settings))
    timed.inner.embed_passages(["Aufwärmen des Modells."])  # model load is not pipeline time
    # As in production, behind the on-disk vector cache (empty here: every chunk is a miss),
    # so the cache's reads and writes count as pipeline time.
    cache = VectorCacheFile(workdir / provider / "bench-embeddings.sqlite3")
    ctx._embedder = CachedEmbedder(timed, cache, batch_size=settings.embedding.batch_size)
    warm_up(ctx, workdir / provider / "warm-up", sync_folder)
    timed.reset()
    statements = StatementCount(ctx.engine)
    start, cpu = time.perf_counter(), time.process_time()
    with statements:
        summary = sync_folder(ctx, corpus, "bench")
    total, total_cpu = time.perf_counter() - start, time.process_time() - cpu
    chunks = len(timed.inputs)
    # The embedder alone varies by several per cent between runs: the mean of `alone_runs`.
    alone_embedder = uncached_embedder(settings)
    alone_start, alone_cpu_start = time.perf_counter(), time.process_time()
    for _ in range(alone_runs):
        alone_vectors = alone_embedder.embed_passages(timed.inputs)
        assert np.isfinite(alone_vectors).all()
    alone = (time.perf_counter() - alone_start) / alone_runs
    alone_cpu = (time.process_time() - alone_cpu_start) / alone_runs
    cache.close()
    reset_worker_context()
    return {
        "embedder": provider,
        "documents": summary.files,
        "chunks": chunks,
        "seconds": total,
        "docs_per_s": summary.files / total,
        "chunks_per_s": chunks / total,
        "embedding_s": timed.seconds,
        "other_s": total - timed.seconds,
        "alone_chunks_per_s": chunks / alone if alone else float("inf"),
        "cpu_s": total_cpu,
        "embedding_cpu_s": timed.cpu_seconds,
        "alone_cpu_s": alone_cpu,
        "statements": statements.count,
        "transactions": statements.commits,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedders", default="hashing,use-multilingual,e5-small")
    parser.add_argument("--decisions", type=Path, default=DATA / "decisions" / "decisions.jsonl")
    parser.add_argument("--statutes", type=Path, default=DATA / "statutes" / "bgb.jsonl.gz")
    parser.add_argument("--statute-sections", type=int, default=600, help="How many § of the statute file to add.")
    parser.add_argument("--sections-per-file", type=int, default=10, help="§ per statute document (1: a file per §).")
    parser.add_argument("--alone-runs", type=int, default=2, help="Runs of the embedder alone to average.")
    parser.add_argument("--database-url", default=None,
                        help="a PostgreSQL server (the bench creates and drops its databases); default: a SQLite file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ki-bench-ingest-") as tmp:
        workdir = Path(tmp)
        corpus = workdir / "corpus"
        files = build_corpus(corpus, args.decisions, args.statutes, args.statute_sections, args.sections_per_file)
        print(f"corpus: {files} files in {corpus}", file=sys.stderr)
        rows = [run(provider, corpus, workdir, args.alone_runs, args.database_url) for provider in args.embedders.split(",")]
    header = f"{'embedder':<18}{'docs':>6}{'chunks':>8}{'total s':>9}{'docs/s':>8}{'chunks/s':>10}{'embed s':>9}{'other s':>9}{'alone c/s':>11}{'ratio':>7}"
    print(header)
    for r in rows:
        ratio = r["chunks_per_s"] / r["alone_chunks_per_s"]
        print(
            f"{r['embedder']:<18}{r['documents']:>6}{r['chunks']:>8}{r['seconds']:>9.1f}{r['docs_per_s']:>8.1f}"
            f"{r['chunks_per_s']:>10.1f}{r['embedding_s']:>9.1f}{r['other_s']:>9.1f}{r['alone_chunks_per_s']:>11.1f}{ratio:>7.2f}"
        )
    print(f"ratio = end-to-end chunks/s divided by the embedder alone on the same inputs, mean of {args.alone_runs} runs (target >= 0.85)")
    print()
    print("CPU time of this process (a fairer measure while other jobs share the cores; the models may use more threads):")
    print(f"{'embedder':<18}{'cpu s':>8}{'embed cpu':>11}{'other cpu':>11}{'chunks/cpu-s':>14}{'alone cpu':>11}{'cpu ratio':>11}")
    for r in rows:
        cpu_ratio = r["alone_cpu_s"] / r["cpu_s"] if r["cpu_s"] else float("nan")
        print(
            f"{r['embedder']:<18}{r['cpu_s']:>8.1f}{r['embedding_cpu_s']:>11.1f}{r['cpu_s'] - r['embedding_cpu_s']:>11.1f}"
            f"{r['chunks'] / r['cpu_s']:>14.1f}{r['alone_cpu_s']:>11.1f}{cpu_ratio:>11.2f}"
        )
    print()
    print(f"{'embedder':<18}{'SQL statements':>16}{'per document':>14}{'commits':>9}{'per document':>14}")
    for r in rows:
        print(f"{r['embedder']:<18}{r['statements']:>16}{r['statements'] / r['documents']:>14.1f}"
              f"{r['transactions']:>9}{r['transactions'] / r['documents']:>14.1f}")
    print(f"SQL: {'PostgreSQL' if args.database_url else 'SQLite'}; "
          f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
