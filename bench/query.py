"""Search latency end to end and per step, at 50,000 statute chunks, in the peer bench's five caller situations.

Loads every Absatz of ../shared/data/statutes and statutes-extra (about 50,000) as chunks: one
document per §, in 50 projects, a fifth of them with a draft and a final version, one local
file observation per version, an identifier per document ("§ 573c BGB"). SQL rows go in through
the product's bulk writer into a fresh database (PostgreSQL, created and dropped here, or a SQLite
file), chunks by the index's bulk path into the embedded backend with hashed vectors. Then it runs
the full RetrievalService.search for the situations of ../shared/tools/peer-bench/ki_vs_lancedb.py,
one caller each, so its cells can be tracked on PostgreSQL:

    everything         a member of a group allowed on all 50 projects
    10 % of projects   a member of a group allowed on 5 random projects
    90 % of projects   ... on 45 random projects
    10 % of documents  allowed on 10 % of the documents one by one (document grants)
    90 % of documents  ... on 90 % of them (the other 10 %, 1,786 of the full corpus, excluded)

and prints p50/p95 of the whole search without the query embedding (the target: p95 < 100 ms),
of each step (scope from the cache as in steady state, and compiled cold), the number of SQL
round-trips per search, and p50 of the bare EmbeddedIndex.multi_search under the same compiled
scope at the product's leg depth (the peer bench's ki_bare). The query embedding is timed on its
own (hashing embedder here). At the end one line per situation holds the peer bench's cells:
ki full p50 / p95, ki bare p50, cold-scope p50 / p95.

--syntax runs, after the rest, each query twice in turn as the "everything" caller: as typed (plain,
today's ranked hybrid) and as a query-language variant of the same words (a phrase, an exclusion, an
OR group, a trailing wildcard, or norm: for a pasted reference), and prints both p50 / p95 and
their ratio per backend (issue 39: syntax within 1.3x of plain).

--backend opensearch|both puts the same chunks into an OpenSearch index as well (alias
ki-bench-<random>, no replica, deleted at the end; refresh_interval -1 during the bulk load and
one refresh after, in this bench only) and runs the same queries through a RetrievalService whose
settings say search.backend "opensearch", on the same SQL database; each row is printed per backend.

    .venv/bin/python bench/query.py [--database-url URL | --sqlite] [--queries 200] [--dims 384]
        [--backend embedded|opensearch|both] [--opensearch-url http://127.0.0.1:9200] [--limit-chunks N]
        [--no-rerank] [--syntax]

The peer cells on PostgreSQL and on SQLite (state the load, `uptime`, with the figures):

    .venv/bin/python bench/query.py --queries 200
    .venv/bin/python bench/query.py --queries 200 --sqlite
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import backends
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url

from ki_core.audit import AuditAction, AuditLog, Surface, record, shown_documents
from ki_core.bulk_rows import write_rows
from ki_core.config import Settings
from ki_core.db import make_engine, session_factory
from ki_core.embedding import HashingEmbedder
from ki_core.migrate import upgrade_to_head
from ki_core.models import (
    AccessGeneration,
    Chunk,
    Document,
    DocumentVersion,
    Grant,
    GroupMembership,
    Project,
    Source,
    SourceObject,
    SourceObservation,
)
from ki_core.search.embedded import EmbeddedIndex
from ki_core.search.index import IndexOp, SearchIndex
from ki_core.search.types import IndexChunk, MultiSearchRequest
from ki_query.identity import Identity
from ki_query.retrieval import RANKED_LEG_DEPTH, RetrievalService
from ki_query.scope import AccessService
from ki_query.types import SearchRequest

PROJECTS = 50
PROJECT_SHARES = {"10 % of projects": 0.10, "90 % of projects": 0.90}
DOCUMENT_SHARES = {"10 % of documents": 0.10, "90 % of documents": 0.90}
OTHER_USERS = 1_000
OTHER_GROUPS = 100
DRAFT_SHARE = 0.2
STEPS = ("scope", "legs", "fusion", "verify", "collapse", "rerank")
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
NOW = datetime.now(UTC)
CALLERS = {
    "everything": "user-all",
    **{situation: f"user-projects-{round(share * 100)}" for situation, share in PROJECT_SHARES.items()},
    **{situation: f"user-documents-{round(share * 100)}" for situation, share in DOCUMENT_SHARES.items()},
}


def new_id() -> str:
    return uuid.uuid4().hex


# ------------------------------------------------------------------ corpus


@dataclass
class Paragraph:
    law: str
    section: str
    text: str


def load_paragraphs(data: Path) -> list[Paragraph]:
    paragraphs = []
    for folder in ("statutes", "statutes-extra"):
        for path in sorted((data / folder).glob("*.jsonl.gz")):
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                for line in handle:
                    record = json.loads(line)
                    if re.search(r"\w", record.get("text") or ""):  # repealed ones read "-"
                        paragraphs.append(Paragraph(record["law"], record["section"], record["text"]))
    return paragraphs


@dataclass
class Rows:
    """Everything the bench writes, as plain dicts per table, plus what the grant layouts need."""

    tables: dict[type, list[dict]] = field(default_factory=dict)
    chunks: list[IndexChunk] = field(default_factory=list)
    projects: list[str] = field(default_factory=list)
    documents_by_project: dict[str, list[str]] = field(default_factory=dict)
    source_id: str = field(default_factory=new_id)

    def add(self, model: type, **values) -> str:
        values.setdefault("id", new_id())
        if hasattr(model, "created_at"):
            values.setdefault("created_at", NOW)
        self.tables.setdefault(model, []).append(values)
        return values["id"]


def build_rows(paragraphs: list[Paragraph], embedder: HashingEmbedder, rng: random.Random) -> Rows:
    rows = Rows()
    rows.add(Source, id=rows.source_id, name="bench-fs", kind="local_fs", config={})
    rows.projects = [rows.add(Project, name=f"project-{p:03d}", title=f"Projekt {p}") for p in range(PROJECTS)]
    sections: dict[tuple[str, str], list[Paragraph]] = {}
    for paragraph in paragraphs:
        sections.setdefault((paragraph.law, paragraph.section), []).append(paragraph)
    keys = list(sections)
    rng.shuffle(keys)
    for number, key in enumerate(keys):
        add_document(rows, number, key, sections[key], rng)
    vectors = embedder.embed_passages([c.text for c in rows.chunks])
    rows.chunks = [c.model_copy(update={"embedding": tuple(v.tolist())}) for c, v in zip(rows.chunks, vectors, strict=True)]
    return rows


def add_document(rows: Rows, number: int, key: tuple[str, str], parts: list[Paragraph], rng: random.Random) -> None:
    law, section = key
    project = rows.projects[number % PROJECTS]
    identifier = f"{section} {law}"
    document = rows.add(Document, project_id=project, key=f"{law}/{section}", title=f"{section} {law}",
                        identifiers=[identifier], updated_at=NOW)
    rows.documents_by_project.setdefault(project, []).append(document)
    split = len(parts) // 2 if len(parts) > 1 and rng.random() < DRAFT_SHARE else 0
    # A draft held the first Absätze; the final version holds them all.
    batches = [("draft", parts[:split]), ("final", parts)] if split else [("final", parts)]
    day = date(2015, 1, 1) + timedelta(days=rng.randrange(3650))
    for seq, (status, chunk_parts) in enumerate(batches, 1):
        version = rows.add(DocumentVersion, document_id=document, seq=seq, version_label=f"v{seq}", status=status,
                          language="de", doc_date=day, content_hash=new_id(), processing_state="indexed",
                          access_version=0, updated_at=NOW)
        obj = rows.add(SourceObject, source_id=rows.source_id, external_id=f"{law}/{section}/v{seq}.txt",
                       acl_known=False, title=identifier)
        rows.add(SourceObservation, version_id=version, source_object_id=obj, state="active", observed_at=NOW)
        for ordinal, paragraph in enumerate(chunk_parts):
            chunk_id = len(rows.chunks) + 1
            rows.add(Chunk, id=chunk_id, version_id=version, document_id=document, ordinal=ordinal, kind="chunk",
                     text=paragraph.text, text_hash=str(chunk_id))
            rows.chunks.append(IndexChunk(
                chunk_id=chunk_id, text=paragraph.text, embedding=(), project_id=project, document_id=document,
                document_version_id=version, version_status=status, language="de", doc_date=day,
                chunk_kind="chunk", identifiers=(identifier,),
            ))


# ------------------------------------------------------------------ access layouts


def add_access(rows: Rows, rng: random.Random) -> None:
    """The five callers' groups and grants, plus other people's, so the tables are not trivially small."""
    members = [("staff", CALLERS["everything"])]
    for user in range(OTHER_USERS):
        members += [(f"other-{g:03d}", f"user-{user:05d}") for g in rng.sample(range(OTHER_GROUPS), 3)]
    for project in rows.projects:
        rows.add(Grant, scope="project", project_id=project, effect="allow", principal="staff", origin="local")
        for g in rng.sample(range(OTHER_GROUPS), 3):
            rows.add(Grant, scope="project", project_id=project, effect="allow", principal=f"other-{g:03d}",
                     origin="local")
    for situation, share in PROJECT_SHARES.items():
        group = f"team-{CALLERS[situation]}"
        members.append((group, CALLERS[situation]))
        for project in rng.sample(rows.projects, round(share * PROJECTS)):
            rows.add(Grant, scope="project", project_id=project, effect="allow", principal=group, origin="local")
    documents = sorted(d for project in rows.projects for d in rows.documents_by_project.get(project, []))
    for situation, share in DOCUMENT_SHARES.items():
        for document in rng.sample(documents, round(share * len(documents))):
            rows.add(Grant, scope="document", document_id=document, effect="allow", principal=CALLERS[situation],
                     origin="local")
    for group, member in members:
        rows.add(GroupMembership, source_id=rows.source_id, group_principal=group, member_principal=member)


# ------------------------------------------------------------------ stores


@contextmanager
def fresh_database(url: str | None, folder: Path) -> Iterator[str]:
    """A migrated database of our own: a SQLite file, or a PostgreSQL database dropped afterwards."""
    if url is None:
        target = f"sqlite:///{folder / 'ki.db'}"
        upgrade_to_head(target)
        yield target
        return
    name = f"ki_bench_query_{uuid.uuid4().hex[:10]}"
    server = create_engine(url, isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    target = make_url(url).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade_to_head(target)
        yield target
    finally:
        with server.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        server.dispose()


def write_sql(engine: Engine, rows: Rows) -> None:
    """Each table through the product's bulk writer (COPY on PostgreSQL, executemany on SQLite), one
    transaction per table: the access-summary triggers are statement-level on PostgreSQL, so one COPY
    refreshes the summary once, where row-by-row INSERTs would refresh it per row."""
    order = [Source, Project, Document, DocumentVersion, SourceObject, SourceObservation, Chunk, GroupMembership, Grant]
    for model in order:
        with engine.begin() as conn:
            write_rows(conn, model, rows.tables.get(model, []))
        analyze(engine)
    with engine.begin() as conn:  # every document's last version is its final one
        conn.execute(text(
            "UPDATE documents SET latest_final_version_id = (SELECT v.id FROM document_versions v"
            " WHERE v.document_id = documents.id ORDER BY v.seq DESC LIMIT 1)"
        ))
        if conn.execute(text("SELECT 1 FROM access_generation")).first() is None:
            write_rows(conn, AccessGeneration, [{"id": 1, "generation": 1}])
    analyze(engine)


def analyze(engine: Engine) -> None:
    """Statistics (and on PostgreSQL the visibility map), as autovacuum would provide after a bulk load."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE" if engine.dialect.name == "postgresql" else "ANALYZE"))


def write_index(path: Path, rows: Rows, dims: int) -> EmbeddedIndex:
    index = EmbeddedIndex(path, dimensions=dims, commit_batch_chunks=10_000)
    index.ensure()
    index.bulk(IndexOp(c) for c in rows.chunks)
    return index


def write_opensearch(bench: backends.BenchOpenSearch, rows: Rows) -> None:
    """The same chunks by the same bulk path, refresh_interval -1 meanwhile and one refresh after."""
    bench.ensure()
    started = time.perf_counter()
    with bench.bulk_loading() as timing:
        bench.index.bulk(IndexOp(c) for c in rows.chunks)
        bulk_s = time.perf_counter() - started
    total_s = time.perf_counter() - started
    merge_s = bench.wait_for_merges()
    stats = bench.stats()
    print(f"opensearch index {bench.concrete} (alias {bench.alias}, 1 shard, 0 replicas): "
          f"{len(rows.chunks) / total_s:,.0f} chunks/s ({bulk_s:.1f} s in bulk() with refresh_interval -1, "
          f"{timing['refresh_ms'] / 1000:.1f} s for the one refresh after), {merge_s:.0f} s waiting for merges; "
          f"{stats['docs']:,} docs, {stats['segments']} segments, {stats['store_bytes'] / 1e6:,.0f} MB",
          flush=True)


@dataclass
class Backend:
    """One search backend under test: its settings, its own engine (round-trips counted apart) and index."""

    name: str
    settings: Settings
    engine: Engine
    index: SearchIndex


# ------------------------------------------------------------------ measurement


class RoundTrips:
    """Counts statements sent to the database (each one a round-trip) and their time by statement shape."""

    def __init__(self, engine: Engine) -> None:
        self.count = 0
        self.time_by_statement: dict[str, list[float]] = {}
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    def _before(self, conn, _cursor, _statement, _parameters, _context, _executemany) -> None:
        self.count += 1
        conn.info["bench_started"] = time.perf_counter()

    def _after(self, conn, _cursor, statement, _parameters, _context, _executemany) -> None:
        shape = " ".join(statement.split())[:90]
        elapsed = (time.perf_counter() - conn.info.pop("bench_started")) * 1000
        self.time_by_statement.setdefault(shape, []).append(elapsed)

    def report(self, top: int = 8) -> None:
        ranked = sorted(self.time_by_statement.items(), key=lambda item: -sum(item[1]))[:top]
        print("\nslowest statements (total ms, calls, p50 ms):")
        for shape, samples in ranked:
            print(f"{sum(samples):9.0f} {len(samples):6d} {statistics.median(samples):7.2f}  {shape}")


def queries(paragraphs: list[Paragraph], n: int, rng: random.Random) -> list[str]:
    """Mostly a few words from a random Absatz, some pasted statute references."""
    result = []
    for _ in range(n):
        paragraph = rng.choice(paragraphs)
        words = [w for w in paragraph.text.split() if len(w) > 3]
        if rng.random() < 0.2 or len(words) < 3:
            result.append(f"{paragraph.section} {paragraph.law}")
        else:
            start = rng.randrange(max(1, len(words) - 5))
            result.append(" ".join(words[start : start + rng.randint(3, 6)]))
    return result


def p50_p95(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def run_caller(
    service: RetrievalService, principal: str, texts: list[str], trips: RoundTrips, cold: Callable[[], None] | None,
    audit: AuditLog,
) -> dict[str, list[float]]:
    """Each search as the HTTP route runs it: the search, then its audit record (timed apart as `audit`)."""
    samples: dict[str, list[float]] = {step: [] for step in (*STEPS, "embed", "e2e", "audit", "trips", "hits")}
    caller = Identity(principal, (principal,))
    for query in texts[:10]:  # warm the page cache and the scope cache
        service.search(SearchRequest(query=query, limit=10), [principal])
    for query in texts:
        if cold is not None:
            cold()
        before = trips.count
        response = service.search(SearchRequest(query=query, limit=10), [principal])
        started = time.perf_counter()
        record(audit, caller, Surface.HTTP, AuditAction.SEARCH, query=query, hit_count=len(response.hits),
               document_ids=shown_documents(response.hits))
        samples["audit"].append((time.perf_counter() - started) * 1000)
        timings = response.timings
        for step in STEPS:
            samples[step].append(getattr(timings, step))
        samples["embed"].append(timings.embed)
        samples["e2e"].append(timings.total - timings.embed)
        samples["trips"].append(trips.count - before)
        samples["hits"].append(len(response.hits))
    return samples


def report(name: str, samples: dict[str, list[float]], width: int = 22) -> None:
    cells = [f"{name:<{width}}"]
    for step in ("e2e", *STEPS, "embed", "audit"):
        p50, p95 = p50_p95(samples[step])
        cells.append(f"{p50:6.1f} /{p95:6.1f}")
    cells.append(f"{statistics.mean(samples['trips']):5.1f}")
    cells.append(f"{statistics.mean(samples['hits']):5.1f}")
    print(" ".join(cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test",
                        help="a PostgreSQL server database; the bench creates and drops its own")
    parser.add_argument("--sqlite", action="store_true", help="use a SQLite file instead of PostgreSQL")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--no-rerank", action="store_true",
                        help="turn the offline reranker (on by default) off: the difference is what it adds")
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--limit-chunks", type=int, default=None,
                        help="keep only the first N Absätze of the corpus (default: all, about 50,000)")
    parser.add_argument("--syntax", action="store_true",
                        help="also time query-language variants of the queries against the plain ones (issue 39)")
    backends.add_arguments(parser)
    args = parser.parse_args(argv)
    backends.terminate_like_ctrl_c()
    names = backends.selected(args)
    rng = random.Random(7)
    started = time.perf_counter()
    paragraphs = load_paragraphs(args.data)
    if args.limit_chunks is not None:
        paragraphs = paragraphs[: args.limit_chunks]
    embedder = HashingEmbedder(dimensions=args.dims)
    rows = build_rows(paragraphs, embedder, rng)
    add_access(rows, rng)
    print(f"corpus: {len(rows.chunks):,} chunks, {len(rows.tables[Document]):,} documents, "
          f"{len(rows.tables[DocumentVersion]):,} versions, {len(rows.tables[Grant]):,} grants "
          f"({time.perf_counter() - started:.0f} s to prepare)", flush=True)
    with tempfile.TemporaryDirectory(prefix="ki-bench-query-") as tmp, fresh_database(
        None if args.sqlite else args.database_url, Path(tmp)
    ) as url:
        started = time.perf_counter()
        engine = make_engine(url)
        write_sql(engine, rows)
        opened: list[Backend] = []
        bench_os: backends.BenchOpenSearch | None = None
        try:
            if names == ("embedded",):
                index = write_index(Path(tmp) / "index", rows, args.dims)
                opened.append(Backend("embedded", Settings(), engine, index))
                print(f"loaded SQL ({engine.dialect.name}) and the embedded index in "
                      f"{time.perf_counter() - started:.0f} s", flush=True)
            else:
                print(f"loaded SQL ({engine.dialect.name}) in {time.perf_counter() - started:.0f} s", flush=True)
                for name in names:
                    if name == "embedded":
                        started = time.perf_counter()
                        index = write_index(Path(tmp) / "index", rows, args.dims)
                        seconds = time.perf_counter() - started
                        opened.append(Backend("embedded", Settings(), engine, index))
                        print(f"embedded index: {len(rows.chunks) / seconds:,.0f} chunks/s ({seconds:.1f} s in "
                              f"ensure() + bulk(), commit every 10,000 chunks)", flush=True)
                    else:
                        bench_os = backends.BenchOpenSearch(args.opensearch_url, args.dims)
                        write_opensearch(bench_os, rows)
                        # Its own engine on the same database: round-trips counted per backend.
                        opened.append(Backend("opensearch", bench_os.settings, make_engine(url), bench_os.index))
            audit = AuditLog(Settings(state_dir=tmp, database={"url": url}))
            texts = queries(paragraphs, args.queries, rng)
            if args.syntax:
                measure_syntax(opened, embedder, texts, rerank=not args.no_rerank)
            else:
                measure(opened, embedder, texts, audit, rerank=not args.no_rerank)
        finally:
            for backend in opened:
                if backend.name == "embedded":
                    backend.index.close()
                if backend.engine is not engine:
                    backend.engine.dispose()
            if bench_os is not None:
                bench_os.close()
            engine.dispose()
    return 0


def bare_search_ms(index: SearchIndex, embedder: HashingEmbedder, scope_filter, texts: list[str]) -> list[float]:
    """The index alone (the peer bench's ki_bare): three legs under the compiled scope, the product's leg depth."""
    vectors = [tuple(float(x) for x in embedder.embed_query(q)) for q in texts]
    samples = []
    for query, vector in zip(texts, vectors, strict=True):
        request = MultiSearchRequest(query_text=query, query_vector=vector, scope=scope_filter, size=RANKED_LEG_DEPTH)
        started = time.perf_counter()
        index.multi_search(request)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def measure(opened: list[Backend], embedder: HashingEmbedder, texts: list[str], audit: AuditLog,
            rerank: bool = True) -> None:
    """rerank: the default offline reranker on (as shipped) or off (what it adds is the difference).
    audit: the trail each search is recorded in, as the surfaces do (its own file on SQLite)."""
    services = {}
    for backend in opened:
        sessions = session_factory(backend.engine)
        retrieval = backend.settings.retrieval.model_copy(update={"rerank_enabled": rerank, "rerank_provider": "offline"})
        settings = backend.settings.model_copy(update={"retrieval": retrieval})
        access = AccessService(sessions, settings)
        service = RetrievalService(settings, sessions, backend.index, embedder, access)
        services[backend.name] = (service, access, RoundTrips(backend.engine))
    single = len(opened) == 1
    width = 22 if single else 34

    def label(name: str, backend: str) -> str:
        return name if single else f"{name} [{backend}]"

    full, cold, bare = {}, {}, {}
    print(f"\n{len(texts)} queries per caller, limit 10, offline reranker {'on' if rerank else 'off'}; "
          "milliseconds p50 / p95; e2e = search without the embedding")
    header = ["caller", "e2e", *STEPS, "embed", "audit"]
    print(f"{header[0]:<{width}} " + " ".join(f"{h:>14}" for h in header[1:]) + "  trips  hits")
    for name, principal in CALLERS.items():
        for backend in opened:
            service, _, trips = services[backend.name]
            full[name, backend.name] = run_caller(service, principal, texts, trips, None, audit)
            report(label(name, backend.name), full[name, backend.name], width)
    print("\nscope compiled cold (cache cleared before each search):")
    for name, principal in CALLERS.items():
        for backend in opened:
            service, access, trips = services[backend.name]
            cold[name, backend.name] = run_caller(service, principal, texts, trips, access.clear_cache, audit)
            report(label(f"{name} (cold scope)", backend.name), cold[name, backend.name], width)
    for name, principal in CALLERS.items():
        for backend in opened:
            scope_filter = services[backend.name][1].compile_scope([principal]).filter
            bare[name, backend.name] = bare_search_ms(backend.index, embedder, scope_filter, texts)
    for backend in opened:
        if not single:
            print(f"\n[{backend.name}]", end="")
        services[backend.name][2].report()
    access = services[opened[0].name][1]
    for name, principal in CALLERS.items():
        scope = access.compile_scope([principal])
        print(f"scope of {name}: {len(scope.filter.project_ids)} projects, {len(scope.filter.document_ids)} listed "
              f"documents, {len(scope.filter.excluded_document_ids)} excluded documents "
              f"({scope.visible_document_count:,} visible)")
    print_peer_cells(full, cold, bare, opened[0].engine.dialect.name, width)


SYNTAX_KINDS = ("phrase", "exclusion", "or-group", "wildcard", "norm")


def syntax_kind(query: str, number: int) -> str:
    return "norm" if query.startswith(("§", "Art")) else SYNTAX_KINDS[number % 4]


def syntax_variant(query: str, number: int) -> str:
    """The same words in the query language, one operator kind per query in turn."""
    words = [w.strip('"()*-:') for w in query.split()]
    words = [w for w in words if w]
    kind = syntax_kind(query, number)
    if kind == "norm":
        return f"norm:{query}"
    if kind == "phrase":
        return f'"{words[0]} {words[1]}" ' + " ".join(words[2:])
    if kind == "exclusion":
        return " ".join(words) + " -Blumenkohl"
    if kind == "or-group":
        return f"({words[0]} OR {words[1]}) " + " ".join(words[2:])
    return f"{words[0][:5]}* " + " ".join(words[1:])


def measure_syntax(opened: list[Backend], embedder: HashingEmbedder, texts: list[str], rerank: bool = True) -> None:
    """Plain and syntax variant of each query in turn (same load), as the caller who sees everything;
    then per syntax kind, and the steps' p50 of both."""
    principal = CALLERS["everything"]
    print(f"\n{len(texts)} queries, plain and query-language variant in turn, caller everything, limit 10; "
          "e2e milliseconds (search without the embedding) p50 / p95")
    for backend in opened:
        sessions = session_factory(backend.engine)
        retrieval = backend.settings.retrieval.model_copy(update={"rerank_enabled": rerank, "rerank_provider": "offline"})
        settings = backend.settings.model_copy(update={"retrieval": retrieval})
        service = RetrievalService(settings, sessions, backend.index, embedder, AccessService(sessions, settings))
        samples: dict[str, list[float]] = {"plain": [], "syntax": []}
        steps: dict[str, dict[str, list[float]]] = {"plain": {}, "syntax": {}}
        for query in texts[:10]:
            service.search(SearchRequest(query=query, limit=10), [principal])
        for number, query in enumerate(texts):
            for kind, asked in (("plain", query), ("syntax", syntax_variant(query, number))):
                timings = service.search(SearchRequest(query=asked, limit=10), [principal]).timings
                elapsed = timings.total - timings.embed
                samples[kind].append(elapsed)
                if kind == "syntax":
                    samples.setdefault(syntax_kind(query, number), []).append(elapsed)
                for step, ms in timings.model_dump().items():
                    steps[kind].setdefault(step, []).append(ms)
        (plain50, plain95), (syntax50, syntax95) = p50_p95(samples["plain"]), p50_p95(samples["syntax"])
        print(f"[{backend.name}] plain {plain50:6.1f} / {plain95:6.1f}   syntax {syntax50:6.1f} / {syntax95:6.1f}   "
              f"ratio p50 {syntax50 / plain50:4.2f}, p95 {syntax95 / plain95:4.2f}")
        kinds = [f"{k} {p50_p95(samples[k])[0]:.1f} / {p50_p95(samples[k])[1]:.1f} (n={len(samples[k])})"
                 for k in SYNTAX_KINDS if samples.get(k)]  # fmt: skip
        print(f"[{backend.name}] syntax by kind: " + ", ".join(kinds))
        for kind in ("plain", "syntax"):
            cells = ", ".join(f"{step} {statistics.median(ms):.1f}" for step, ms in steps[kind].items() if any(ms))
            print(f"[{backend.name}] {kind} step p50: {cells}")


def print_peer_cells(full: dict, cold: dict, bare: dict, dialect: str, width: int) -> None:
    """The cells of the peer bench's table (issue 17), one line per situation and backend, in milliseconds."""
    print(f"\npeer-bench cells on {dialect} (ki full p50 / p95 without the embedding, ki bare multi_search p50, "
          f"cold-scope full search p50 / p95):")
    print(f"{'situation':<{width}} {'full p50':>9} {'full p95':>9} {'bare p50':>9} {'cold p50':>9} {'cold p95':>9}")
    for key, samples in full.items():
        name = key[0] if width == 22 else f"{key[0]} [{key[1]}]"
        full_p50, full_p95 = p50_p95(samples["e2e"])
        cold_p50, cold_p95 = p50_p95(cold[key]["e2e"])
        print(f"{name:<{width}} {full_p50:9.1f} {full_p95:9.1f} {statistics.median(bare[key]):9.1f} "
              f"{cold_p50:9.1f} {cold_p95:9.1f}")


if __name__ == "__main__":
    sys.exit(main())
