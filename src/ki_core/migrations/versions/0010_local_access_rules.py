"""Local access rules beside mirrored ones: object grants and group memberships made by an operator.

A grant's origin joins its unique key, so an operator's deny on a DMS object
and the same entry of the object's mirrored ACL are two rows: an `acl.changed`
replaces only the mirrored one. A group membership without a source is a
local one (`ki groups add`); a source's membership sync never touches it, and
a partial unique index keeps it unique (NULL sources are distinct in the
per-source index).

Revision ID: 0010_local_access_rules
Revises: 0009_store_identity
Create Date: 2026-12-19 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_local_access_rules"
down_revision = "0009_store_identity"
branch_labels = None
depends_on = None

_LOCAL_MEMBERSHIP = sa.text("source_id IS NULL")


def upgrade() -> None:
    op.drop_index("uq_grants_target_principal_effect", table_name="grants")
    _grant_key_index("uq_grants_target_principal_effect_origin", "origin")
    with op.batch_alter_table("group_memberships") as batch:
        batch.alter_column("source_id", existing_type=sa.String(length=32), nullable=True)
    op.create_index(
        "uq_group_memberships_local_group_member", "group_memberships", ["group_principal", "member_principal"],
        unique=True, sqlite_where=_LOCAL_MEMBERSHIP, postgresql_where=_LOCAL_MEMBERSHIP,
    )


def downgrade() -> None:
    """Back to one grant per key. Local object allows go (the old rule would read them as the
    object's ACL and open a DMS object); of rows sharing a key one stays (they have one effect)."""
    op.drop_index("uq_group_memberships_local_group_member", table_name="group_memberships")
    op.execute("DELETE FROM group_memberships WHERE source_id IS NULL")
    with op.batch_alter_table("group_memberships") as batch:
        batch.alter_column("source_id", existing_type=sa.String(length=32), nullable=False)
    op.execute("DELETE FROM grants WHERE scope = 'source_object' AND origin = 'local' AND effect = 'allow'")
    op.execute(
        "DELETE FROM grants WHERE id IN (SELECT g.id FROM grants g JOIN grants h"
        f" ON h.scope = g.scope AND {_target('h')} = {_target('g')}"
        " AND h.principal = g.principal AND h.effect = g.effect AND h.id < g.id)"
    )
    op.drop_index("uq_grants_target_principal_effect_origin", table_name="grants")
    _grant_key_index("uq_grants_target_principal_effect")


def _target(table: str = "") -> str:
    prefix = f"{table}." if table else ""
    return f"coalesce({prefix}project_id, {prefix}document_id, {prefix}source_object_id)"


def _grant_key_index(name: str, *extra: str) -> None:
    op.create_index(name, "grants", ["scope", sa.text(_target()), "principal", "effect", *extra], unique=True)
