"""Thin Celery tasks: ids in, one stage function, ids out to the next stage.

Stage functions know nothing of Celery (they are tested without a broker).
Transient errors retry with backoff and jitter as declared in app.py;
permanent ones are recorded on the version row by the stage and not retried.
"""

from __future__ import annotations

import logging

import httpx
import kombu.exceptions
import redis.exceptions
from celery import shared_task
from sqlalchemy.exc import IntegrityError, InterfaceError, OperationalError

from ki_core.audit import AuditUnavailable
from ki_core.embedding import GatewayUnavailable
from ki_core.search.embedded import IndexLockedError
from ki_core.search.types import SearchBackendError
from ki_workers.app import (
    CHUNK_EMBED,
    CHUNK_EMBED_MANY,
    EXTRACT_METADATA,
    EXTRACT_METADATA_MANY,
    INGEST,
    INGEST_MANY,
    PROCESS_ACCESS_EVENT,
    PROCESS_EVENT,
    RECONCILE,
    REINDEX_ACCESS,
    RETRY_POLICY,
    SWEEP,
    WRITE_INDEX,
    index_writer_is_access_worker,
)
from ki_workers.context import worker_context
from ki_workers.event_inbox import EventTask
from ki_workers.sources.dms import ContentUnavailable, ObjectNotYetKnown
from ki_workers.telemetry import record_task as _connects_task_latency_signals  # noqa: F401

log = logging.getLogger(__name__)

TRANSIENT_ERRORS = (
    OperationalError,
    InterfaceError,
    redis.exceptions.ConnectionError,
    # What `.delay()` of the next stage raises while the broker is away ("Error 111 connecting to ..."):
    # an event that ends this way is retried and redriven like a database blip, never left failed.
    kombu.exceptions.OperationalError,
    SearchBackendError,
    GatewayUnavailable,
    httpx.TransportError,
    IndexLockedError,
)
TASK_OPTIONS = {"autoretry_for": TRANSIENT_ERRORS, "acks_late": True, "reject_on_worker_lost": True, **RETRY_POLICY}


@shared_task(name=INGEST, **TASK_OPTIONS)
def ingest(source_id: str, external_id: str, project_id: str, entry: dict, matter: str | None = None) -> dict:
    from ki_workers.folder_sync import ingest_local_object

    ctx = worker_context()
    return _hand_on_ingested(ctx, ingest_local_object(ctx, source_id, external_id, project_id, entry, matter))


@shared_task(name=INGEST_MANY, **TASK_OPTIONS)
def ingest_many(source_id: str, project_id: str, files: list[tuple[str, dict]], matter: str | None = None) -> list[dict]:
    """ki.ingest for a batch of (external id, entry) of one folder, in one transaction: a result per file,
    in order; a file that cannot be read is failed with its reason, the others go on."""
    from ki_workers.folder_sync import ingest_local_objects

    ctx = worker_context()
    return [
        {"outcome": "failed", "reason": str(result)} if isinstance(result, OSError) else _hand_on_ingested(ctx, result)
        for result in ingest_local_objects(ctx, source_id, project_id, files, matter)
    ]


def _hand_on_ingested(ctx, result) -> dict:
    """The next stages for what an ingest stored or retired; the task's result."""
    if result.retired_version_ids:
        reindex_access.delay(list(result.retired_version_ids))
    for stored in (result, *result.attachments):  # a mail's attachments are documents of their own
        if stored.outcome == "new" or (stored.outcome == "unchanged" and _left_unfinished(ctx, stored.version_id)):
            extract_metadata.delay(stored.version_id)
    return {
        "version_id": result.version_id, "outcome": str(result.outcome), "reason": result.reason,
        "attachments": [
            {"version_id": a.version_id, "outcome": str(a.outcome), "reason": a.reason} for a in result.attachments
        ],
    }  # fmt: skip


def _left_unfinished(ctx, version_id: str) -> bool:
    """A known version whose later stages never ran (Ctrl-C, a crash): ingesting it again resumes them
    instead of reporting it unchanged and leaving it out of search."""
    from ki_core.models import DocumentVersion, ProcessingState

    with ctx.sessions() as session:
        state = session.get(DocumentVersion, version_id).processing_state
    return state in (ProcessingState.CONVERTED, ProcessingState.EXTRACTED)


@shared_task(name=EXTRACT_METADATA, **TASK_OPTIONS)
def extract_metadata(version_id: str) -> str:
    from ki_workers.stages.metadata import extractor_of
    from ki_workers.stages.record_metadata import defer_extraction, record_metadata

    ctx = worker_context()
    if defer_extraction(ctx, version_id):  # in-process batch work: recorded with others, then handed on
        return version_id
    with ctx.sessions() as session, session.begin():
        record_metadata(session, version_id, extractor_of(ctx), link_now=ctx.index_writes is None)
    chunk_embed.delay(version_id)
    return version_id


@shared_task(name=EXTRACT_METADATA_MANY, **TASK_OPTIONS)
def extract_metadata_many(version_ids: list[str]) -> list[str]:
    """extract_metadata for a batch (a folder sync in-process), in one transaction."""
    from ki_workers.stages.metadata import extractor_of
    from ki_workers.stages.record_metadata import record_metadata_many, rules_ahead_of

    ctx = worker_context()
    with ctx.sessions() as session, session.begin():
        record_metadata_many(session, version_ids, extractor_of(ctx), rules_ahead_of(ctx))
    chunk_embed_many.delay(version_ids)
    return version_ids


@shared_task(name=CHUNK_EMBED, **TASK_OPTIONS)
def chunk_embed(version_id: str) -> int:
    return _embed_and_index([version_id])


@shared_task(name=CHUNK_EMBED_MANY, **TASK_OPTIONS)
def chunk_embed_many(version_ids: list[str]) -> int:
    return _embed_and_index(version_ids)


def _embed_and_index(version_ids: list[str]) -> int:
    from ki_workers.stages.embed_index import embed_versions, index_versions

    ctx = worker_context()
    elsewhere = index_writer_is_access_worker(ctx.settings)
    chunks = 0
    for result in embed_versions(ctx, version_ids):  # each indexed as it is done (or waits for the shared write)
        if elsewhere:
            write_index.delay([result.version_id], list(result.removed_chunk_ids))
        else:
            index_versions(ctx, [result.version_id], extra_deletes=result.removed_chunk_ids)
        chunks += result.chunk_count
    return chunks


@shared_task(name=WRITE_INDEX, **TASK_OPTIONS)
def write_index(version_ids: list[str], removed_chunk_ids: list[int]) -> int:
    """Phases 2 and 3 of chunk_embed in the embedded index's one writer (app.index_writer_is_access_worker)."""
    from ki_workers.stages.embed_index import index_versions

    index_versions(worker_context(), version_ids, extra_deletes=tuple(removed_chunk_ids))
    return len(version_ids)


@shared_task(name=REINDEX_ACCESS, **TASK_OPTIONS)
def reindex_access(version_ids: list[str]) -> dict:
    from ki_workers.stages.access import reindex_access as reindex

    result = reindex(worker_context(), version_ids)
    return {"updated": result.updated, "removed": result.removed, "restored": result.restored}


@shared_task(name=SWEEP, **TASK_OPTIONS)
def sweep() -> dict:
    from ki_workers.sweep import run_sweep

    return run_sweep(worker_context())


# A relation may name an object that arrives a moment later, and two events for one new
# object may race to create it (IntegrityError): both resolve on a retry.
# AuditUnavailable: a membership change whose record could not be written was rolled back; retry it.
EVENT_TRANSIENT_ERRORS = (IntegrityError, ContentUnavailable, ObjectNotYetKnown, AuditUnavailable)
EVENT_TASK_OPTIONS = {**TASK_OPTIONS, "autoretry_for": (*TRANSIENT_ERRORS, *EVENT_TRANSIENT_ERRORS)}


@shared_task(name=PROCESS_EVENT, base=EventTask, **EVENT_TASK_OPTIONS)
def process_event(event_row_id: str) -> str:
    """Apply one accepted source event (ki_workers.event_inbox), then hand its ids to the next stages."""
    from ki_workers.event_inbox import run_event

    return run_event(worker_context(), event_row_id, hand_on=_hand_on)


@shared_task(name=PROCESS_ACCESS_EVENT, base=EventTask, **EVENT_TASK_OPTIONS)
def process_access_event(event_row_id: str) -> str:
    """The same for ACL, group, project and delete events, on the access queue (never behind uploads)."""
    from ki_workers.event_inbox import run_event

    return run_event(worker_context(), event_row_id, hand_on=_hand_on)


def _hand_on(followups) -> None:
    from ki_workers.sources.dms import batched

    for version_id in followups.extract:
        extract_metadata.delay(version_id)
    for version_id in followups.embed:
        chunk_embed.delay(version_id)
    for version_ids in batched(followups.access):
        reindex_access.delay(version_ids)


@shared_task(name=RECONCILE, **TASK_OPTIONS)
def reconcile() -> dict:
    """Compare the index with SQL and repair it from stored chunks and vectors (no embedding)."""
    from ki_workers.sweep import reconcile_index

    return reconcile_index(worker_context()).as_dict()
