"""The store's identity: one id for the SQL database, which its search index carries too.

Several databases can point at one index path (the embedded index lives under
the state directory whatever `database.url` says), and an index filled from
another database answers every search with nothing, or with that database's
hits. The id makes the pairing checkable: `ki_core.store_identity` compares it.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from ki_core.models.base import Base, created_at_column


class StoreIdentity(Base):
    """A single row, written by migration 0009 (a new id per database) and by `ki store migrate`
    (the copy keeps its source's id: it is the same store, moved)."""

    __tablename__ = "store_identity"
    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, default=1)
    store_id: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = created_at_column()
