"""Body chunks are no longer capped at 1,000 per version: clause rows move to ordinals 10^9 and up.

Clause rows started at ordinal 1000, so a version with more than 1,000 body
chunks (any text over about 1 MB) violated `ck_chunks_ordinal_matches_kind`
and could not be stored at all, after its whole embedding had been paid for.
Existing clause rows keep their ids; the next embedding of their version gives
them the ids of their new ordinals (and removes the old ones from the index),
as any re-embedding does.

Revision ID: 0008_unbounded_body_chunks
Revises: 0007_transient_event_failures
Create Date: 2026-12-18 09:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0008_unbounded_body_chunks"
down_revision = "0007_transient_event_failures"
branch_labels = None
depends_on = None

OLD_FIRST_CLAUSE, NEW_FIRST_CLAUSE = 1000, 1_000_000_000
CONSTRAINT = "ordinal_matches_kind"


def _rule(first_clause: int) -> str:
    return (f"(kind = 'profile' AND ordinal = -1) OR (kind = 'clause' AND ordinal >= {first_clause})"
            f" OR (kind = 'chunk' AND ordinal >= 0 AND ordinal < {first_clause})")


def _renumber_and_check(old: int, new: int) -> None:
    with op.batch_alter_table("chunks") as batch:
        batch.drop_constraint(op.f(f"ck_chunks_{CONSTRAINT}"), type_="check")
    op.execute(f"UPDATE chunks SET ordinal = ordinal - {old} + {new} WHERE kind = 'clause'")
    with op.batch_alter_table("chunks") as batch:
        batch.create_check_constraint(CONSTRAINT, _rule(new))


def upgrade() -> None:
    _renumber_and_check(OLD_FIRST_CLAUSE, NEW_FIRST_CLAUSE)


def downgrade() -> None:
    op.execute(f"DELETE FROM chunks WHERE kind = 'chunk' AND ordinal >= {OLD_FIRST_CLAUSE}")
    _renumber_and_check(NEW_FIRST_CLAUSE, OLD_FIRST_CLAUSE)
