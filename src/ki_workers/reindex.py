"""`ki reindex`: rebuild the search index from SQL into a new index, then switch to it.

Stored chunk rows and vectors are reused while their embedder signature is the
configured one; only chunks embedded by another model are embedded again.
OpenSearch: a new concrete index named from the signature, then an atomic
alias swap. Embedded: a sibling directory, then two renames.

The live index keeps serving (and taking writes) until the switch. Writes that land
meanwhile go to the live index only, so the rebuild catches up from SQL before the
switch, and once more after it: every version whose row or observation changed since
the rebuild began is planned again into the new index (rewriting one twice is harmless).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from ki_core.acl import in_set
from ki_core.embedding import signature_slug, vector_signature
from ki_core.models import Chunk, Document, DocumentVersion, ProcessingState, SourceObservation
from ki_core.models.base import utcnow
from ki_core.search.index import IndexOp, SearchIndex, open_index
from ki_core.search.signature import configured_signature
from ki_core.store_identity import StoreMismatch, mismatch_message, sql_store_id
from ki_workers.context import WorkerContext
from ki_workers.stages.embed_index import embed_version, index_versions, plan_index_writes, record_watermarks
from ki_workers.stages.metadata import extractor_of
from ki_workers.stages.record_metadata import link_project_references, outdated_versions, re_extract

VERSIONS_PER_BATCH = 200
# Workers' clocks and this process's may differ a little: look back this far for changes.
CLOCK_MARGIN = timedelta(seconds=5)
# Catch-up rounds before the switch; each takes only what changed during the previous one.
CATCH_UP_ROUNDS = 5
# After the switch, a write that went to the old index a moment before records its watermark
# a moment after: wait that long before the last catch-up.
SETTLE_SECONDS = 2.0


@dataclass(frozen=True)
class RebuildReport:
    versions: int
    chunks: int
    re_embedded_versions: int
    target: str
    # Versions written again because they changed while the index was built (or just before).
    caught_up_versions: int = 0
    # Versions whose metadata an older extractor wrote, extracted again; and how many of them changed.
    re_extracted_versions: int = 0
    metadata_changed_versions: int = 0


def rebuild_index(
    ctx: WorkerContext, on_progress: Callable[[int, int], None] | None = None, *, replace_foreign: bool = False
) -> RebuildReport:
    """`replace_foreign`: rebuild even when the live index was filled from another store's database
    (refused by default: that store's searches would find nothing afterwards)."""
    signature = ctx.embedder().signature
    reusable = _reusable_vector_signatures(ctx)
    store_id = _store_to_rebuild(ctx, replace_foreign)
    re_extracted, metadata_changed = re_extract_outdated(ctx)
    with ctx.sessions() as session:
        version_ids = list(
            session.scalars(
                select(DocumentVersion.id)
                .where(DocumentVersion.processing_state.in_([ProcessingState.INDEXED, ProcessingState.EXTRACTED]))
                .order_by(DocumentVersion.id)
            )
        )
        foreign = set(
            session.scalars(
                select(Chunk.version_id).where(
                    Chunk.embedding_signature.not_in(reusable) | Chunk.embedding_signature.is_(None)
                )
            )
        )
    for version_id in sorted(foreign):
        embed_version(ctx, version_id)
    target, finish = _new_target(ctx, signature)
    # Each version's plan below reads SQL as it is then: only later changes need a catch-up.
    since = utcnow() - CLOCK_MARGIN
    chunks = 0
    watermarks: dict[str, int | None] = {}
    for done, batch in enumerate(_batches(version_ids, VERSIONS_PER_BATCH), start=1):
        with ctx.sessions() as session:
            plan = plan_index_writes(session, batch, ctx.settings)
        writes = [op for op in plan.operations if isinstance(op, IndexOp)]
        if writes:
            target.bulk(writes)
        chunks += len(writes)
        watermarks.update(plan.watermarks)
        if on_progress:
            on_progress(min(done * VERSIONS_PER_BATCH, len(version_ids)), len(version_ids))
    caught_up: dict[str, datetime] = {}
    for _ in range(CATCH_UP_ROUNDS):
        changed = versions_changed_since(ctx, since, caught_up)
        if not changed:
            break
        _write_plan(ctx, target, list(changed), watermarks)
        caught_up |= changed
    target.refresh()
    target.claim_store(store_id)
    name = finish()
    time.sleep(SETTLE_SECONDS)
    late = versions_changed_since(ctx, since, caught_up)
    # Before the watermarks below: they touch every version, which would all look changed.
    record_watermarks(ctx, {v: w for v, w in watermarks.items() if v not in late})
    if late:
        index_versions(ctx, sorted(late))  # through the live index: the new one now
    return RebuildReport(
        len(version_ids), chunks, len(foreign), name, len(caught_up.keys() | late.keys()), re_extracted, metadata_changed
    )


def re_extract_outdated(ctx: WorkerContext) -> tuple[int, int]:
    """(versions re-extracted, versions whose title, date or type changed), before the rebuild reads SQL.

    A store indexed by an older metadata extractor gets the current one's answer
    here; the changed versions are chunked and embedded again, since their
    profile row and the chunks' context header carry title, type and date.
    """
    extractor = extractor_of(ctx)
    with ctx.sessions() as session:
        outdated = outdated_versions(session, extractor.producer)
    changed: list[str] = []
    for batch in _batches(outdated, VERSIONS_PER_BATCH):
        with ctx.sessions() as session, session.begin():
            changed += [version_id for version_id in batch if re_extract(session, version_id, extractor)]
    with ctx.sessions() as session, session.begin():
        projects = set(session.scalars(
            select(Document.project_id).join(DocumentVersion, DocumentVersion.document_id == Document.id)
            .where(in_set(DocumentVersion.id, outdated))
        )) if outdated else set()  # fmt: skip
        for project_id in sorted(projects):
            link_project_references(session, project_id)
    for version_id in changed:
        embed_version(ctx, version_id)
    return len(outdated), len(changed)


def _reusable_vector_signatures(ctx: WorkerContext) -> list[str]:
    """The chunk rows' signatures whose vectors this configuration would produce: its own
    (vector_signature), and the bare `model:dimension` of rows stored before weights digests were
    recorded, unless the live index records another model identity (new weights of that name)."""
    embedder = ctx.embedder()
    reusable = {vector_signature(ctx.settings, embedder)}
    live = open_index(ctx.settings, read_only=True)
    try:
        recorded = live.recorded_signature()
    finally:
        live.close()
    if recorded is None or recorded.model == configured_signature(ctx.settings).model:
        reusable.add(embedder.signature)
    return sorted(reusable)


def _store_to_rebuild(ctx: WorkerContext, replace_foreign: bool) -> str:
    """This database's store id, once the live index is known not to be another store's (or may be replaced)."""
    ours = sql_store_id(ctx.sessions)
    live = open_index(ctx.settings, read_only=True)
    try:
        theirs = live.store_id()
    finally:
        live.close()
    if theirs is not None and theirs != ours and not replace_foreign:
        raise StoreMismatch(mismatch_message(ctx.settings, ours, theirs))
    return ours


def versions_changed_since(ctx: WorkerContext, since: datetime, seen: dict[str, datetime]) -> dict[str, datetime]:
    """Versions whose row (index watermark, state, access) or an observation (new, deleted)
    changed at or after `since`, with the time of their latest change; those already caught
    up at that very time are left out, so the rounds end when the writes do."""
    latest: dict[str, datetime] = {}
    with ctx.sessions() as session:
        rows = session.execute(
            select(DocumentVersion.id, DocumentVersion.updated_at).where(DocumentVersion.updated_at >= since)
        ).all()
        rows += session.execute(
            select(SourceObservation.version_id, SourceObservation.observed_at).where(SourceObservation.observed_at >= since)
        ).all()
        rows += session.execute(
            select(SourceObservation.version_id, SourceObservation.deleted_at).where(SourceObservation.deleted_at >= since)
        ).all()
    for version_id, changed_at in rows:
        if version_id not in latest or changed_at > latest[version_id]:
            latest[version_id] = changed_at
    return {v: t for v, t in latest.items() if seen.get(v) != t}


def _write_plan(ctx: WorkerContext, target: SearchIndex, version_ids: list[str], watermarks: dict) -> None:
    """Plan the versions again and write everything, deletes too, into the index being built."""
    for batch in _batches(version_ids, VERSIONS_PER_BATCH):
        with ctx.sessions() as session:
            plan = plan_index_writes(session, batch, ctx.settings)
        if plan.operations:
            target.bulk(plan.operations)
        watermarks.update(plan.watermarks)


def _batches(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _new_target(ctx: WorkerContext, signature: str) -> tuple[SearchIndex, Callable[[], str]]:
    """A fresh index to fill, and the function that makes it the live one."""
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    if ctx.settings.search.backend == "opensearch":
        from ki_core.search.opensearch import signature_index_name

        # Not ctx.index(): its check would refuse a live index of another dimension, the very
        # index this rebuild replaces. The handle only creates the new index and swaps the alias.
        live = open_index(ctx.settings)
        name = f"{signature_index_name(ctx.settings.retrieval.index_name, signature)}-{stamp}"
        target = live.rebuild_into(name)

        def swap_alias() -> str:
            target.end_bulk_load()
            live.swap_alias(name)
            live.close()
            ctx.close_index()
            return name

        return target, swap_alias
    return _new_embedded_target(ctx, signature, stamp)


def _new_embedded_target(ctx: WorkerContext, signature: str, stamp: str) -> tuple[SearchIndex, Callable[[], str]]:
    from ki_core.search.embedded import EmbeddedIndex

    live_path = ctx.settings.embedded_index_path
    build_path = live_path.with_name(f"{live_path.name}.build-{signature_slug(signature)}-{stamp}")
    target = EmbeddedIndex(build_path, dimensions=ctx.settings.effective_embedding_dimensions,
                           commit_batch_chunks=ctx.settings.search.embedded.commit_batch_chunks,
                           expected_signature=configured_signature(ctx.settings))
    target.ensure()

    def swap_directories() -> str:
        target.close()
        ctx.close_index()
        retired = live_path.with_name(f"{live_path.name}.retired-{stamp}")
        if live_path.exists():
            live_path.rename(retired)
        build_path.rename(live_path)
        if retired.exists():
            shutil.rmtree(retired)
        return str(live_path)

    return target, swap_directories
