"""Registered retrieval corpora besides the firm's index (statutes, contracts, guidelines)."""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import JSON, BigInteger, Boolean, ForeignKey, Index, Integer, String, Text
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


class CorpusUnit(Base):
    """One indexed chunk of a corpus (an Absatz, or a piece of a long one) at its address.

    The authoritative copy of what the corpus index holds: the index is a projection of
    these rows, and address lookups (get_units, anchors, Verweise) read them here, because
    the search filters have no container/section/subsection fields.
    """

    __tablename__ = "corpus_units"
    __table_args__ = (Index("ix_corpus_units_address", "corpus_id", "container_id", "section_id"),)

    corpus_id: Mapped[str] = mapped_column(String(200), ForeignKey("corpora.id", ondelete="CASCADE"), primary_key=True)
    chunk_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    record_id: Mapped[str] = mapped_column(String(400))
    container_id: Mapped[str] = mapped_column(String(300))
    section_id: Mapped[str] = mapped_column(String(100))
    subsection: Mapped[str | None] = mapped_column(String(50))
    # Order of the unit in the loaded files: neighbours and "first chunks of a section" read it.
    position: Mapped[int] = mapped_column(Integer)
    piece: Mapped[int] = mapped_column(Integer, default=0)
    chunk_index_in_section: Mapped[int] = mapped_column(Integer, default=0)
    heading: Mapped[str | None] = mapped_column(Text)
    text: Mapped[str] = mapped_column(Text)
    text_hash: Mapped[str] = mapped_column(String(64))
    repealed: Mapped[bool] = mapped_column(Boolean, default=False)
