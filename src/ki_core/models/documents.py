"""The document aggregate: projects, matters, documents, their versions and chunks."""

from __future__ import annotations

import enum
from datetime import date, datetime

from sqlalchemy import (
    JSON,
    BigInteger,
    CheckConstraint,
    Date,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from ki_core.models.base import Base, created_at_column, enum_column, id_column, utcnow


class VersionStatus(enum.StrEnum):
    DRAFT = "draft"
    FINAL = "final"
    EXECUTED = "executed"
    UNKNOWN = "unknown"


class ProcessingState(enum.StrEnum):
    PENDING = "pending"
    CONVERTED = "converted"
    EXTRACTED = "extracted"
    INDEXED = "indexed"
    FAILED = "failed"


class ChunkKind(enum.StrEnum):
    CHUNK = "chunk"
    PROFILE = "profile"
    CLAUSE = "clause"


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[str] = id_column()
    name: Mapped[str] = mapped_column(String(200), unique=True)
    title: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[datetime] = created_at_column()


class Matter(Base):
    __tablename__ = "matters"
    __table_args__ = (UniqueConstraint("project_id", "name"),)

    id: Mapped[str] = id_column()
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    title: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[datetime] = created_at_column()


class Document(Base):
    """A logical document; its versions share a `key` within the project."""

    __tablename__ = "documents"
    __table_args__ = (UniqueConstraint("project_id", "key"),)

    id: Mapped[str] = id_column()
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    matter_id: Mapped[str | None] = mapped_column(
        ForeignKey("matters.id", ondelete="SET NULL"), index=True
    )
    key: Mapped[str] = mapped_column(String(500))
    title: Mapped[str | None] = mapped_column(String(1000))
    doc_type_id: Mapped[str | None] = mapped_column(
        ForeignKey("ontology_nodes.id", ondelete="SET NULL"), index=True
    )
    # The type the source declares (a manifest's `doc_type`); doc_type_id is it or a narrower node
    # the text shows (ki_workers.stages.metadata.decided_doc_type). An ontology id, checked when
    # the manifest is read; no foreign key, so adding the column leaves the table's triggers be.
    declared_doc_type: Mapped[str | None] = mapped_column(String(200))
    # Normalized identifier strings (case numbers, § references, register numbers).
    identifiers: Mapped[list[str]] = mapped_column(JSON, default=list)
    latest_final_version_id: Mapped[str | None] = mapped_column(
        ForeignKey("document_versions.id", ondelete="SET NULL", use_alter=True)
    )
    created_at: Mapped[datetime] = created_at_column()
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )

    versions: Mapped[list[DocumentVersion]] = relationship(
        back_populates="document",
        foreign_keys="DocumentVersion.document_id",
        order_by="DocumentVersion.seq",
    )
    # Set through this on a document written in the same flush as its version: the row goes in
    # first and this column follows as one UPDATE for the flush's documents (the two rows refer to
    # each other). Never loaded (lazy="raise"); read the column.
    latest_final_version: Mapped[DocumentVersion | None] = relationship(
        foreign_keys=[latest_final_version_id], post_update=True, lazy="raise",
    )


class DocumentVersion(Base):
    """One content state of a document; identical content is one version (hash)."""

    __tablename__ = "document_versions"
    __table_args__ = (
        UniqueConstraint("document_id", "seq"),
        UniqueConstraint("document_id", "content_hash"),
        CheckConstraint("seq >= 1", name="seq_positive"),
    )

    id: Mapped[str] = id_column()
    document_id: Mapped[str] = mapped_column(
        ForeignKey("documents.id", ondelete="CASCADE"), index=True
    )
    seq: Mapped[int] = mapped_column(Integer)
    version_label: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[VersionStatus] = enum_column(VersionStatus, default=VersionStatus.UNKNOWN)
    previous_version_id: Mapped[str | None] = mapped_column(
        ForeignKey("document_versions.id", ondelete="SET NULL")
    )
    language: Mapped[str | None] = mapped_column(String(16))
    doc_date: Mapped[date | None] = mapped_column(Date)
    content_hash: Mapped[str] = mapped_column(String(64))
    media_type: Mapped[str | None] = mapped_column(String(200))
    text: Mapped[str | None] = mapped_column(Text)
    # Start offset in `text` of each page of a PDF (migration 0015); NULL for other formats and
    # for PDFs converted before.
    page_starts: Mapped[list[int] | None] = mapped_column(JSON(none_as_null=True))
    processing_state: Mapped[ProcessingState] = enum_column(
        ProcessingState, default=ProcessingState.PENDING
    )
    last_error: Mapped[str | None] = mapped_column(Text)
    # Bumped by every access-only change; the index projection records the value it saw.
    access_version: Mapped[int] = mapped_column(Integer, default=0)
    indexed_access_version: Mapped[int | None] = mapped_column(Integer)
    indexed_signature: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = created_at_column()
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )

    document: Mapped[Document] = relationship(
        back_populates="versions", foreign_keys=[document_id]
    )


class Chunk(Base):
    """A retrievable unit; its id is also its id in the search index.

    The embedding is kept in SQL with the embedder's signature so the index can
    be rebuilt and reconciled without paying for embeddings again.
    """

    __tablename__ = "chunks"
    __table_args__ = (
        UniqueConstraint("version_id", "ordinal"),
        CheckConstraint(
            # FIRST_CLAUSE_ORDINAL of ki_workers.stages.chunking; migration 0008 moved it from 1000.
            "(kind = 'profile' AND ordinal = -1) OR (kind = 'clause' AND ordinal >= 1000000000)"
            " OR (kind = 'chunk' AND ordinal >= 0 AND ordinal < 1000000000)",
            name="ordinal_matches_kind",
        ),
        Index("ix_chunks_document_id", "document_id"),
    )

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    version_id: Mapped[str] = mapped_column(
        ForeignKey("document_versions.id", ondelete="CASCADE")
    )
    document_id: Mapped[str] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"))
    ordinal: Mapped[int] = mapped_column(Integer)
    kind: Mapped[ChunkKind] = enum_column(ChunkKind, default=ChunkKind.CHUNK)
    text: Mapped[str] = mapped_column(Text)
    text_hash: Mapped[str] = mapped_column(String(64))
    char_start: Mapped[int | None] = mapped_column(Integer)
    char_end: Mapped[int | None] = mapped_column(Integer)
    locus: Mapped[str | None] = mapped_column(String(500))
    clause_type_id: Mapped[str | None] = mapped_column(
        ForeignKey("ontology_nodes.id", ondelete="SET NULL")
    )
    embedding: Mapped[bytes | None] = mapped_column(LargeBinary)
    embedding_signature: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = created_at_column()
