"""documents.declared_doc_type: the document type a source declares, kept apart from the decided one.

A manifest may say what a file is ("decision", "letter"); the metadata stage
narrows that by the text (an Urteil) but never overrides it, and `ki reindex`
decides again from the declaration and the new rules, so the declaration must
outlive the decided type. A plain column without a foreign key: SQLite adds it
in place, leaving the access-summary triggers on `documents` untouched.

Revision ID: 0015_types_declared_doc_type
Revises: 0014_summary_lock_from_change
Create Date: 2026-12-24 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015_types_declared_doc_type"
down_revision = "0014_summary_lock_from_change"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("documents", sa.Column("declared_doc_type", sa.String(length=200), nullable=True))


def downgrade() -> None:
    op.drop_column("documents", "declared_doc_type")
