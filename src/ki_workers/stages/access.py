"""Access-only reindex: when only ACLs, memberships or observations changed.

No re-splitting and no embedding call: indexed versions get a partial update
of their projection fields; versions that lost their last active observation
leave the index (SQL keeps them); versions that regained one are written back
from their stored chunk rows and vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from ki_core.acl import in_set
from ki_core.principals import index_projection
from ki_core.models import Chunk, DocumentVersion, ProcessingState
from ki_core.search.index import BulkOperation, DeleteOp, UpdateAccessOp
from ki_core.search.types import AccessProjection
from ki_workers.context import WorkerContext
from ki_workers.stages.embed_index import active_versions, plan_index_writes, record_watermarks


@dataclass(frozen=True)
class AccessReindexResult:
    updated: int
    removed: int
    restored: int


def reindex_access(ctx: WorkerContext, version_ids: list[str]) -> AccessReindexResult:
    with ctx.sessions() as session:
        operations, watermarks, counts = _plan(session, version_ids, ctx)
    if operations:
        index = ctx.index()
        index.bulk(operations)
        index.refresh()
    record_watermarks(ctx, watermarks)
    return counts


def _plan(session: Session, version_ids: list[str], ctx: WorkerContext):
    versions = [
        v
        for v in session.scalars(select(DocumentVersion).where(in_set(DocumentVersion.id, version_ids)))
        if v.processing_state == ProcessingState.INDEXED
    ]
    observed = active_versions(session, [v.id for v in versions])
    in_index = [v for v in versions if v.indexed_access_version is not None]
    update_ids = [v.id for v in in_index if v.id in observed]
    remove = [v for v in in_index if v.id not in observed]
    restore_ids = [v.id for v in versions if v.indexed_access_version is None and v.id in observed]
    operations: list[BulkOperation] = []
    watermarks: dict[str, int | None] = {}
    projections = index_projection(session, update_ids, ctx.settings)
    chunks_of = _chunk_ids(session, update_ids)
    for version in (v for v in in_index if v.id in observed):
        allowed, denied = projections.get(version.id, ((), ()))
        chunk_ids = chunks_of.get(version.id)
        if chunk_ids:
            operations.append(
                UpdateAccessOp(
                    AccessProjection(
                        document_id=version.document_id,
                        document_version_id=version.id,
                        chunk_ids=tuple(chunk_ids),
                        allowed_principals=tuple(allowed),
                        denied_principals=tuple(denied),
                        access_version=version.access_version,
                    )
                )
            )
        watermarks[version.id] = version.access_version
    removed_chunks = _chunk_ids(session, [v.id for v in remove])
    for version in remove:
        operations.extend(DeleteOp(cid) for cid in removed_chunks.get(version.id, ()))
        watermarks[version.id] = None
    if restore_ids:
        plan = plan_index_writes(session, restore_ids, ctx.settings)
        operations.extend(plan.operations)
        watermarks.update(plan.watermarks)
    return operations, watermarks, AccessReindexResult(len(update_ids), len(remove), len(restore_ids))


def _chunk_ids(session: Session, version_ids: list[str]) -> dict[str, list[int]]:
    """{version id: its chunk ids in ordinal order}, in one query for all (not one per version)."""
    chunks: dict[str, list[int]] = {}
    if version_ids:
        rows = session.execute(select(Chunk.version_id, Chunk.id).where(in_set(Chunk.version_id, version_ids))
                               .order_by(Chunk.version_id, Chunk.ordinal))  # fmt: skip
        for version_id, chunk_id in rows:
            chunks.setdefault(version_id, []).append(chunk_id)
    return chunks


def stale_access_versions(session: Session, limit: int = 1000) -> list[str]:
    """Versions whose index projection is older than their access_version (the sweep re-drives them)."""
    return list(
        session.scalars(
            select(DocumentVersion.id)
            .where(
                DocumentVersion.processing_state == ProcessingState.INDEXED,
                DocumentVersion.indexed_access_version.is_not(None),
                DocumentVersion.indexed_access_version != DocumentVersion.access_version,
            )
            .limit(limit)
        )
    )
