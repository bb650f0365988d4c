"""Covering indexes for compiling a scope from E's grants without visiting table rows.

ki_query.scope reads E's grants of one kind from (principal, scope, effect,
document_id): a seek per principal, then consecutive entries (SQLite looked
each row of the principal index up in the table: 60 ms for 10,000 document
allows, 23 ms this way). A caller who sees most documents through document
grants is compiled by merging, in document order, the access summary's
(document_id, project_id, local_delegation) with (document_id, scope,
effect, principal): neither engine sorts. Leading with document_id, not
scope, is what lets PostgreSQL use that order at all (with the varchar scope
cast to text in the condition it sorted 90,000 grants instead).

Revision ID: 0011_scope_covering_indexes
Revises: 0010_local_access_rules
Create Date: 2026-12-20 09:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0011_scope_covering_indexes"
down_revision = "0010_local_access_rules"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_grants_principal_scope_effect_document", "grants", ["principal", "scope", "effect", "document_id"]
    )
    op.create_index(
        "ix_grants_document_scope_effect_principal", "grants", ["document_id", "scope", "effect", "principal"]
    )
    op.create_index(
        "ix_document_access_summary_document_project",
        "document_access_summary",
        ["document_id", "project_id", "local_delegation"],
    )


def downgrade() -> None:
    op.drop_index("ix_document_access_summary_document_project", table_name="document_access_summary")
    op.drop_index("ix_grants_document_scope_effect_principal", table_name="grants")
    op.drop_index("ix_grants_principal_scope_effect_document", table_name="grants")
