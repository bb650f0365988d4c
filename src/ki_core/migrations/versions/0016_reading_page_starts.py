"""reading_page_starts: where each page of a PDF version's text starts.

The converter joined a PDF's pages with blank lines and forgot where one page
ended; the text view serves a document page by page (issue 38), so ingest now
records the start offsets. Versions converted before keep NULL (their text is
served with its headings as sections) until `ki store pages` converts their
unchanged files again and records the offsets where the text comes out the same.

Revision ID: 0016_reading_page_starts
Revises: 0015_types_declared_doc_type
Create Date: 2026-12-07 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016_reading_page_starts"
down_revision = "0015_types_declared_doc_type"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("document_versions", sa.Column("page_starts", sa.JSON(), nullable=True))


def downgrade() -> None:
    # Not a batch (table copy): SQLite (3.35+) drops a column in place, and the copy would lose
    # the access-summary triggers on the table.
    op.drop_column("document_versions", "page_starts")
