"""The access-summary triggers lock the changed documents starting from the change (PostgreSQL).

Each trigger first locks the documents its firing touches, in id order, then
refreshes their summary rows (0002, 0012). The lock was one statement,
`SELECT 1 FROM documents WHERE id IN (<changed documents>) ORDER BY id FOR NO
KEY UPDATE`, and to spare the sort PostgreSQL walked the documents index in
id order and ran the changed-documents join (over the firing's transition
tables) once per document as the inner side of a semi join: quadratic in the
rows of one statement. Turning 8,000 objects' ACLs known in one UPDATE took
26 s, 25.7 of them in the lock (auto_explain), while the refresh after it took
0.18 s; at 100,000 objects the same UPDATE ran for more than six minutes before
it was stopped.

Now the changed documents are collected once (a MATERIALIZED CTE, planned for
the firing's transition tables by EXECUTE as in 0012) and the lock joins
documents to them by primary key: a one-row change still locks one row by
index, and a bulk one costs a hash join and a sort. The order of the locks,
what is locked and the refresh are unchanged. SQLite's row triggers take no
lock and stay as 0002 wrote them.

Revision ID: 0014_summary_lock_from_change
Revises: 0013_grant_target_indexes
Create Date: 2026-12-23 09:00:00
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0014_summary_lock_from_change"
down_revision = "0013_grant_target_indexes"
branch_labels = None
depends_on = None


def _migration(file_name: str, module_name: str) -> ModuleType:
    """An earlier migration module (versions/ is no package)."""
    path = Path(__file__).with_name(file_name)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHANGED = "WITH changed(document_id) AS MATERIALIZED ({documents}) "
FROM_CHANGED = "FROM (SELECT DISTINCT document_id FROM changed) c JOIN documents d ON d.id = c.document_id"
# 0012's refresh reads `FROM documents d WHERE d.id IN (<changed documents>)`.
REFRESH_TARGET = "FROM documents d\nWHERE d.id IN ({documents})"


def lock_statement(documents: str) -> str:
    """Row locks on the documents `documents` selects, taken in id order, reached from the change."""
    return CHANGED.format(documents=documents) + f"SELECT 1 {FROM_CHANGED} ORDER BY d.id FOR NO KEY UPDATE OF d"


def refresh_statement(plans: ModuleType, documents: str) -> str:
    """0012's refresh of the summary rows, over the same documents reached the same way."""
    assert REFRESH_TARGET in plans.REFRESH, "0012's refresh no longer reads its documents as 0014 expects"
    refresh = plans.REFRESH.replace(REFRESH_TARGET, FROM_CHANGED)
    return CHANGED.format(documents=documents) + refresh.strip()


def _trigger_function(plans: ModuleType, name: str, documents: str) -> str:
    """0012's function, lock and refresh both starting from the change; the refresh still runs after
    the lock, with a fresh snapshot."""
    return f"""
CREATE OR REPLACE FUNCTION ki_access_summary_{name}() RETURNS trigger LANGUAGE plpgsql
    {plans.TRIGGER_SETTINGS} AS $body$
BEGIN
    EXECUTE $statement${lock_statement(documents)}$statement$;
    EXECUTE $statement${refresh_statement(plans, documents)}$statement$;
    RETURN NULL;
END
$body$"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    access_summary = _migration("0002_document_access_summary.py", "ki_migration_0002_access")
    plans = _migration("0012_summary_trigger_plans.py", "ki_migration_0012_plans")
    for name, _table, _event, documents in access_summary.PG_TRIGGERS:
        op.execute(_trigger_function(plans, name, documents))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _migration("0012_summary_trigger_plans.py", "ki_migration_0012_plans").upgrade()
