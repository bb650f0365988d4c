"""Index ingest_events by (status, finished_at): the retention prune reads the oldest `done` rows a batch at a time.

Revision ID: 0005_events_finished_index
Revises: 0004_source_watermarks
Create Date: 2026-12-09 09:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0005_events_finished_index"
down_revision = "0004_source_watermarks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_ingest_events_status_finished", "ingest_events", ["status", "finished_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_ingest_events_status_finished", table_name="ingest_events")
