"""Relations between documents and the decision records that cite evidence."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import JSON, CheckConstraint, DateTime, ForeignKey, Index, String, Text, func, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ki_core.models.base import Base, created_at_column, enum_column, id_column

if TYPE_CHECKING:
    from ki_core.models.documents import DocumentVersion


class RelationKind(enum.StrEnum):
    SUPERSEDES = "supersedes"
    ANNEX_OF = "annex_of"
    RESPONDS_TO = "responds_to"
    REFERENCES = "references"
    THREAD = "thread"


class Relation(Base):
    """A directed edge `from_document --kind--> to_document` (versions optional)."""

    __tablename__ = "relations"
    __table_args__ = (
        Index(
            "uq_relations_kind_from_to",
            "kind",
            "from_document_id",
            "to_document_id",
            func.coalesce(text("from_version_id"), text("''")),
            func.coalesce(text("to_version_id"), text("''")),
            unique=True,
        ),
        Index("ix_relations_to_document", "to_document_id", "kind"),
        Index("ix_relations_from_document", "from_document_id", "kind"),
        CheckConstraint(
            "from_version_id IS NOT NULL OR from_document_id <> to_document_id",
            name="no_document_self_loop",
        ),
    )

    id: Mapped[str] = id_column()
    kind: Mapped[RelationKind] = enum_column(RelationKind)
    from_document_id: Mapped[str] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"))
    to_document_id: Mapped[str] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"))
    from_version_id: Mapped[str | None] = mapped_column(
        ForeignKey("document_versions.id", ondelete="CASCADE")
    )
    to_version_id: Mapped[str | None] = mapped_column(
        ForeignKey("document_versions.id", ondelete="CASCADE")
    )
    # manifest, dms:<source>, version_chain, identifiers
    origin: Mapped[str] = mapped_column(String(200), default="local")
    attributes: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = created_at_column()

    # Never loaded (lazy="raise"): a flush inserts the edge after the versions it joins (a
    # version chain's or a mail's edge is written with the batch of files it came with).
    from_version: Mapped[DocumentVersion | None] = relationship(foreign_keys=[from_version_id], lazy="raise")
    to_version: Mapped[DocumentVersion | None] = relationship(foreign_keys=[to_version_id], lazy="raise")


class DecisionRecord(Base):
    """Why something changed: locus, change summary, rationale and its evidence."""

    __tablename__ = "decision_records"

    id: Mapped[str] = id_column()
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    matter_id: Mapped[str | None] = mapped_column(ForeignKey("matters.id", ondelete="SET NULL"))
    # The DMS event id or a local key, so a replayed decision.recorded is not duplicated.
    external_id: Mapped[str | None] = mapped_column(String(300), unique=True)
    locus: Mapped[str] = mapped_column(String(1000))
    change_summary: Mapped[str] = mapped_column(Text)
    rationale: Mapped[str] = mapped_column(Text)
    decided_by: Mapped[str | None] = mapped_column(String(300))
    decided_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = created_at_column()

    evidence: Mapped[list[DecisionEvidence]] = relationship(
        back_populates="decision", cascade="all, delete-orphan"
    )


class DecisionEvidence(Base):
    """One evidence source of a decision: a source object, optionally a version of it.

    A decision is visible only when ALL its evidence is (spec/access.md, Scope).
    """

    __tablename__ = "decision_evidence"
    __table_args__ = (
        CheckConstraint(
            "source_object_id IS NOT NULL OR version_id IS NOT NULL", name="names_evidence"
        ),
    )

    id: Mapped[str] = id_column()
    decision_id: Mapped[str] = mapped_column(
        ForeignKey("decision_records.id", ondelete="CASCADE"), index=True
    )
    source_object_id: Mapped[str | None] = mapped_column(
        ForeignKey("source_objects.id", ondelete="CASCADE"), index=True
    )
    version_id: Mapped[str | None] = mapped_column(
        ForeignKey("document_versions.id", ondelete="CASCADE"), index=True
    )

    decision: Mapped[DecisionRecord] = relationship(back_populates="evidence")
