"""chunk_embed and index: rows of text and vectors in SQL, then the one bulk path into the index.

Three phases (STYLE.md): read SQL and close the session; embed (slow, no
transaction held); write chunk rows; write the index; record the watermark in
a fresh transaction. A crash between phases makes the next run repeat work,
never skip it. Re-running is cheap: chunk ids are deterministic and the
embedder is cached by (signature, text).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from sqlalchemy import Row, delete, func, select, update
from sqlalchemy.orm import Session, defer

from ki_core.acl import in_set
from ki_core.principals import index_projection
from ki_core.bulk_rows import write_rows
from ki_core.config import Settings
from ki_core.embedding import vector_signature
from ki_core.models import (
    Chunk,
    ChunkKind,
    Document,
    DocumentVersion,
    Matter,
    MetadataArtifact,
    ObservationState,
    OntologyClosure,
    OntologyNode,
    ProcessingState,
    SourceObservation,
    VersionStatus,
)
from ki_core.models.base import utcnow
from ki_core.search.index import BulkOperation, DeleteOp, IndexOp, index_signature
from ki_core.search.types import IndexChunk
from ki_workers.context import WorkerContext
from ki_workers.stages.chunking import (
    FIRST_CLAUSE_ORDINAL,
    PROFILE_ORDINAL,
    chunk_id,
    context_header,
    embedding_input,
    profile_text,
    split_body,
    text_hash,
)
from ki_workers.stages.rows import versions_and_documents

CLAUSE_STATUSES = (VersionStatus.FINAL, VersionStatus.EXECUTED)


@dataclass(frozen=True)
class ChunkDraft:
    ordinal: int
    kind: ChunkKind
    text: str
    model_input: str
    char_start: int | None = None
    char_end: int | None = None
    locus: str | None = None
    clause_type_id: str | None = None


@dataclass(frozen=True)
class EmbedResult:
    version_id: str
    chunk_count: int
    removed_chunk_ids: tuple[int, ...]


# ------------------------------------------------------------------ drafting


def draft_chunks(session: Session, version: DocumentVersion, settings: Settings) -> list[ChunkDraft]:
    """Body chunks, the profile row and clause rows, as the spec's index section lists them."""
    retrieval = settings.retrieval
    document = session.get(Document, version.document_id)
    header = context_header(document.title, _doc_type_label(session, document), _matter_title(session, document))
    wants_profile = retrieval.profile_embeddings and document.latest_final_version_id == version.id
    wants_clauses = retrieval.clause_embeddings and version.status in CLAUSE_STATUSES
    kinds = [*(["metadata"] if wants_profile else []), *(["notable_clauses"] if wants_clauses else [])]
    artifacts = _newest_artifacts(session, version.id, kinds)

    def draft(ordinal: int, kind: ChunkKind, text: str, **extra) -> ChunkDraft:
        return ChunkDraft(ordinal, kind, text, embedding_input(text, header, retrieval.chunk_contextualize), **extra)

    drafts = [
        draft(n, ChunkKind.CHUNK, span.text, char_start=span.start, char_end=span.end)
        for n, span in enumerate(split_body(version.text or "", retrieval.chunk_chars, retrieval.chunk_overlap_chars))
    ]
    if wants_profile:
        drafts.append(draft(PROFILE_ORDINAL, ChunkKind.PROFILE, _profile(session, document, version, artifacts)))
    if wants_clauses:
        for n, clause in enumerate(_notable_clauses(artifacts)):
            drafts.append(
                draft(FIRST_CLAUSE_ORDINAL + n, ChunkKind.CLAUSE, clause["text"], locus=clause.get("locus"),
                      clause_type_id=_known_node(session, clause.get("clause_type")))
            )
    return drafts


def _doc_type_label(session: Session, document: Document) -> str | None:
    node = session.get(OntologyNode, document.doc_type_id) if document.doc_type_id else None
    return node.label if node else None


def _matter_title(session: Session, document: Document) -> str | None:
    matter = session.get(Matter, document.matter_id) if document.matter_id else None
    return (matter.title or matter.name) if matter else None


def _profile(session: Session, document: Document, version: DocumentVersion, artifacts: dict[str, dict]) -> str:
    metadata = artifacts.get("metadata") or {}
    parties = ", ".join(p["name"] for p in metadata.get("parties", []) if p.get("name")) or None
    lines = [
        ("Titel", document.title),
        ("Dokumenttyp", _doc_type_label(session, document)),
        ("Sache", _matter_title(session, document)),
        ("Zeichen", ", ".join(metadata.get("reference_numbers", [])) or None),
        ("Parteien", parties),
        ("Kennungen", ", ".join(document.identifiers or []) or None),
        ("Datum", version.doc_date.isoformat() if version.doc_date else None),
    ]
    return profile_text(lines, version.text or "")


def _newest_artifacts(session: Session, version_id: str, kinds: list[str]) -> dict[str, dict]:
    """Kind -> payload of the version's newest artifact of that kind, for KINDS, in one statement."""
    if not kinds:
        return {}
    rows = session.execute(
        select(MetadataArtifact.kind, MetadataArtifact.payload)
        .where(MetadataArtifact.version_id == version_id, MetadataArtifact.kind.in_(kinds))
        .order_by(MetadataArtifact.created_at.desc())
    )
    newest: dict[str, dict] = {}
    for kind, payload in rows:
        newest.setdefault(kind, payload)
    return newest


def _notable_clauses(artifacts: dict[str, dict]) -> list[dict]:
    payload = artifacts.get("notable_clauses") or {}
    return [c for c in payload.get("clauses", []) if c.get("text", "").strip()]


def _known_node(session: Session, node_id: str | None) -> str | None:
    return node_id if node_id and session.get(OntologyNode, node_id) is not None else None


# ------------------------------------------------------------------ embedding


@dataclass(frozen=True)
class VersionDrafts:
    """A version's chunk drafts, read in phase 1 and waiting to be embedded and stored."""

    version_id: str
    document_id: str
    drafts: list[ChunkDraft]


# Inside deferred_index_writes, a version of at most this many chunks waits to be embedded and
# stored with the others (one embedder call, one transaction); a longer one is embedded at once,
# in steps its watcher sees. Hashing, 75 files: one call and one transaction per file cost more
# than the embedder itself.
DEFERRED_MAX_CHUNKS = 64
# ...and the waiting drafts are embedded and stored once they hold this many chunks; only their
# index write waits for the shared commit. So the embedding runs between batches of files, while
# a helper runs the metadata rules on the next ones (stages.rules_ahead), not all at the end.
DEFERRED_EMBED_CHUNKS = 128


def embed_version(ctx: WorkerContext, version_id: str) -> EmbedResult:
    """Phase 1 for one version (embed_versions)."""
    return next(embed_versions(ctx, [version_id]))


def embed_versions(ctx: WorkerContext, version_ids: list[str]) -> Iterator[EmbedResult]:
    """Phase 1: chunk rows with their embeddings in SQL, a result per version in order, each as soon
    as it is done (so an interrupt in a long one leaves those before it to be indexed). Embeds
    outside any transaction; the versions' rows are read in one statement.

    Inside `deferred_index_writes(ctx)` a short version's drafts wait for the
    shared write (the index write that follows waits too); its removed chunk
    ids then go with that write, not into the result.
    """
    with ctx.sessions() as session:
        drafted = draft_versions(session, version_ids, ctx.settings)
    for version_id in version_ids:
        item = drafted.get(version_id)
        if item is None:
            yield EmbedResult(version_id, 0, ())
        elif ctx.index_writes is not None and len(item.drafts) <= DEFERRED_MAX_CHUNKS:
            ctx.index_writes.drafts.append(item)
            yield EmbedResult(version_id, len(item.drafts), ())
            if sum(len(waiting.drafts) for waiting in ctx.index_writes.drafts) >= DEFERRED_EMBED_CHUNKS:
                store_waiting_embeddings(ctx)
        else:
            watcher = ctx.embed_progress
            progress = (lambda done, total, of=version_id: watcher(of, done, total)) if watcher else None
            yield from store_embeddings(ctx, [item], progress)


def draft_versions(session: Session, version_ids: list[str], settings: Settings) -> dict[str, VersionDrafts]:
    """The drafts of those versions that have text and did not fail, by version id."""
    rows = versions_and_documents(session, version_ids)  # draft_chunks finds each document loaded
    return {
        version.id: VersionDrafts(version.id, version.document_id, draft_chunks(session, version, settings))
        for version, _ in rows.values()
        if version.text is not None and version.processing_state != ProcessingState.FAILED
    }


def store_embeddings(ctx: WorkerContext, drafted: list[VersionDrafts], progress=None) -> list[EmbedResult]:
    """Embed the drafts of all versions in one embedder call, then replace their chunk rows in one transaction."""
    embedder = ctx.embedder()
    inputs = [draft.model_input for item in drafted for draft in item.drafts]
    vectors = _embed_passages(embedder, inputs, progress)
    with ctx.sessions() as session, session.begin():
        removed = _store_chunks(session, drafted, vectors, vector_signature(ctx.settings, embedder))
        stale = _drop_stale_profiles(session, {item.document_id for item in drafted})
    results = []
    for item in drafted:
        gone = removed.get(item.version_id, []) + stale.pop(item.document_id, [])
        results.append(EmbedResult(item.version_id, len(item.drafts), tuple(gone)))
    return results


# A long file is embedded this many chunks at a time when someone watches (ctx.embed_progress).
EMBED_STEP = 64


def _embed_passages(embedder, inputs: list[str], progress) -> np.ndarray:
    """The vectors of INPUTS; with a watcher, in steps that report (done, total) after each."""
    if not inputs:
        return np.zeros((0, 0))
    if progress is None or len(inputs) <= EMBED_STEP:
        return embedder.embed_passages(inputs)
    parts = []
    for start in range(0, len(inputs), EMBED_STEP):
        parts.append(embedder.embed_passages(inputs[start:start + EMBED_STEP]))
        progress(min(start + EMBED_STEP, len(inputs)), len(inputs))
    return np.vstack(parts)


def _store_chunks(session: Session, drafted: list[VersionDrafts], vectors: np.ndarray,
                  signature: str) -> dict[str, list[int]]:
    """Replace the versions' chunk rows by their drafts; returns, per version, the ids that no longer exist.

    Ids are deterministic (version, ordinal), so a re-run writes the same rows;
    one DELETE and one bulk write (ki_core.bulk_rows) however many versions.
    """
    version_ids = [item.version_id for item in drafted]
    existing = session.execute(select(Chunk.version_id, Chunk.id).where(in_set(Chunk.version_id, version_ids))).all()
    if existing:
        session.execute(delete(Chunk).where(in_set(Chunk.version_id, version_ids)))
    created_at = utcnow()
    pairs = [(item, draft) for item in drafted for draft in item.drafts]
    rows = [
        _chunk_row(item, draft, vector, signature, created_at)
        for (item, draft), vector in zip(pairs, vectors, strict=True)
    ]
    write_rows(session, Chunk, rows)
    wanted = {row["id"] for row in rows}
    removed: dict[str, list[int]] = {}
    for version_id, cid in existing:
        if cid not in wanted:
            removed.setdefault(version_id, []).append(cid)
    return removed


def _chunk_row(item: VersionDrafts, draft: ChunkDraft, vector, signature: str, created_at) -> dict:
    return {
        "id": chunk_id(item.version_id, draft.ordinal),
        "version_id": item.version_id,
        "document_id": item.document_id,
        "ordinal": draft.ordinal,
        "kind": draft.kind,
        "text": draft.text,
        "text_hash": text_hash(draft.model_input),
        "char_start": draft.char_start,
        "char_end": draft.char_end,
        "locus": draft.locus,
        "clause_type_id": draft.clause_type_id,
        "embedding": np.asarray(vector, dtype=np.float32).tobytes(),
        "embedding_signature": signature,
        "created_at": created_at,
    }


def _drop_stale_profiles(session: Session, document_ids: set[str]) -> dict[str, list[int]]:
    """Only the latest final version carries a profile row; older ones are removed (per document)."""
    stale = session.execute(
        select(Chunk.document_id, Chunk.id)
        .join(Document, Document.id == Chunk.document_id)
        .where(
            in_set(Chunk.document_id, document_ids),
            Chunk.kind == ChunkKind.PROFILE,
            Chunk.version_id != func.coalesce(Document.latest_final_version_id, ""),
        )
    ).all()
    if stale:
        session.execute(delete(Chunk).where(Chunk.id.in_([cid for _, cid in stale])))
    by_document: dict[str, list[int]] = {}
    for document_id, cid in stale:
        by_document.setdefault(document_id, []).append(cid)
    return by_document


# ------------------------------------------------------------------ indexing


@dataclass(frozen=True)
class IndexPlan:
    operations: list[BulkOperation]
    # version id -> the access_version the projection was computed from (None: not in the index)
    watermarks: dict[str, int | None]


def plan_index_writes(session: Session, version_ids: list[str], settings: Settings) -> IndexPlan:
    """IndexOps for observed versions (from stored rows, no embedding), DeleteOps for the rest.

    The one place that turns SQL rows into index documents, used by chunk_embed,
    access reindex of versions missing from the index, and `ki reindex`. Reads
    a handful of batched queries for the whole list, not a few per version.
    """
    # The text is not an index field of the version (chunks carry their own): not read.
    versions = list(
        session.scalars(
            select(DocumentVersion).options(defer(DocumentVersion.text)).where(in_set(DocumentVersion.id, version_ids))
        )
    )
    observed = observed_objects(session, [v.id for v in versions])
    projections = index_projection(session, list(observed), settings)
    chunks = _chunks_by_version(session, [v.id for v in versions])
    indexable = [v for v in versions if v.id in observed and v.processing_state != ProcessingState.FAILED]
    fields = _version_fields(session, indexable, observed)
    operations: list[BulkOperation] = []
    watermarks: dict[str, int | None] = {}
    for version in versions:
        rows = chunks.get(version.id, [])
        if version.id not in fields:
            operations.extend(DeleteOp(row.id) for row in rows)
            watermarks[version.id] = None
            continue
        allowed, denied = projections.get(version.id, ((), ()))
        for row in rows:
            operations.append(IndexOp(_index_chunk(row, fields[version.id], allowed, denied, version.access_version)))
        watermarks[version.id] = version.access_version
    return IndexPlan(operations, watermarks)


def active_versions(session: Session, version_ids: list[str]) -> set[str]:
    return set(observed_objects(session, version_ids))


def observed_objects(session: Session, version_ids: list[str]) -> dict[str, str]:
    """Version id -> a source object that actively observes it, for the versions that have one."""
    if not version_ids:
        return {}
    rows = session.execute(
        select(SourceObservation.version_id, SourceObservation.source_object_id)
        .where(in_set(SourceObservation.version_id, version_ids), SourceObservation.state == ObservationState.ACTIVE)
        .order_by(SourceObservation.version_id, SourceObservation.observed_at)
    )
    observed: dict[str, str] = {}
    for version_id, source_object_id in rows:
        observed.setdefault(version_id, source_object_id)
    return observed


# What an index document takes from a chunk row: read as plain rows, not ORM objects (a plan
# reads every chunk of its versions, and building and tracking objects cost more than the read).
_INDEXED_CHUNK_COLUMNS = (Chunk.id, Chunk.version_id, Chunk.ordinal, Chunk.kind, Chunk.text, Chunk.locus,
                          Chunk.clause_type_id, Chunk.embedding)


def _chunks_by_version(session: Session, version_ids: list[str]) -> dict[str, list[Row]]:
    by_version: dict[str, list[Row]] = {}
    if version_ids:
        rows = session.execute(
            select(*_INDEXED_CHUNK_COLUMNS)
            .where(in_set(Chunk.version_id, version_ids))
            .order_by(Chunk.version_id, Chunk.ordinal)
        )
        for row in rows:
            by_version.setdefault(row.version_id, []).append(row)
    return by_version


def _version_fields(
    session: Session, versions: list[DocumentVersion], observed: dict[str, str]
) -> dict[str, dict]:
    """Version id -> the document-level fields every chunk of that version carries."""
    document_ids = {v.document_id for v in versions}
    documents = (
        {d.id: d for d in session.scalars(select(Document).where(in_set(Document.id, document_ids)))}
        if document_ids else {}
    )
    ancestors = doc_type_ancestors_many(session, {d.doc_type_id for d in documents.values() if d.doc_type_id})
    fields: dict[str, dict] = {}
    for version in versions:
        document = documents[version.document_id]
        fields[version.id] = {
            "project_id": document.project_id,
            "document_id": document.id,
            "document_version_id": version.id,
            "matter_id": document.matter_id,
            "doc_type": document.doc_type_id,
            "doc_type_ancestors": ancestors.get(document.doc_type_id, ()),
            "version_status": version.status.value,
            "language": version.language,
            "doc_date": version.doc_date,
            "identifiers": tuple(document.identifiers or ()),
            "source_object_id": observed[version.id],
        }
    return fields


def doc_type_ancestors_many(session: Session, node_ids: set[str]) -> dict[str, tuple[str, ...]]:
    if not node_ids:
        return {}
    rows = session.execute(
        select(OntologyClosure.descendant_id, OntologyClosure.ancestor_id)
        .where(in_set(OntologyClosure.descendant_id, node_ids))
        .order_by(OntologyClosure.descendant_id, OntologyClosure.depth)
    )
    ancestors: dict[str, list[str]] = {}
    for descendant, ancestor in rows:
        ancestors.setdefault(descendant, []).append(ancestor)
    return {node: tuple(chain) for node, chain in ancestors.items()}


def _index_chunk(row: Row, fields: dict, allowed, denied, access_version: int) -> IndexChunk:
    meta = {"source_object_id": fields["source_object_id"], "kind": row.kind.value, "ordinal": row.ordinal}
    if row.kind == ChunkKind.CLAUSE:
        meta |= {"locus": row.locus, "clause_type": row.clause_type_id}
    base = {k: v for k, v in fields.items() if k != "source_object_id"}
    return IndexChunk(
        chunk_id=row.id,
        text=row.text,
        embedding=tuple(np.frombuffer(row.embedding, dtype=np.float32).tolist()),
        chunk_kind=row.kind.value,
        clause_type=row.clause_type_id,
        allowed_principals=tuple(allowed),
        denied_principals=tuple(denied),
        access_version=access_version,
        meta=meta,
        **base,
    )


# Inside deferred_index_writes, this many versions share one bulk write.
DEFERRED_VERSIONS_PER_WRITE = 256
# ...and none waits longer than this: a document is searchable seconds after it is done, not
# when the whole folder is (one 20 MB file used to hold back every small one before it).
DEFERRED_MAX_WAIT_SECONDS = 2.0


@dataclass
class IndexWrites:
    """The versions waiting for one shared index write, the chunk ids it deletes, since when the
    oldest waits, and the chunk drafts to embed and store before it (the write reads stored rows)."""

    versions: list[str] = field(default_factory=list)
    deletes: list[int] = field(default_factory=list)
    since: float | None = None
    drafts: list[VersionDrafts] = field(default_factory=list)


@contextmanager
def deferred_index_writes(ctx: WorkerContext) -> Iterator[None]:
    """Collect index writes of many versions and write them in few bulk commits.

    For in-process batch work (a folder sync): one embedded-index commit per
    document would cost more than the rest of the pipeline. A write happens
    when DEFERRED_VERSIONS_PER_WRITE are waiting or the oldest has waited
    DEFERRED_MAX_WAIT_SECONDS (checked as versions arrive, and by the caller
    with `flush_if_waiting`), and at the end. Watermarks are recorded only
    after the write, so a crash or Ctrl-C repeats work, never skips it.
    """
    ctx.index_writes = IndexWrites()
    try:
        yield
    finally:
        try:
            flush_deferred_index_writes(ctx)
        finally:
            ctx.index_writes = None


def index_versions(ctx: WorkerContext, version_ids: list[str], extra_deletes: tuple[int, ...] = ()) -> IndexPlan | None:
    """Phases 2 and 3: write the index through the one bulk path, then record watermarks.

    Inside `deferred_index_writes(ctx)` the versions wait for a shared write.
    """
    writes = ctx.index_writes
    if writes is not None:
        writes.versions.extend(version_ids)
        writes.deletes.extend(extra_deletes)
        if writes.since is None:
            writes.since = time.monotonic()
        if len(writes.versions) >= DEFERRED_VERSIONS_PER_WRITE:
            flush_deferred_index_writes(ctx)
        else:
            flush_if_waiting(ctx)
        return None
    return _write_index(ctx, version_ids, extra_deletes)


def flush_if_waiting(ctx: WorkerContext, *, before_long_work: bool = False) -> None:
    """Write the waiting versions when the oldest waited long enough, or at once before long work
    (a big file next): nothing already done should wait for it."""
    writes = ctx.index_writes
    if writes is None or writes.since is None:
        return
    if before_long_work or time.monotonic() - writes.since >= DEFERRED_MAX_WAIT_SECONDS:
        flush_deferred_index_writes(ctx)


def flush_deferred_index_writes(ctx: WorkerContext) -> None:
    """Store the waiting drafts' chunk rows, then write the waiting versions to the index (in that order:
    the index is written from the stored rows)."""
    writes = ctx.index_writes
    if writes is None:
        return
    store_waiting_embeddings(ctx)
    versions, deletes = writes.versions, writes.deletes
    writes.versions, writes.deletes, writes.since = [], [], None
    if versions or deletes:
        _write_index(ctx, list(dict.fromkeys(versions)), tuple(deletes))


def store_waiting_embeddings(ctx: WorkerContext) -> None:
    """Embed the waiting drafts and store their chunk rows; the chunks they replace leave the index
    with the waiting write."""
    writes = ctx.index_writes
    if writes is None or not writes.drafts:
        return
    drafted, writes.drafts = writes.drafts, []
    # Hundreds of small files' chunks go at once (minutes with e5-small): a watcher hears how far.
    watcher = ctx.embed_progress
    progress = (lambda done, total, of=drafted[-1].version_id: watcher(of, done, total)) if watcher else None
    for result in store_embeddings(ctx, drafted, progress):
        writes.deletes.extend(result.removed_chunk_ids)


def _write_index(ctx: WorkerContext, version_ids: list[str], extra_deletes: tuple[int, ...]) -> IndexPlan:
    with ctx.sessions() as session:
        plan = plan_index_writes(session, version_ids, ctx.settings)
    operations = [*plan.operations, *(DeleteOp(cid) for cid in extra_deletes)]
    index = ctx.index()
    if operations:
        index.bulk(operations)
        index.refresh()
    record_watermarks(ctx, plan.watermarks)
    return plan


def record_watermarks(ctx: WorkerContext, watermarks: dict[str, int | None]) -> None:
    """Mark the versions indexed at the access generation their index rows carry.

    Reads only (id, state) and writes by primary key in one executemany: a full
    reindex passes every version, and loading their rows would load every text.
    """
    if not watermarks:
        return
    signature = index_signature(ctx.settings)
    with ctx.sessions() as session, session.begin():
        writable = set(
            session.scalars(
                select(DocumentVersion.id).where(
                    in_set(DocumentVersion.id, watermarks), DocumentVersion.processing_state != ProcessingState.FAILED
                )
            )
        )
        rows = [
            {
                "id": version_id,
                "indexed_access_version": access_version,
                "indexed_signature": signature if access_version is not None else None,
                "processing_state": ProcessingState.INDEXED,
                "updated_at": utcnow(),
            }
            for version_id, access_version in watermarks.items()
            if version_id in writable
        ]
        if rows:
            session.execute(update(DocumentVersion), rows)
