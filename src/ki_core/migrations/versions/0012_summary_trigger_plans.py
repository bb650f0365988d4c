"""Access-summary triggers whose cost follows the change, never the table (PostgreSQL).

PL/pgSQL plans each statement of a trigger function once per session and keeps
the plan, so what the planner believed at the first firing decides every later
one. Measured at 17,000 documents on 2 cores, with 0002's functions:

- planned on tables not analyzed yet (a first sync, one transaction) the
  refresh seq-scans or hashes all of source_observations, so each one-row
  INSERT costs more as the table grows: 280 rows/s over the first 1,000, and
  a test fixture's 17,000 observations ran over 25 minutes;
- planned for a COPY of 15,000 observations, each later one-row INSERT
  recomputes the flags of every document as a hashed subplan: 9 rows/s.

ACL sync does both on pooled connections. Now each statement runs by EXECUTE,
planned for the transition table of its own firing, and each step of the
refresh is a subquery over one table reached by an indexed equality with the
row above it, fenced by OFFSET 0 so PostgreSQL neither hashes it over the whole
table nor starts from another table. Measured the same way: 17,000 one-row
INSERTs from empty 1,056 rows/s throughout, after a COPY of 15,000 1,043 rows/s,
the COPY itself 0.73 s (0.78 s before). Keeping the cached plans and pinning
their shape with planner settings instead (nested loops, no seq or bitmap
scans) ran at about 2,000 rows/s but now and then left a transition table on
the inner side of a nested loop: one COPY ran for minutes. SQLite's row
triggers plan each statement from the indexes and did 7,000-8,000 one-row
INSERTs/s before; they stay as 0002 wrote them.

Revision ID: 0012_summary_trigger_plans
Revises: 0011_scope_covering_indexes
Create Date: 2026-12-21 09:00:00
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0012_summary_trigger_plans"
down_revision = "0011_scope_covering_indexes"
branch_labels = None
depends_on = None

# 0002's refresh, each step a subquery over one table reached by an indexed equality with the
# row above it, and fenced by OFFSET 0 so PostgreSQL neither hashes it over the whole table nor
# joins it in another order: a plan made while the tables were empty (no statistics, so every
# order looked free) otherwise started from all active observations and stayed that way.
REFRESH = """
INSERT INTO document_access_summary
    (document_id, project_id, local_delegation, has_active_observation)
SELECT d.id, d.project_id,
    EXISTS (
        SELECT 1 FROM document_versions v
        WHERE v.document_id = d.id
          AND EXISTS (
              SELECT 1 FROM source_observations o
              WHERE o.version_id = v.id AND o.state = 'active'
                AND EXISTS (
                    SELECT 1 FROM source_objects so
                    WHERE so.id = o.source_object_id AND so.acl_known = false
                      AND EXISTS (SELECT 1 FROM sources s WHERE s.id = so.source_id AND s.kind = 'local_fs' OFFSET 0)
                    OFFSET 0
                )
              OFFSET 0
          )
          AND NOT EXISTS (
              SELECT 1 FROM source_observations o2
              WHERE o2.version_id = v.id AND o2.state = 'active'
                AND EXISTS (
                    SELECT 1 FROM source_objects so2 WHERE so2.id = o2.source_object_id AND so2.acl_known = true
                    OFFSET 0
                )
              OFFSET 0
          )
        OFFSET 0
    ),
    EXISTS (
        SELECT 1 FROM document_versions v
        WHERE v.document_id = d.id
          AND EXISTS (SELECT 1 FROM source_observations o WHERE o.version_id = v.id AND o.state = 'active' OFFSET 0)
        OFFSET 0
    )
FROM documents d
WHERE d.id IN ({documents})
ON CONFLICT (document_id) DO UPDATE SET
    project_id = excluded.project_id,
    local_delegation = excluded.local_delegation,
    has_active_observation = excluded.has_active_observation
"""

# A plan kept from a large firing is costed above jit_above_cost, and JIT then compiled it again
# on every later firing: 15 ms a row after a COPY of 5,000, 300 ms after 15,000.
TRIGGER_SETTINGS = "SET jit = off"


def _access_summary_migration() -> ModuleType:
    """Migration 0002: its triggers and the document set each one refreshes (versions/ is no package)."""
    path = Path(__file__).with_name("0002_document_access_summary.py")
    spec = importlib.util.spec_from_file_location("ki_migration_0002_access", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _trigger_function(name: str, documents: str) -> str:
    """The lock first, in a statement of its own, as in 0002: the refresh then runs with a fresh
    snapshot that includes what a concurrent writer just committed. Both by EXECUTE: planned for
    this firing's transition table, never for the first one of the session."""
    lock = f"SELECT 1 FROM documents WHERE id IN ({documents}) ORDER BY id FOR NO KEY UPDATE"
    return f"""
CREATE OR REPLACE FUNCTION ki_access_summary_{name}() RETURNS trigger LANGUAGE plpgsql
    {TRIGGER_SETTINGS} AS $body$
BEGIN
    EXECUTE $statement${lock}$statement$;
    EXECUTE $statement${REFRESH.format(documents=documents)}$statement$;
    RETURN NULL;
END
$body$"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, _table, _event, documents in _access_summary_migration().PG_TRIGGERS:
        op.execute(_trigger_function(name, documents))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    access_summary = _access_summary_migration()
    access_summary._drop_triggers("postgresql")
    access_summary._create_triggers("postgresql")
