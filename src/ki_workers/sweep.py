"""Beat jobs: re-drive work that was accepted but did not finish, and reconcile the index with SQL.

`run_sweep` (every `sweep.interval_seconds`): events accepted but not
finished after `sweep.event_redispatch_after_seconds` (doubled per run they
had) are dispatched again, and so are events that failed on a transient error
until their attempts run out (a lost broker message, a killed worker or a
database restart loses nothing); access projections
older than their version's access_version are re-sent; versions stuck before
`indexed` go to their next stage; processed events past
`sweep.processed_event_retention_days` are deleted (event_retention.py).

`reconcile_index` (every `sweep.reconcile_interval_seconds`): the index is a
projection of SQL; missing, stale and orphaned chunk rows are repaired from
the stored chunk rows and vectors, without an embedding call.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import timedelta

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from ki_core.models import (
    Chunk,
    Document,
    DocumentVersion,
    EventStatus,
    IngestEvent,
    ObservationState,
    ProcessingState,
    Project,
    SourceObservation,
)
from ki_core.models.base import utcnow
from ki_core.search.types import ScopeFilter, SearchFilters
from ki_workers.app import (
    CHUNK_EMBED,
    EXTRACT_METADATA,
    QUEUE_ACCESS,
    QUEUE_INDEX,
    QUEUE_INGEST,
    REINDEX_ACCESS,
    start_task,
)
from ki_workers.context import WorkerContext
from ki_workers.event_inbox import WaitingEvent, dispatch_events, events_due, gave_up_note, lease_is_free
from ki_workers.event_retention import prunable_before, prune_processed_events
from ki_workers.sources.dms_events import ACCESS_EVENT_TYPES
from ki_workers.stages.access import stale_access_versions
from ki_workers.stages.embed_index import index_versions

log = logging.getLogger(__name__)

# Batches one sweep deletes at most (50,000 rows): a backlog, as on the first run, drains over several sweeps.
PRUNE_BATCHES_PER_SWEEP = 50


def run_sweep(ctx: WorkerContext) -> dict:
    idle = idle_queues(ctx)
    return {
        **redrive_versions(ctx, idle),
        "events_redispatched": redispatch_events(ctx, idle=idle),
        "events_pruned": prune_events(ctx),
    }


def sweep_in_process(ctx: WorkerContext) -> dict:
    """The sweep of a process that runs the tasks itself (broker.eager: `ki serve` on the
    embedded default), where no beat and no worker exist to do it. It takes its turn like a
    webhook, so it never overlaps the processing of one."""
    from ki_workers.event_inbox import in_process_turn

    with in_process_turn(ctx.settings):
        return run_sweep(ctx)


def prune_events(ctx: WorkerContext) -> int:
    """Delete processed events past the retention (never open, failed or parked ones); returns how many."""
    days = ctx.settings.sweep.processed_event_retention_days
    cutoff = prunable_before(ctx.settings.dms, timedelta(days=days))
    pruned = prune_processed_events(ctx.sessions, cutoff, max_batches=PRUNE_BATCHES_PER_SWEEP)
    if pruned:
        log.info("sweep: deleted %d processed event(s) finished more than %d days ago", pruned, days)
    return pruned


def idle_queues(ctx: WorkerContext) -> set[str]:
    """Queues with no message waiting. Work older than the delay while its queue still holds a
    backlog is most likely waiting its turn, not lost: sending it again would only multiply the
    backlog (every sweep would add another copy of every waiting item)."""
    queues = {QUEUE_INGEST, QUEUE_INDEX, QUEUE_ACCESS}
    if ctx.settings.broker.eager:
        return queues
    from ki_workers.telemetry import queue_depths, redis_client

    return {queue for queue, depth in queue_depths(redis_client(ctx.settings)).items() if depth == 0} & queues


def redrive_versions(ctx: WorkerContext, idle: set[str] | None = None) -> dict:
    idle = idle_queues(ctx) if idle is None else idle
    with ctx.sessions() as session:
        stale = stale_access_versions(session) if QUEUE_ACCESS in idle else []
        cutoff = utcnow() - timedelta(seconds=ctx.settings.sweep.stuck_version_after_seconds)
        states = [s for s, q in ((ProcessingState.CONVERTED, QUEUE_INGEST), (ProcessingState.EXTRACTED, QUEUE_INDEX)) if q in idle]
        stuck = session.execute(
            select(DocumentVersion.id, DocumentVersion.processing_state).where(
                DocumentVersion.processing_state.in_(states),
                DocumentVersion.updated_at < cutoff,
            )
        ).all() if states else []
    if stale:
        start_task(REINDEX_ACCESS, stale)
    for version_id, state in stuck:
        start_task(EXTRACT_METADATA if state == ProcessingState.CONVERTED else CHUNK_EMBED, version_id)
    return {"access_redriven": len(stale), "stages_redriven": len(stuck)}


def redispatch_events(ctx: WorkerContext, older_than: timedelta | None = None, idle: set[str] | None = None) -> int:
    """Dispatch again the events whose message is lost or whose transient failure may have passed.

    Lost means: `received` (never handed to the broker), `processing` with a
    free lease (its worker died), or `queued` while its queue is empty (nothing
    is waiting, so the message is gone). A `failed` event whose error was
    transient (the database or broker went away while its retries ran) runs
    again, and is parked with the reason once it has had
    `sweep.max_event_attempts` runs. Each event waits `older_than` (default
    `sweep.event_redispatch_after_seconds`), doubled for every run it already
    had, so an event that keeps losing its worker is not copied every sweep.
    Returns how many were dispatched.
    """
    age = older_than if older_than is not None else timedelta(seconds=ctx.settings.sweep.event_redispatch_after_seconds)
    idle = idle_queues(ctx) if idle is None else idle
    with ctx.sessions() as session:
        candidates = events_due(session, age)
    failed = [event for event in candidates if event.status == EventStatus.FAILED]
    lost = {e.row_id: e.event_type for e in candidates if e.status != EventStatus.FAILED and _message_lost(ctx, e, idle)}
    lost |= retry_failed_events(ctx, failed)
    if not lost:
        return 0
    with ctx.sessions() as session, session.begin():
        session.execute(update(IngestEvent).where(IngestEvent.id.in_(list(lost))).values(updated_at=utcnow()))
    return dispatch_events(ctx.settings, ctx.sessions, lost)


def retry_failed_events(ctx: WorkerContext, failed: list[WaitingEvent]) -> dict[str, str]:
    """Reopen transient failures with attempts left ({row id: type}); park the others with the reason."""
    limit = ctx.settings.sweep.max_event_attempts
    reopened: dict[str, str] = {}
    with ctx.sessions() as session, session.begin():
        for event in failed:
            row = session.get(IngestEvent, event.row_id, with_for_update=True)
            if row is None or row.status != EventStatus.FAILED or not row.transient:
                continue
            if row.attempts >= limit:
                row.status, row.transient, row.error = EventStatus.PARKED, False, gave_up_note(limit, row.error)
                log.warning("sweep: event %s parked: %s", row.id, row.error)
                continue
            row.status, row.transient, row.finished_at = EventStatus.RECEIVED, False, None
            reopened[row.id] = row.event_type
    if reopened:
        log.info("sweep: %d event(s) that failed on a transient error run again", len(reopened))
    return reopened


def _message_lost(ctx: WorkerContext, event: WaitingEvent, idle: set[str]) -> bool:
    if event.status == EventStatus.RECEIVED:
        return True
    if event.status == EventStatus.PROCESSING:
        return lease_is_free(ctx.engine, event.row_id)
    return event_queue(event.event_type) in idle


def event_queue(event_type: str) -> str:
    return QUEUE_ACCESS if event_type in ACCESS_EVENT_TYPES else QUEUE_INGEST


# ----------------------------------------------------------------- reconcile


@dataclass
class ReconcileReport:
    projects_checked: int = 0
    projects_mismatched: int = 0
    orphan_documents_removed: int = 0
    documents_repaired: int = 0
    versions_refreshed: int = 0
    chunks_expected: int = 0
    chunks_in_index_before: int = 0
    chunks_in_index_after: int = 0
    # Chunks of projects SQL does not know: only a rebuild (`ki reindex`) removes them.
    unaccounted_chunks: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _Expected:
    # project -> document -> version -> chunk ids that SQL says the index holds
    chunks: dict[str, dict[str, dict[str, list[int]]]]
    access_versions: dict[str, int]
    documents_of_project: dict[str, list[str]]

    def chunk_count(self, project_id: str, document_id: str | None = None) -> int:
        documents = self.chunks.get(project_id, {})
        if document_id is not None:
            documents = {document_id: documents.get(document_id, {})}
        return sum(len(ids) for versions in documents.values() for ids in versions.values())


# OpenSearch pages at most 10,000 hits deep (index.max_result_window).
MAX_ORPHAN_PAGE_DEPTH = 10_000


def reconcile_index(ctx: WorkerContext) -> ReconcileReport:
    """Counts per project find where the index and SQL differ; there, orphaned documents
    (in the index, not in SQL) are removed and documents whose counts differ are rewritten;
    everywhere, one stored chunk per version shows whether its access fields are stale.

    Repairs come from stored rows through the pipeline's one bulk path, never the embedder.
    """
    index = ctx.index()
    index.refresh()
    with ctx.sessions() as session:
        expected = _expected_index(session)
    report = ReconcileReport(chunks_in_index_before=index.count())
    mismatched = []
    for project_id in expected.documents_of_project:
        report.projects_checked += 1
        want = expected.chunk_count(project_id)
        report.chunks_expected += want
        # Both counts: a missing chunk and an orphan in one project would cancel out in the first.
        in_project = index.count(ScopeFilter(project_ids=frozenset([project_id])))
        known = frozenset(expected.documents_of_project[project_id])
        of_known_documents = index.count(ScopeFilter(document_ids=known)) if known else 0
        if in_project != want or of_known_documents != want:
            mismatched.append(project_id)
    report.projects_mismatched = len(mismatched)
    report.orphan_documents_removed = _remove_orphan_documents(index, expected, mismatched)
    repair = {
        document_id
        for project_id in mismatched
        for document_id in expected.documents_of_project[project_id]
        if index.count(ScopeFilter(document_ids=frozenset([document_id]))) != expected.chunk_count(project_id, document_id)
    }
    stale_versions = _stale_versions(index, expected, repair)
    report.documents_repaired = _repair_documents(ctx, sorted(repair), expected)
    report.versions_refreshed = _reindex_versions(ctx, stale_versions)
    index.refresh()
    report.chunks_in_index_after = index.count()
    report.unaccounted_chunks = max(0, report.chunks_in_index_after - report.chunks_expected)
    return report


def _remove_orphan_documents(index, expected: _Expected, project_ids: list[str]) -> int:
    """Documents the index holds under a project whose SQL rows do not include them."""
    orphans: set[str] = set()
    for project_id in project_ids:
        scope = ScopeFilter(
            project_ids=frozenset([project_id]),
            excluded_document_ids=frozenset(expected.documents_of_project[project_id]),
        )
        offset = 0
        while offset < MAX_ORPHAN_PAGE_DEPTH and index.count(scope):
            hits = index.search_filter(scope, SearchFilters(), size=500, offset=offset)
            orphans.update(hit.document_id for hit in hits)
            if len(hits) < 500:
                break
            offset += len(hits)
    for document_id in sorted(orphans):
        index.delete_document(document_id)
    if orphans:
        index.refresh()
    return len(orphans)


def _expected_index(session: Session) -> _Expected:
    observed = exists().where(
        SourceObservation.version_id == DocumentVersion.id, SourceObservation.state == ObservationState.ACTIVE
    )
    rows = session.execute(
        select(Document.project_id, Chunk.document_id, Chunk.version_id, Chunk.id, DocumentVersion.access_version)
        .join(DocumentVersion, DocumentVersion.id == Chunk.version_id)
        .join(Document, Document.id == Chunk.document_id)
        .where(DocumentVersion.processing_state == ProcessingState.INDEXED, observed)
        .order_by(Chunk.version_id, Chunk.ordinal)
    )
    chunks: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    access_versions: dict[str, int] = {}
    for project_id, document_id, version_id, chunk_id, access_version in rows:
        chunks[project_id][document_id][version_id].append(chunk_id)
        access_versions[version_id] = access_version
    documents: dict[str, list[str]] = defaultdict(list)
    for project_id, document_id in session.execute(
        select(Project.id, Document.id).outerjoin(Document, Document.project_id == Project.id).order_by(Project.id, Document.id)
    ):
        documents[project_id].extend([document_id] if document_id else [])
    return _Expected(chunks, access_versions, dict(documents))


def _stale_versions(index, expected: _Expected, skip_documents: set[str]) -> list[str]:
    """Versions whose first chunk is missing or carries another version's id or an old access_version.

    The first chunks are read in batches (`stored_fields_of`): on OpenSearch one `_mget` per
    thousand versions, not one request per version every hour."""
    first_chunk = {
        version_id: chunk_ids[0]
        for documents in expected.chunks.values()
        for document_id, versions in documents.items()
        if document_id not in skip_documents
        for version_id, chunk_ids in versions.items()
    }
    stored = index.stored_fields_of(first_chunk.values())
    stale = []
    for version_id, chunk_id in first_chunk.items():
        fields = stored.get(chunk_id)
        if (
            fields is None
            or fields.get("document_version_id") != version_id
            or fields.get("access_version") != expected.access_versions[version_id]
        ):
            stale.append(version_id)
    return stale


def _repair_documents(ctx: WorkerContext, document_ids: list[str], expected: _Expected) -> int:
    """Drop every row of the document, then write what SQL holds for it back."""
    index = ctx.index()
    for document_id in document_ids:
        index.delete_document(document_id)
    wanted = set(document_ids)
    version_ids = [
        version_id
        for documents in expected.chunks.values()
        for document_id, versions in documents.items()
        if document_id in wanted
        for version_id in versions
    ]
    _reindex_versions(ctx, version_ids)
    if not version_ids:
        index.refresh()
    return len(document_ids)


def _reindex_versions(ctx: WorkerContext, version_ids: list[str]) -> int:
    """From stored chunk rows and vectors, through the pipeline's one bulk path (no embedding)."""
    if version_ids:
        index_versions(ctx, version_ids)
    return len(version_ids)
