"""store_identity: one id per store, which its search index carries too.

Every database upgraded here gets a new random id: two databases are two
stores, however alike. `ki store migrate` copies a store's id along with its
rows, since the copy is the same store in another database.

Revision ID: 0009_store_identity
Revises: 0008_unbounded_body_chunks
Create Date: 2026-12-19 09:00:00
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0009_store_identity"
down_revision = "0008_unbounded_body_chunks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "store_identity",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("store_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_store_identity_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_store_identity")),
    )
    op.bulk_insert(table, [{"id": 1, "store_id": uuid.uuid4().hex, "created_at": datetime.now(UTC)}])


def downgrade() -> None:
    op.drop_table("store_identity")
