"""Grants, group memberships (mirrored and local) and the access generation counter.

Principals are stored normalized and alias-mapped at write time, so visibility
checks compare with plain equality (spec/access.md, Principals 4).
"""

from __future__ import annotations

import enum
from datetime import datetime

from sqlalchemy import BigInteger, Boolean, CheckConstraint, ForeignKey, Index, Integer, String, func, text
from sqlalchemy.orm import Mapped, mapped_column

from ki_core.models.base import Base, created_at_column, enum_column, id_column


class GrantScope(enum.StrEnum):
    PROJECT = "project"
    DOCUMENT = "document"
    SOURCE_OBJECT = "source_object"


class GrantEffect(enum.StrEnum):
    ALLOW = "allow"
    DENY = "deny"


# The origin of grants an operator made here (`ki access grant`); a mirrored grant's origin is the
# name of the source that reported it, so a source's replacement of its own grants never reaches these.
LOCAL_ORIGIN = "local"


class Grant(Base):
    __tablename__ = "grants"
    __table_args__ = (
        # Exactly one target, and it is the one the scope names.
        CheckConstraint(
            "(scope = 'project' AND project_id IS NOT NULL AND document_id IS NULL"
            " AND source_object_id IS NULL)"
            " OR (scope = 'document' AND document_id IS NOT NULL AND project_id IS NULL"
            " AND source_object_id IS NULL)"
            " OR (scope = 'source_object' AND source_object_id IS NOT NULL"
            " AND project_id IS NULL AND document_id IS NULL)",
            name="one_target_matching_scope",
        ),
        CheckConstraint("length(principal) > 0", name="principal_not_empty"),
        Index("ix_grants_principal_effect", "principal", "effect"),
        # Migration 0011: E's grants of a kind, and E's document allows in document order, read
        # without table rows (ki_query.scope).
        Index("ix_grants_principal_scope_effect_document", "principal", "scope", "effect", "document_id"),
        Index("ix_grants_document_scope_effect_principal", "document_id", "scope", "effect", "principal"),
        # Migration 0013: the predicate's per-candidate lookups on a project or an observed object,
        # led by the target (SQLite read every object grant through the unique index's `scope`).
        # Partial: to ANALYZE statistics the other grants' NULL targets are one huge value.
        Index(
            "ix_grants_object_scope_effect_principal", "source_object_id", "scope", "effect", "principal",
            sqlite_where=text("source_object_id IS NOT NULL"), postgresql_where=text("source_object_id IS NOT NULL"),
        ),
        Index(
            "ix_grants_project_scope_effect_principal", "project_id", "scope", "effect", "principal",
            sqlite_where=text("project_id IS NOT NULL"), postgresql_where=text("project_id IS NOT NULL"),
        ),
        # NULLs are distinct in unique indexes on both databases: key on the one target. The
        # origin is part of the key, so a local rule and a mirrored ACL entry alike are two rows.
        Index(
            "uq_grants_target_principal_effect_origin",
            "scope",
            func.coalesce(text("project_id"), text("document_id"), text("source_object_id")),
            "principal",
            "effect",
            "origin",
            unique=True,
        ),
    )

    id: Mapped[str] = id_column()
    scope: Mapped[GrantScope] = enum_column(GrantScope)
    project_id: Mapped[str | None] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    document_id: Mapped[str | None] = mapped_column(
        ForeignKey("documents.id", ondelete="CASCADE"), index=True
    )
    source_object_id: Mapped[str | None] = mapped_column(
        ForeignKey("source_objects.id", ondelete="CASCADE"), index=True
    )
    effect: Mapped[GrantEffect] = enum_column(GrantEffect)
    principal: Mapped[str] = mapped_column(String(300))
    # LOCAL_ORIGIN for grants made here, else the name of the source that mirrored it.
    origin: Mapped[str] = mapped_column(String(200), default=LOCAL_ORIGIN)
    created_at: Mapped[datetime] = created_at_column()


class GroupMembership(Base):
    """`member_principal` belongs to `group_principal`, as a source told us or, without a source, an operator."""

    __tablename__ = "group_memberships"
    __table_args__ = (
        Index(
            "uq_group_memberships_source_group_member",
            "source_id",
            "group_principal",
            "member_principal",
            unique=True,
        ),
        # The index above treats NULL sources as distinct: local memberships are unique by this one.
        Index(
            "uq_group_memberships_local_group_member",
            "group_principal",
            "member_principal",
            unique=True,
            sqlite_where=text("source_id IS NULL"),
            postgresql_where=text("source_id IS NULL"),
        ),
        Index("ix_group_memberships_member", "member_principal"),
        CheckConstraint(
            "length(group_principal) > 0 AND length(member_principal) > 0",
            name="principals_not_empty",
        ),
    )

    id: Mapped[str] = id_column()
    # None: a local membership (`ki groups add`), which no source's sync replaces.
    source_id: Mapped[str | None] = mapped_column(ForeignKey("sources.id", ondelete="CASCADE"))
    group_principal: Mapped[str] = mapped_column(String(300))
    member_principal: Mapped[str] = mapped_column(String(300))
    created_at: Mapped[datetime] = created_at_column()


class AccessGeneration(Base):
    """A single-row counter bumped by every change that can alter visibility.

    Scope caches key on it, so a revocation is visible in the very next search.
    """

    __tablename__ = "access_generation"
    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, default=1)
    generation: Mapped[int] = mapped_column(BigInteger, default=0)


class DocumentAccessSummary(Base):
    """Principal-independent access facts per document, kept current by database triggers.

    Written only by the triggers of migration 0002 (on observations, source
    objects, sources, versions and documents), never by application code.
    Scope compilation reads it to skip per-document work in projects the
    caller may see as a whole: counting 100,000 rows of this narrow index
    takes about 14 ms on PostgreSQL, evaluating the predicate for each of
    those documents about 100 ms. Every document has a row from its insert on.
    """

    __tablename__ = "document_access_summary"
    __table_args__ = (
        Index(
            "ix_document_access_summary_project_flags",
            "project_id",
            "local_delegation",
            "has_active_observation",
        ),
        # Migration 0011: the summary in document order, for merging it with E's document allows.
        Index("ix_document_access_summary_document_project", "document_id", "project_id", "local_delegation"),
    )

    document_id: Mapped[str] = mapped_column(
        ForeignKey("documents.id", ondelete="CASCADE"), primary_key=True
    )
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    # Some version has an active local_fs observation without a known ACL and no
    # active observation with one: a local allow alone makes it accessible.
    local_delegation: Mapped[bool] = mapped_column(Boolean, default=False)
    # Some version has an active observation (what an admin needs).
    has_active_observation: Mapped[bool] = mapped_column(Boolean, default=False)
