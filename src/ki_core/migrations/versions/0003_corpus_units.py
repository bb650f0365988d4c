"""Corpus units: the chunks of a statute/contract/guideline corpus at their addresses.

Revision ID: 0003_corpus_units
Revises: 0002_access
Create Date: 2026-12-01 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_corpus_units"
down_revision = "0002_access"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "corpus_units",
        sa.Column("corpus_id", sa.String(length=200), nullable=False),
        sa.Column("chunk_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("record_id", sa.String(length=400), nullable=False),
        sa.Column("container_id", sa.String(length=300), nullable=False),
        sa.Column("section_id", sa.String(length=100), nullable=False),
        sa.Column("subsection", sa.String(length=50), nullable=True),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("piece", sa.Integer(), nullable=False),
        sa.Column("chunk_index_in_section", sa.Integer(), nullable=False),
        sa.Column("heading", sa.Text(), nullable=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("text_hash", sa.String(length=64), nullable=False),
        sa.Column("repealed", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["corpus_id"], ["corpora.id"], name=op.f("fk_corpus_units_corpus_id_corpora"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("corpus_id", "chunk_id", name=op.f("pk_corpus_units")),
    )
    with op.batch_alter_table("corpus_units", schema=None) as batch_op:
        batch_op.create_index("ix_corpus_units_address", ["corpus_id", "container_id", "section_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("corpus_units", schema=None) as batch_op:
        batch_op.drop_index("ix_corpus_units_address")
    op.drop_table("corpus_units")
