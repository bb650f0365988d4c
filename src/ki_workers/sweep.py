"""Beat jobs: re-drive work that was accepted but did not finish.

Access projections older than their version's access_version are re-sent;
versions stuck before `indexed` are re-dispatched to their next stage.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from ki_core.models import DocumentVersion, ProcessingState
from ki_core.models.base import utcnow
from ki_workers.context import WorkerContext
from ki_workers.stages.access import stale_access_versions

# A version older than this in converted/extracted state lost its task (killed worker, lost message).
STUCK_AFTER = timedelta(minutes=15)


def run_sweep(ctx: WorkerContext) -> dict:
    from ki_workers import tasks

    with ctx.sessions() as session:
        stale = stale_access_versions(session)
        cutoff = utcnow() - STUCK_AFTER
        stuck = session.execute(
            select(DocumentVersion.id, DocumentVersion.processing_state).where(
                DocumentVersion.processing_state.in_([ProcessingState.CONVERTED, ProcessingState.EXTRACTED]),
                DocumentVersion.updated_at < cutoff,
            )
        ).all()
    if stale:
        tasks.reindex_access.delay(stale)
    for version_id, state in stuck:
        (tasks.extract_metadata if state == ProcessingState.CONVERTED else tasks.chunk_embed).delay(version_id)
    return {"access_redriven": len(stale), "stages_redriven": len(stuck)}
