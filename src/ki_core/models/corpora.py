"""Registered retrieval corpora besides the firm's index (statutes, contracts, guidelines)."""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import JSON, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from ki_core.models.base import Base, created_at_column, enum_column


class CorpusKind(enum.StrEnum):
    STATUTES = "statutes"
    CONTRACTS = "contracts"
    GUIDELINES = "guidelines"


class Corpus(Base):
    __tablename__ = "corpora"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[CorpusKind] = enum_column(CorpusKind, default=CorpusKind.STATUTES)
    index_name: Mapped[str] = mapped_column(String(300))
    default_container: Mapped[str | None] = mapped_column(String(300))
    # Embedder signature and metric: scores are comparable only when these agree.
    embedding_signature: Mapped[str] = mapped_column(String(200))
    metric: Mapped[str] = mapped_column(String(50), default="cosine")
    unit_count: Mapped[int] = mapped_column(Integer, default=0)
    attributes: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = created_at_column()
