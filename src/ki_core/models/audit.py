"""The audit trail: who searched for what and read which document, on which surface. Never document text.

Append-only: rows are written by ki_core.audit and removed only by the retention
prune. On PostgreSQL the table lives in the store's database; on SQLite in a file
of its own (ki_core.audit), so a search never waits behind an ingest's write.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from ki_core.models.base import Base

AUDIT_TABLE = "audit_records"


class AuditRecord(Base):
    __tablename__ = AUDIT_TABLE

    # SQLite autoincrements only an INTEGER PRIMARY KEY.
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    subject: Mapped[str] = mapped_column(String(512), index=True)
    # The principals the caller acted as, JSON (as resolved from the credential, before group expansion).
    principals: Mapped[str] = mapped_column(Text)
    surface: Mapped[str] = mapped_column(String(16))
    action: Mapped[str] = mapped_column(String(32))
    query: Mapped[str | None] = mapped_column(Text)
    hit_count: Mapped[int | None] = mapped_column(Integer)
    # A read's document; a search's shown documents are in document_ids (JSON list).
    document_id: Mapped[str | None] = mapped_column(String(64), index=True)
    document_ids: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[str | None] = mapped_column(Text)
    # A membership change: the group, the member added or removed, the event that carried it.
    group_principal: Mapped[str | None] = mapped_column(String(512), index=True)
    member_principal: Mapped[str | None] = mapped_column(String(512), index=True)
    event_id: Mapped[str | None] = mapped_column(String(300))
