"""The operations page's facts (admin principals only): processing states, stopped events, the index.

Read-only SQL over ki_core's tables, so the query process needs no worker
code. Re-driving an event is write-side work (reopen, dispatch): the process
that mounts the page passes it in as `Redrive`; without one (the `api`
process, which must not load Celery) the page names the CLI command instead.
Each failed version with its file and reason is `ki status --failed` (the
page counts them). The last sweep and reconcile are not recorded by the sweep yet (it keeps
neither time in SQL), and the page says so rather than guessing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ki_core.config import Settings
from ki_core.models import DocumentVersion, EventStatus, IngestEvent, ProcessingState, Source
from ki_core.search.index import SearchIndex, index_signature

# Re-drive one event by its row id; returns the outcome in words (status and any error).
Redrive = Callable[[str], str]
STOPPED_EVENTS_SHOWN = 100


@dataclass(frozen=True)
class StoppedEvent:
    row_id: str
    event_id: str
    source: str
    event_type: str
    status: str
    attempts: int
    reason: str
    received_at: str


@dataclass(frozen=True)
class IndexFacts:
    backend: str
    name: str
    signature: str
    chunks: int | None
    problem: str | None = None


@dataclass(frozen=True)
class Overview:
    states: tuple[tuple[str, int], ...]
    events: tuple[StoppedEvent, ...]
    index: IndexFacts


def overview(session: Session, settings: Settings, index: SearchIndex) -> Overview:
    return Overview(_states(session), _stopped_events(session), index_facts(settings, index))


def _states(session: Session) -> tuple[tuple[str, int], ...]:
    counts = dict(session.execute(select(DocumentVersion.processing_state, func.count()).group_by(DocumentVersion.processing_state)).all())
    return tuple((state.value, counts.get(state, 0)) for state in ProcessingState)


def _stopped_events(session: Session) -> tuple[StoppedEvent, ...]:
    """Failed and parked events, newest first, each with its recorded error as the reason."""
    rows = session.execute(
        select(IngestEvent, Source.name)
        .join(Source, Source.id == IngestEvent.source_id)
        .where(IngestEvent.status.in_((EventStatus.FAILED, EventStatus.PARKED)))
        .order_by(IngestEvent.received_at.desc())
        .limit(STOPPED_EVENTS_SHOWN)
    )
    return tuple(
        StoppedEvent(row.id, row.event_id, source, row.event_type, row.status.value, row.attempts, row.error or "",
                     utc_text(row.received_at))
        for row, source in rows
    )


def index_facts(settings: Settings, index: SearchIndex) -> IndexFacts:
    backend = settings.search.backend
    name = settings.retrieval.index_name if backend == "opensearch" else str(settings.embedded_index_path)
    try:
        chunks: int | None = index.count()
        problem = None
    except Exception as exc:  # noqa: BLE001 - an unreachable index is a fact to show, not a broken page
        chunks, problem = None, f"{type(exc).__name__}: {exc}"
    return IndexFacts(backend, name, index_signature(settings), chunks, problem)


def utc_text(moment: datetime | None) -> str:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    if moment is None:
        return ""
    return moment.replace(tzinfo=moment.tzinfo or UTC).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
