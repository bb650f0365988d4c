"""Retention of the event inbox: processed (`done`) events are deleted once they are old enough.

Only `done` rows go, `sweep.processed_event_retention_days` after they
finished. Open rows (received, queued, processing) are work in flight; failed
and parked rows wait for an operator (`ki events redrive`) and stay, whatever
their age. Rows go in batches of their own transaction: no giant DELETE that
holds locks and bloats one PostgreSQL transaction.

Why deleting a row cannot get an old event applied again:

- The ingress knows a duplicate by its row (unique source_id, event_id), so a
  deleted row no longer answers "duplicate". A captured request cannot be
  replayed anyway: its signature covers "timestamp.body", and a timestamp
  more than `dms.signature_tolerance_seconds` from now is refused (401). A
  request accepted at `received_at` was signed within the tolerance of it, so
  from `received_at` + 2 x tolerance on nobody can replay it. A row is deleted
  only after the retention counted from `finished_at` (>= `received_at`), and
  `prunable_before` (and Settings, for the configured value) refuse a
  retention that is not longer than 2 x tolerance.
- The DMS itself may send an old event again with a fresh signature (a retry
  queue, a re-export). It is accepted as new and run; the per-subject
  watermarks (`source_watermarks`, never pruned) mark it superseded when a
  newer event was applied to its object, group, project or decision, and an
  event that is still the newest one re-applies the same state (the handlers
  are idempotent). Retention turns the 200 "duplicate" into a 202 and a
  harmless run; it never changes what SQL holds. A relation event (no
  watermark) behaves as it would when arriving late inside the window.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from ki_core.config import ConfigError, DmsSettings
from ki_core.models import EventStatus, IngestEvent
from ki_core.models.base import utcnow

# Rows per DELETE: a short transaction each, and a statement PostgreSQL plans as an index range.
DELETE_BATCH = 1000


class RetentionTooShort(ConfigError):
    """A window in which a deleted event's signed request could still be replayed."""


def prunable_before(dms: DmsSettings, older_than: timedelta) -> datetime:
    """The cutoff for `done` rows finished `older_than` ago; refuses a window inside the replay horizon."""
    if older_than <= dms.replay_horizon():
        raise RetentionTooShort(
            f"a retention of {older_than} is not longer than twice dms.signature_tolerance_seconds "
            f"({dms.signature_tolerance_seconds} s): a deleted event could be replayed and accepted as new"
        )
    return utcnow() - older_than


def count_prunable(session: Session, cutoff: datetime) -> int:
    return session.scalar(select(func.count()).select_from(IngestEvent).where(_prunable(cutoff))) or 0


def prune_processed_events(
    sessions: sessionmaker[Session], cutoff: datetime, *, batch_size: int = DELETE_BATCH, max_batches: int | None = None
) -> int:
    """Delete `done` events finished before `cutoff`, oldest first, `batch_size` rows per transaction.

    `max_batches` bounds one call (the sweep's), so a backlog drains over several
    runs. Returns how many rows were deleted.
    """
    deleted = batches = 0
    while max_batches is None or batches < max_batches:
        with sessions() as session, session.begin():
            ids = list(
                session.scalars(
                    select(IngestEvent.id).where(_prunable(cutoff)).order_by(IngestEvent.finished_at).limit(batch_size)
                )
            )
            if not ids:
                break
            # The condition again: a row re-driven since the select is no longer `done` and stays.
            result = session.execute(
                delete(IngestEvent).where(IngestEvent.id.in_(ids), _prunable(cutoff)),
                execution_options={"synchronize_session": False},
            )
        deleted += result.rowcount
        batches += 1
        if len(ids) < batch_size:
            break
    return deleted


def _prunable(cutoff: datetime) -> ColumnElement[bool]:
    return and_(IngestEvent.status == EventStatus.DONE, IngestEvent.finished_at < cutoff)
