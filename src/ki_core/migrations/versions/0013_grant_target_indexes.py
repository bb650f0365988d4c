"""Grant lookups led by their target: (project_id | source_object_id, scope, effect, principal).

The visibility predicate asks, per candidate version, "is there a grant of this
scope and effect on this project / this observed object for one of E's
principals". For object grants SQLite had two one-equality choices and took
the unique index on (scope, target, ...) with only `scope` bound, so every
check read all object grants: with the 53,577 object ACL entries of a
mirrored DMS (three per object) re-verifying 25 chunks took 139 ms, and
1.8 ms with this index (peer-bench store, 2 cores). The project index makes
the project lookups covering as 0011 did for document grants. PostgreSQL
plans from statistics and found the target index before; it gains index-only
scans.

Partial (target IS NOT NULL, which `target = x` implies on both databases):
every other grant has a NULL there, and to ANALYZE statistics all those NULLs
are one value. On the peer-bench store (71,836 grants, none on an object)
SQLite's statistics on the plain object index read "71,836 rows per object",
so it scanned the grants table per candidate instead: 184 ms for 25 chunks.

Revision ID: 0013_grant_target_indexes
Revises: 0012_summary_trigger_plans
Create Date: 2026-12-22 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_grant_target_indexes"
down_revision = "0012_summary_trigger_plans"
branch_labels = None
depends_on = None

INDEXES = {
    "source_object_id": "ix_grants_object_scope_effect_principal",
    "project_id": "ix_grants_project_scope_effect_principal",
}


def upgrade() -> None:
    for target in ("source_object_id", "project_id"):
        only_this_target = sa.text(f"{target} IS NOT NULL")
        op.create_index(
            INDEXES[target], "grants", [target, "scope", "effect", "principal"],
            sqlite_where=only_this_target, postgresql_where=only_this_target,
        )


def downgrade() -> None:
    for name in INDEXES.values():
        op.drop_index(name, table_name="grants")
