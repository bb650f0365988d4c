"""Decision search at 100,000 records: p50/p95 per caller on SQLite and PostgreSQL.

Builds the statute world of bench/query.py (documents, versions, grants of three callers) in a
fresh database, adds 100,000 decision records whose locus, summary and rationale come from the
statute paragraphs, each over one or two random versions as evidence, and times
RetrievalService.search_decisions (limit 10) for a few words of a random paragraph.

    .venv/bin/python bench/decisions.py [--sqlite] [--records 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from query import CALLERS, DEFAULT_DATA, NOW, Rows, add_access, build_rows, fresh_database, load_paragraphs, p50_p95, write_sql
from sqlalchemy import Engine, insert, text

from ki_core.config import Settings
from ki_core.db import make_engine, session_factory
from ki_core.embedding import HashingEmbedder
from ki_core.models import DecisionEvidence, DecisionRecord, DocumentVersion
from ki_query.retrieval import RetrievalService
from ki_query.scope import AccessService

PER_STATEMENT = 2_000


def decision_rows(rows: Rows, paragraphs, count: int, rng: random.Random) -> tuple[list[dict], list[dict]]:
    """Records and their evidence: text from a random paragraph, evidence one or two random versions."""
    versions = [v["id"] for v in rows.tables[DocumentVersion]]
    records, evidence = [], []
    for n in range(count):
        paragraph = rng.choice(paragraphs)
        words = paragraph.text.split()
        record_id = f"decision-{n:06d}"
        records.append(dict(
            id=record_id, project_id=rng.choice(rows.projects), external_id=record_id,
            locus=f"{paragraph.section} {paragraph.law}", change_summary=" ".join(words[:12]),
            rationale=paragraph.text[:600], decided_by="bench", decided_at=None, created_at=NOW,
        ))
        for version in rng.sample(versions, rng.choice((1, 2))):
            evidence.append(dict(id=f"{record_id}-{version[:8]}", decision_id=record_id, version_id=version,
                                 source_object_id=None))
    return records, evidence


def write_decisions(engine: Engine, records: list[dict], evidence: list[dict]) -> None:
    for model, table_rows in ((DecisionRecord, records), (DecisionEvidence, evidence)):
        with engine.begin() as conn:
            for start in range(0, len(table_rows), PER_STATEMENT):
                conn.execute(insert(model.__table__), table_rows[start : start + PER_STATEMENT])
    with engine.begin() as conn:
        conn.execute(text("ANALYZE"))


def decision_queries(paragraphs, n: int, rng: random.Random) -> list[str]:
    result = []
    while len(result) < n:
        words = [w.strip(".,;:()") for w in rng.choice(paragraphs).text.split() if len(w) > 4]
        if len(words) >= 2:
            start = rng.randrange(len(words) - 1)
            result.append(" ".join(words[start : start + rng.randint(2, 4)]))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test",
                        help="a PostgreSQL server database; the bench creates and drops its own")
    parser.add_argument("--sqlite", action="store_true", help="use a SQLite file instead of PostgreSQL")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args(argv)
    rng = random.Random(11)
    paragraphs = load_paragraphs(args.data)
    rows = build_rows(paragraphs, HashingEmbedder(dimensions=8), rng)
    add_access(rows, rng)
    records, evidence = decision_rows(rows, paragraphs, args.records, rng)
    texts = decision_queries(paragraphs, args.queries, rng)
    with tempfile.TemporaryDirectory(prefix="ki-bench-decisions-") as tmp, fresh_database(
        None if args.sqlite else args.database_url, Path(tmp)
    ) as url:
        engine = make_engine(url)
        started = time.perf_counter()
        write_sql(engine, rows)
        write_decisions(engine, records, evidence)
        print(f"{engine.dialect.name}: {len(records):,} decision records, {len(evidence):,} evidence rows, "
              f"{len(rows.tables[DocumentVersion]):,} versions (loaded in {time.perf_counter() - started:.0f} s)")
        settings = Settings()
        sessions = session_factory(engine)
        service = RetrievalService(settings, sessions, None, HashingEmbedder(dimensions=8),
                                   AccessService(sessions, settings))
        print(f"{'caller':<12} {'p50 ms':>8} {'p95 ms':>8} {'hits':>6}")
        for name, principal in CALLERS.items():
            for query in texts[:10]:
                service.search_decisions(query, [principal], 10)
            samples, hits = [], 0
            for query in texts:
                started = time.perf_counter()
                hits += len(service.search_decisions(query, [principal], 10))
                samples.append((time.perf_counter() - started) * 1000)
            p50, p95 = p50_p95(samples)
            print(f"{name:<12} {p50:8.1f} {p95:8.1f} {hits / len(texts):6.1f}", flush=True)
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
