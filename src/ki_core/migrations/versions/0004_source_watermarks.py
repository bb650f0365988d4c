"""Source watermarks: the newest event applied per (source, subject), so late events cannot undo newer ones.

Revision ID: 0004_source_watermarks
Revises: 0003_corpus_units
Create Date: 2026-12-02 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_source_watermarks"
down_revision = "0003_corpus_units"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "source_watermarks",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("source_id", sa.String(length=32), nullable=False),
        sa.Column("subject", sa.String(length=1100), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event_id", sa.String(length=300), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["source_id"], ["sources.id"], name=op.f("fk_source_watermarks_source_id_sources"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_source_watermarks")),
        sa.UniqueConstraint("source_id", "subject", name=op.f("uq_source_watermarks_source_id_subject")),
    )


def downgrade() -> None:
    op.drop_table("source_watermarks")
