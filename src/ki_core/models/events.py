"""The durable inbox of source events and the metadata stage's artifacts."""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import JSON, Boolean, DateTime, ForeignKey, Index, Integer, String, Text, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column

from ki_core.models.base import Base, created_at_column, enum_column, id_column, utcnow


class EventStatus(enum.StrEnum):
    RECEIVED = "received"  # committed, not yet handed to the broker
    QUEUED = "queued"
    PROCESSING = "processing"
    DONE = "done"
    FAILED = "failed"  # the retries ran out: the sweep redrives it when transient, else an operator
    PARKED = "parked"  # permanent error (schema, unreadable content); kept for an operator


class IngestEvent(Base):
    """Every accepted event is a row before it is acknowledged; the sweep re-drives it."""

    __tablename__ = "ingest_events"
    __table_args__ = (
        UniqueConstraint("source_id", "event_id"),
        Index("ix_ingest_events_status_received", "status", "received_at"),
        # The retention prune: the oldest `done` rows by finish time, a batch at a time.
        Index("ix_ingest_events_status_finished", "status", "finished_at"),
    )

    id: Mapped[str] = id_column()
    source_id: Mapped[str] = mapped_column(ForeignKey("sources.id", ondelete="CASCADE"))
    event_id: Mapped[str] = mapped_column(String(300))
    event_type: Mapped[str] = mapped_column(String(100))
    schema_version: Mapped[int] = mapped_column(Integer, default=1)
    payload: Mapped[dict] = mapped_column(JSON)
    status: Mapped[EventStatus] = enum_column(EventStatus, default=EventStatus.RECEIVED)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    # A failure the sweep retries (a database, broker or backend that went away) rather than one
    # an operator must look at: failed + transient is redriven until sweep.max_event_attempts.
    transient: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class MetadataArtifact(Base):
    """Output of the metadata stage for one version: by a model or by the rules."""

    __tablename__ = "metadata_artifacts"
    __table_args__ = (UniqueConstraint("version_id", "kind", "producer"),)

    id: Mapped[str] = id_column()
    version_id: Mapped[str] = mapped_column(
        ForeignKey("document_versions.id", ondelete="CASCADE"), index=True
    )
    # e.g. "metadata", "notable_clauses"
    kind: Mapped[str] = mapped_column(String(100))
    # "rules:<version>" or "llm:<model>"
    producer: Mapped[str] = mapped_column(String(200))
    payload: Mapped[dict] = mapped_column(JSON)
    created_at: Mapped[datetime] = created_at_column()


class SourceWatermark(Base):
    """The newest event applied per (source, subject), e.g. `acl:<object id>` or `group:<name>`.

    Events can arrive or be retried out of order; an event older than the one
    already applied to its subject is skipped, so a late grant cannot undo a revocation.
    """

    __tablename__ = "source_watermarks"
    __table_args__ = (UniqueConstraint("source_id", "subject"),)

    id: Mapped[str] = id_column()
    source_id: Mapped[str] = mapped_column(ForeignKey("sources.id", ondelete="CASCADE"))
    subject: Mapped[str] = mapped_column(String(1100))
    occurred_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    event_id: Mapped[str] = mapped_column(String(300))
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )
