"""The audit trail (ki_core.models.audit): who searched for what and read which document.

On SQLite the trail is kept in a database file of its own (ki_core.audit creates
the same table there), so this table stays empty in the store's SQLite file.

Revision ID: 0017_audit_records
Revises: 0016_reading_page_starts
Create Date: 2026-12-07 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_audit_records"
down_revision = "0016_reading_page_starts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_records",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("subject", sa.String(length=512), nullable=False),
        sa.Column("principals", sa.Text(), nullable=False),
        sa.Column("surface", sa.String(length=16), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("query", sa.Text(), nullable=True),
        sa.Column("hit_count", sa.Integer(), nullable=True),
        sa.Column("document_id", sa.String(length=64), nullable=True),
        sa.Column("document_ids", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_records")),
    )
    op.create_index(op.f("ix_audit_records_at"), "audit_records", ["at"])
    op.create_index(op.f("ix_audit_records_subject"), "audit_records", ["subject"])
    op.create_index(op.f("ix_audit_records_document_id"), "audit_records", ["document_id"])


def downgrade() -> None:
    op.drop_table("audit_records")
