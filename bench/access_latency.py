"""How long an ACL change takes to reach search while the embed pool is buried in a large upload.

Starts every Procfile process under honcho (tests/ki/production_stack.py) on a
private Redis, a fresh PostgreSQL database and the chosen search backend (the
shared OpenSearch node under an index of its own, or the embedded index),
with a deliberately slowed embedder (bench/slow_embed_worker.py: SECONDS per
chunk, no CPU). Then:

1. a few target documents (visible to alice and bob) are uploaded and indexed;
2. a large upload (DOCUMENTS x ~CHUNKS chunks) fills ki.index: a backlog of
   DOCUMENTS x CHUNKS x SECONDS seconds of embedding;
3. CHANGES signed `acl.changed` webhooks alternately revoke and grant bob on a
   target; from each 202 it measures until bob's HTTP search shows the change
   (in force in SQL) and until the version's index watermark reaches its
   access_version (the index's access fields updated).

Prints p50 / p95 / max per kind (revocation, grant) and per measure (SQL, index),
and the ki.index queue depth at the start and end of the measurements.

    .venv/bin/python bench/access_latency.py --backend embedded|opensearch \\
        [--documents 300] [--seconds-per-chunk 5] [--changes 40]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from sqlalchemy import func, select

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))

from ki_core.db import make_engine, session_factory  # noqa: E402
from ki_core.models import Document, DocumentVersion, ProcessingState  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402
from tests.ki.production_stack import KEYS, PrivateRedis, Stack, free_port, wait_for  # noqa: E402
from tests.ki.test_production_smoke import production_env  # noqa: E402
from tests.ki_workers.dms_support import acl_changed, content_server, upserted  # noqa: E402

REDIS_PORT = 6393
TARGETS = 4
PARAGRAPH = ("Der Mieter hat die Betriebskosten nach § 556 BGB monatlich vorauszuzahlen; über die Vorauszahlungen "
             "ist jährlich abzurechnen. Die Abrechnung ist dem Mieter spätestens bis zum Ablauf des zwölften Monats "
             "nach Ende des Abrechnungszeitraums mitzuteilen. ")


def main() -> None:
    args = parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="ki-access-bench-"))
    os.chmod(workdir, 0o755)
    database = f"ki_bench_{uuid.uuid4().hex[:10]}"
    index_name = f"bench-access-{uuid.uuid4().hex[:8]}"
    private_redis = PrivateRedis(workdir / "redis", port=REDIS_PORT)
    stack = None
    try:
        url = create_database(database)
        private_redis.start()
        with content_server() as server:
            stack = start_stack(args, workdir, url, private_redis, server.base_url, index_name)
            report(args, stack, url, measure(args, stack, url))
    finally:
        if stack is not None:
            stack.kill()
        private_redis.stop()
        drop_database(database)
        if args.backend == "opensearch":
            httpx.delete(f"{args.opensearch}/{index_name}*", timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["embedded", "opensearch"], required=True)
    parser.add_argument("--opensearch", default="http://127.0.0.1:9200")
    parser.add_argument("--documents", type=int, default=300, help="documents of the large upload")
    parser.add_argument("--paragraphs", type=int, default=24, help="per document (~8 chunks of 1,200 characters)")
    parser.add_argument("--seconds-per-chunk", type=float, default=5.0, help="the slowed embedder's cost per chunk")
    parser.add_argument("--changes", type=int, default=40)
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between ACL changes")
    return parser.parse_args()


def start_stack(args, workdir: Path, url: str, broker: PrivateRedis, content: str, index_name: str) -> Stack:
    ports = {"api": free_port(), "ingress": free_port(), "flower": free_port()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("KI_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(production_env(url, broker.url, args.opensearch, content, ports, workdir))
    env.update({
        "KI_SEARCH__BACKEND": args.backend,
        "KI_RETRIEVAL__INDEX_NAME": index_name,
        "KI_SWEEP__INTERVAL_SECONDS": "30",
        "KI_SWEEP__EVENT_REDISPATCH_AFTER_SECONDS": "300",
        "KI_SWEEP__STUCK_VERSION_AFTER_SECONDS": "3600",
        "KI_BROKER__VISIBILITY_TIMEOUT_SECONDS": "3600",
        "BENCH_EMBED_SECONDS_PER_CHUNK": str(args.seconds_per_chunk),
        "PYTHONPATH": str(ROOT),
    })  # fmt: skip
    procfile = workdir / "Procfile"
    procfile.write_text(slowed_procfile((ROOT / "Procfile").read_text()))
    stack = Stack(workdir, env, ports, redis=broker, opensearch=None, procfile=procfile)
    stack.start()
    return stack


def slowed_procfile(text: str) -> str:
    """The Procfile with the embed-worker's `celery` replaced by the slowed embedder's wrapper."""
    wrapper = f"python {ROOT / 'bench' / 'slow_embed_worker.py'} "
    return "\n".join(line.replace("celery ", wrapper, 1) if line.startswith("embed-worker:") else line
                     for line in text.splitlines()) + "\n"


# ------------------------------------------------------------------ measure


def measure(args, stack: Stack, url: str) -> dict:
    sessions = session_factory(make_engine(url))
    minutes = iter(range(10, 10_000_000))
    targets = [f"TARGET-{n}" for n in range(TARGETS)]
    for n, object_id in enumerate(targets):
        stack.deliver(upserted(object_id, text=f"Zielakte{n} Mietvertrag. " + PARAGRAPH, acl=both(), minutes=next(minutes)))
    wait_for(lambda: all(version_of(sessions, o) and version_of(sessions, o).processing_state == ProcessingState.INDEXED
                         for o in targets), 300, "the target documents indexed", interval=1.0)
    for n in range(args.documents):
        # Each paragraph its own text: identical chunks are embedded once, which would shrink the backlog.
        text = "".join(f"Absatz {p} der Akte {n}. {PARAGRAPH}" for p in range(args.paragraphs))
        stack.deliver(upserted(f"BULK-{n}", text=text,
                               acl=[{"principal": "alice"}], minutes=next(minutes)))
    depth_before = waiting_versions(sessions, TARGETS + args.documents)
    results: dict[tuple[str, str], list[float]] = {}
    granted = dict.fromkeys(targets, True)
    for change in range(args.changes):
        object_id = targets[change % TARGETS]
        granted[object_id] = not granted[object_id]
        kind = "grant" if granted[object_id] else "revocation"
        acl = both() if granted[object_id] else [{"principal": "alice"}]
        before = version_of(sessions, object_id).access_version
        event = acl_changed(object_id, acl, minutes=next(minutes))
        assert stack.webhook(event) == 202
        accepted = time.monotonic()
        sql, index = until_applied(stack, sessions, object_id, change % TARGETS, granted[object_id], before, accepted)
        results.setdefault((kind, "sql"), []).append(sql)
        results.setdefault((kind, "index"), []).append(index)
        time.sleep(args.pause)
    return {"results": results, "depth_before": depth_before, "depth_after": waiting_versions(sessions, TARGETS + args.documents)}


def both() -> list[dict]:
    return [{"principal": "alice"}, {"principal": "bob"}]


def until_applied(stack: Stack, sessions, object_id: str, number: int, visible: bool, before: int,
                  accepted: float, timeout: float = 300.0) -> tuple[float, float]:
    """Seconds from acceptance until bob's search agrees, and until the index watermark has caught up."""
    sql = index = None
    while time.monotonic() - accepted < timeout and (sql is None or index is None):
        if sql is None and bob_sees(stack, sessions, f"Zielakte{number}", object_id) == visible:
            sql = time.monotonic() - accepted
        version = version_of(sessions, object_id)
        if index is None and version.access_version > before and version.indexed_access_version == version.access_version:
            index = time.monotonic() - accepted
        time.sleep(0.05)
    if sql is None or index is None:
        raise SystemExit(f"{object_id}: the change did not arrive within {timeout:.0f} s\n{stack.logs()}")
    return sql, index


def bob_sees(stack: Stack, sessions, word: str, object_id: str) -> bool:
    response = httpx.post(f"{stack.api}/v1/search", json={"query": word, "limit": 10},
                          headers={"X-API-Key": KEYS["bob"]}, timeout=30)
    response.raise_for_status()
    documents = {hit["document_id"] for hit in response.json()["hits"]}
    with sessions() as session:
        return session.scalar(select(Document.id).where(Document.key == object_id)) in documents


def version_of(sessions, object_id: str) -> DocumentVersion | None:
    with sessions() as session:
        return session.scalar(select(DocumentVersion).join(Document, Document.id == DocumentVersion.document_id)
                              .where(Document.key == object_id))


def waiting_versions(sessions, accepted: int) -> int:
    """Versions accepted but not yet indexed: the embedding backlog (ki.ingest and ki.index together)."""
    with sessions() as session:
        indexed = session.scalar(select(func.count()).select_from(DocumentVersion).where(
            DocumentVersion.processing_state == ProcessingState.INDEXED))
    return accepted - indexed


# ------------------------------------------------------------------- report


def report(args, stack: Stack, url: str, measured: dict) -> None:
    chunks_per_document = max(1, round((len(PARAGRAPH) + 22) * args.paragraphs / 1200))
    backlog = measured["depth_before"] * chunks_per_document * args.seconds_per_chunk
    print(f"backend {args.backend}; large upload {args.documents} documents (~{chunks_per_document} chunks each), "
          f"embedder slowed to {args.seconds_per_chunk} s/chunk; {measured['depth_before']} versions waiting to be "
          f"embedded at the first change (~{backlog / 3600:.1f} h of embedding), {measured['depth_after']} after the last; "
          f"{args.changes} ACL changes, {args.pause} s apart")
    for (kind, where), values in sorted(measured["results"].items()):
        print(f"  {kind:<10} {where:<5} n={len(values):>3}  p50 {pct(values, 50):6.2f} s  "
              f"p95 {pct(values, 95):6.2f} s  max {max(values):6.2f} s")
    print(json.dumps({f"{k}_{w}": [round(v, 3) for v in vs] for (k, w), vs in measured["results"].items()}))


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


if __name__ == "__main__":
    main()
