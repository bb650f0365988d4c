"""ingest_events.transient: a failed event whose error was transient is redriven by the sweep.

Rows that failed before this column existed are marked transient when their
error names one of the errors the event tasks retry (the database, broker,
search backend, gateway, content server or a not-yet-known object went away),
so an event lost that way, such as an ACL revocation during a database
restart, is applied by the next sweep.

Revision ID: 0007_transient_event_failures
Revises: 0006_decision_text_search
Create Date: 2026-12-17 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_transient_event_failures"
down_revision = "0006_decision_text_search"
branch_labels = None
depends_on = None

# The exception names the event tasks retried when this migration was written (ki_workers.tasks).
_TRANSIENT_NAMES = (
    "OperationalError", "InterfaceError", "ConnectionError", "SearchBackendError", "GatewayUnavailable",
    "ConnectError", "ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout", "ReadError", "WriteError",
    "RemoteProtocolError", "IndexLockedError", "IntegrityError", "ContentUnavailable", "ObjectNotYetKnown",
)


def upgrade() -> None:
    with op.batch_alter_table("ingest_events") as batch:
        batch.add_column(sa.Column("transient", sa.Boolean(), server_default=sa.false(), nullable=False))
    named = " OR ".join(f"error LIKE '{name}:%'" for name in _TRANSIENT_NAMES)
    op.execute(f"UPDATE ingest_events SET transient = true WHERE status = 'failed' AND ({named})")


def downgrade() -> None:
    with op.batch_alter_table("ingest_events") as batch:
        batch.drop_column("transient")
