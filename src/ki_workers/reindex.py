"""`ki reindex`: rebuild the search index from SQL into a new index, then switch to it.

Stored chunk rows and vectors are reused while their embedder signature is the
configured one; only chunks embedded by another model are embedded again.
OpenSearch: a new concrete index named from the signature, then an atomic
alias swap. Embedded: a sibling directory, then two renames.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select

from ki_core.embedding import signature_slug
from ki_core.models import Chunk, DocumentVersion, ProcessingState
from ki_core.search.index import IndexOp, SearchIndex
from ki_workers.context import WorkerContext
from ki_workers.stages.embed_index import embed_version, plan_index_writes, record_watermarks

VERSIONS_PER_BATCH = 200


@dataclass(frozen=True)
class RebuildReport:
    versions: int
    chunks: int
    re_embedded_versions: int
    target: str


def rebuild_index(ctx: WorkerContext, on_progress: Callable[[int, int], None] | None = None) -> RebuildReport:
    signature = ctx.embedder().signature
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
                    (Chunk.embedding_signature != signature) | Chunk.embedding_signature.is_(None)
                )
            )
        )
    for version_id in sorted(foreign):
        embed_version(ctx, version_id)
    target, finish = _new_target(ctx, signature)
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
    target.refresh()
    name = finish()
    record_watermarks(ctx, watermarks)
    return RebuildReport(len(version_ids), chunks, len(foreign), name)


def _batches(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _new_target(ctx: WorkerContext, signature: str) -> tuple[SearchIndex, Callable[[], str]]:
    """A fresh index to fill, and the function that makes it the live one."""
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    if ctx.settings.search.backend == "opensearch":
        from ki_core.search.opensearch import signature_index_name

        live = ctx.index()
        name = f"{signature_index_name(ctx.settings.retrieval.index_name, signature)}-{stamp}"
        target = live.rebuild_into(name)

        def swap_alias() -> str:
            live.swap_alias(name)
            return name

        return target, swap_alias
    return _new_embedded_target(ctx, signature, stamp)


def _new_embedded_target(ctx: WorkerContext, signature: str, stamp: str) -> tuple[SearchIndex, Callable[[], str]]:
    from ki_core.search.embedded import EmbeddedIndex

    live_path = ctx.settings.embedded_index_path
    build_path = live_path.with_name(f"{live_path.name}.build-{signature_slug(signature)}-{stamp}")
    target = EmbeddedIndex(build_path, dimensions=ctx.settings.effective_embedding_dimensions,
                           commit_batch_chunks=ctx.settings.search.embedded.commit_batch_chunks)
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
