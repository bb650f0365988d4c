"""Re-verification latency: ki_core.acl.visible_versions for 25, 120 and 500 version ids.

Uses bench/query.py's corpus and grant layouts (about 11,000 documents of statute
sections in 100 projects, drafts, local files, DMS objects with known ACLs, document
allows and denies, 1,000 other people in 100 groups), without chunks, in a fresh
PostgreSQL database or SQLite file. For each caller and set size it draws sets of
version ids from the caller's scope (what index hits are) and prints p50/p95 ms of
visible_versions. On PostgreSQL it does so twice: with the default plan cache (psycopg
prepares a statement on its 5th execution per connection and PostgreSQL soon settles on
a generic plan: the steady state of a warm pool) and with plan_cache_mode =
force_custom_plan (every execution planned with the actual ids: a fresh connection's
first executions), and prints the plan's execution time, hashed SubPlans and node types
for one 120-id set (EXPLAIN ANALYZE, a custom plan).

    .venv/bin/python bench/verify.py [--database-url URL | --sqlite] [--runs 40]
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from query import CALLERS, DEFAULT_DATA, add_access, build_rows, fresh_database, load_paragraphs, p50_p95, write_sql
from sqlalchemy import Engine, event, select, text

from ki_core.acl import visible_versions
from ki_core.principals import viewer_for
from ki_core.config import Settings
from ki_core.db import make_engine, session_factory
from ki_core.embedding import HashingEmbedder
from ki_core.models import Chunk, Document, DocumentVersion, Grant
from ki_query.scope import AccessService

SIZES = (25, 120, 500)


def scoped_versions(session, access: AccessService, principal: str) -> list[str]:
    """Every version of a document in the caller's compiled scope: what the index can return."""
    scope = access.compile_scope([principal])
    rows = session.execute(select(DocumentVersion.id, Document.project_id, Document.id).join(Document, Document.id == DocumentVersion.document_id))
    return sorted(v for v, project, document in rows if scope.admits(project, document))


def timings(session, viewer, versions: list[str], size: int, runs: int, rng: random.Random) -> tuple[list[float], int]:
    samples, shown = [], 0
    for _ in range(runs):
        ids = rng.sample(versions, min(size, len(versions)))
        started = time.perf_counter()
        shown += len(visible_versions(session, viewer, ids))
        samples.append((time.perf_counter() - started) * 1000)
    return samples, shown // runs


class PlanCapture:
    """Turns the next statement into EXPLAIN ANALYZE and keeps the plan lines (PostgreSQL only)."""

    def __init__(self, engine: Engine) -> None:
        self.armed = False
        self.lines: list[str] = []
        event.listen(engine, "before_cursor_execute", self._before, retval=True)
        event.listen(engine, "after_cursor_execute", self._after)

    def _before(self, _conn, _cursor, statement, parameters, _context, _executemany):
        if self.armed:
            statement = f"EXPLAIN (ANALYZE, TIMING OFF) {statement}"
        return statement, parameters

    def _after(self, _conn, cursor, _statement, _parameters, _context, _executemany) -> None:
        if self.armed:
            self.lines = [row[0] for row in cursor.fetchall()]
            self.armed = False

    def summary(self) -> str:
        node = re.compile(r"\s*(?:->\s*)?([A-Z][A-Za-z ]+?)(?: on | using |\s+\(|$)")
        nodes = Counter(m.group(1).strip() for line in self.lines if (m := node.match(line)))
        hashed = sum(line.count("hashed SubPlan") for line in self.lines)
        subplans = sum(bool(re.match(r"\s*SubPlan", line)) for line in self.lines)
        execution = next((line for line in self.lines if line.startswith("Execution Time")), "")
        top = ", ".join(f"{name} x{n}" for name, n in nodes.most_common(8))
        return f"{execution}; SubPlans {subplans} (hashed {hashed}); nodes: {top}"


def measure(engine: Engine, runs: int, plan_cache_mode: str | None) -> None:
    settings = Settings()
    access = AccessService(session_factory(engine), settings)
    capture = PlanCapture(engine) if plan_cache_mode else None
    rng = random.Random(11)
    mode = f", plan_cache_mode {plan_cache_mode}" if plan_cache_mode else ""
    print(f"\nvisible_versions on {engine.dialect.name}{mode}, {runs} sets per size; ms p50 / p95 (visible per set)")
    print(f"{'caller':<12}" + "".join(f"{n:>22}" for n in SIZES))
    plans = []
    with session_factory(engine)() as session:
        if plan_cache_mode:
            session.execute(text(f"SET plan_cache_mode = {plan_cache_mode}"))
        for name, principal in CALLERS.items():
            viewer = viewer_for(session, [principal], settings)
            versions = scoped_versions(session, access, principal)
            for size in SIZES:  # warm PostgreSQL's buffers and plan cache
                timings(session, viewer, versions, size, 3, rng)
            cells = []
            for size in SIZES:
                samples, shown = timings(session, viewer, versions, size, runs, rng)
                p50, p95 = p50_p95(samples)
                cells.append(f"{p50:7.1f} /{p95:6.1f} ({shown:3d})")
            print(f"{name:<12}" + "".join(f"{c:>22}" for c in cells), flush=True)
            if capture is not None:
                capture.armed = True
                visible_versions(session, viewer, rng.sample(versions, min(120, len(versions))))
                plans.append(f"{name:<12}{capture.summary()}")
    if plans:
        print("EXPLAIN ANALYZE of one 120-id set:")
        print("\n".join(plans))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test",
                        help="a PostgreSQL server database; the bench creates and drops its own")
    parser.add_argument("--sqlite", action="store_true", help="use a SQLite file instead of PostgreSQL")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args(argv)
    rng = random.Random(7)
    # Chunks are not written: verification never reads them. A tiny embedder keeps the row builder cheap.
    rows = build_rows(load_paragraphs(args.data), HashingEmbedder(dimensions=8), rng)
    add_access(rows, rng)
    rows.tables.pop(Chunk, None)
    print(f"corpus: {len(rows.tables[Document]):,} documents, {len(rows.tables[DocumentVersion]):,} versions, "
          f"{len(rows.tables[Grant]):,} grants", flush=True)
    with tempfile.TemporaryDirectory(prefix="ki-bench-verify-") as tmp, fresh_database(
        None if args.sqlite else args.database_url, Path(tmp)
    ) as url:
        engine = make_engine(url)
        try:
            write_sql(engine, rows)
            if engine.dialect.name == "postgresql":
                for mode in ("auto", "force_custom_plan"):
                    measure(engine, args.runs, mode)
            else:
                measure(engine, args.runs, None)
        finally:
            engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
