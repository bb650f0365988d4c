"""Where documents come from: sources, the objects they hold, and observations.

An observation links a document version to the source object it was seen as.
Only active observations give access (spec/access.md); deleted ones are history.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import JSON, Boolean, DateTime, ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ki_core.models.base import Base, created_at_column, enum_column, id_column, utcnow

if TYPE_CHECKING:
    from ki_core.models.documents import DocumentVersion


class SourceKind(enum.StrEnum):
    LOCAL_FS = "local_fs"
    DMS = "dms"


class ObservationState(enum.StrEnum):
    ACTIVE = "active"
    DELETED = "deleted"


class Source(Base):
    __tablename__ = "sources"

    id: Mapped[str] = id_column()
    name: Mapped[str] = mapped_column(String(200), unique=True)
    kind: Mapped[SourceKind] = enum_column(SourceKind)
    # Non-secret connection details (root path, base URL); secrets live in Settings.
    config: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = created_at_column()


class SourceObject(Base):
    __tablename__ = "source_objects"
    __table_args__ = (UniqueConstraint("source_id", "external_id"),)

    id: Mapped[str] = id_column()
    source_id: Mapped[str] = mapped_column(ForeignKey("sources.id", ondelete="CASCADE"), index=True)
    # Path for local_fs, the DMS object id otherwise.
    external_id: Mapped[str] = mapped_column(String(1000))
    # True once the source told us this object's ACL, even an empty one.
    acl_known: Mapped[bool] = mapped_column(Boolean, default=False)
    title: Mapped[str | None] = mapped_column(String(1000))
    uri: Mapped[str | None] = mapped_column(String(2000))
    last_seen_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = created_at_column()


class SourceObservation(Base):
    __tablename__ = "source_observations"
    __table_args__ = (
        UniqueConstraint("version_id", "source_object_id"),
        Index("ix_source_observations_object_state", "source_object_id", "state"),
    )

    id: Mapped[str] = id_column()
    version_id: Mapped[str] = mapped_column(
        ForeignKey("document_versions.id", ondelete="CASCADE"), index=True
    )
    source_object_id: Mapped[str] = mapped_column(
        ForeignKey("source_objects.id", ondelete="CASCADE")
    )
    state: Mapped[ObservationState] = enum_column(ObservationState, default=ObservationState.ACTIVE)
    observed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    # Never loaded (lazy="raise"): they tell a flush to insert the version and the object before
    # the observation, so ingest writes a batch of files in one flush instead of one per file.
    version: Mapped[DocumentVersion] = relationship(foreign_keys=[version_id], lazy="raise")
    source_object: Mapped[SourceObject] = relationship(foreign_keys=[source_object_id], lazy="raise")
