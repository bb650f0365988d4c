"""Document types and clause types as one tree, with a materialized ancestor closure.

The closure is what makes doc_type filters subtree filters: a chunk carries
`doc_type_ancestors`, so filtering by "contract" matches "lease contract".
"""

from __future__ import annotations

import enum

from sqlalchemy import CheckConstraint, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from ki_core.models.base import Base, enum_column


class OntologyKind(enum.StrEnum):
    DOC_TYPE = "doc_type"
    CLAUSE_TYPE = "clause_type"


class OntologyNode(Base):
    __tablename__ = "ontology_nodes"

    # Readable ids such as "doc_type:contract.lease" are stable across installs.
    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[OntologyKind] = enum_column(OntologyKind)
    label: Mapped[str] = mapped_column(String(300))
    parent_id: Mapped[str | None] = mapped_column(
        ForeignKey("ontology_nodes.id", ondelete="RESTRICT"), index=True
    )


class OntologyClosure(Base):
    """(ancestor, descendant, depth) for every node pair on a root path, self included."""

    __tablename__ = "ontology_closure"
    __table_args__ = (CheckConstraint("depth >= 0", name="depth_non_negative"),)

    ancestor_id: Mapped[str] = mapped_column(
        ForeignKey("ontology_nodes.id", ondelete="CASCADE"), primary_key=True
    )
    descendant_id: Mapped[str] = mapped_column(
        ForeignKey("ontology_nodes.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    depth: Mapped[int] = mapped_column(Integer)
