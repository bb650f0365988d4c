"""The audit trail records group memberships a DMS sync added or removed (ki_core.audit).

Three nullable columns on `audit_records`: the group, the member and the DMS
event that carried the change. Reads leave them empty. On SQLite the trail's
own file gets the same columns when ki_core.audit opens it.

Revision ID: 0019_audit_group_sync
Revises: 0018_principals_group_prefix
Create Date: 2026-12-08 01:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_audit_group_sync"
down_revision = "0018_principals_group_prefix"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_records") as batch:
        batch.add_column(sa.Column("group_principal", sa.String(length=512), nullable=True))
        batch.add_column(sa.Column("member_principal", sa.String(length=512), nullable=True))
        batch.add_column(sa.Column("event_id", sa.String(length=300), nullable=True))
    op.create_index(op.f("ix_audit_records_group_principal"), "audit_records", ["group_principal"])
    op.create_index(op.f("ix_audit_records_member_principal"), "audit_records", ["member_principal"])


def downgrade() -> None:
    op.drop_index(op.f("ix_audit_records_member_principal"), table_name="audit_records")
    op.drop_index(op.f("ix_audit_records_group_principal"), table_name="audit_records")
    with op.batch_alter_table("audit_records") as batch:
        batch.drop_column("event_id")
        batch.drop_column("member_principal")
        batch.drop_column("group_principal")
