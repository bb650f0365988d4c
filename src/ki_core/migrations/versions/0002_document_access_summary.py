"""Document access summary: principal-independent access facts kept current by triggers.

Scope compilation must not evaluate the visibility predicate for every one of
100,000 documents (about 100 ms on PostgreSQL, 2 cores) when a caller sees
whole projects. These two flags per document, maintained by the database
itself on every write path (ORM, COPY, cascades), let it count instead.

Revision ID: 0002_access
Revises: 0001
Create Date: 2026-12-01 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_access"
down_revision = "0001"
branch_labels = None
depends_on = None

# Recomputes both flags, and the project, of the documents that {documents} selects.
# The delegation rule is the one of ki_core.acl.version_predicate; the property
# tests compare this table with a plain-Python reference after every world.
REFRESH = """
INSERT INTO document_access_summary
    (document_id, project_id, local_delegation, has_active_observation)
SELECT d.id, d.project_id,
    EXISTS (
        SELECT 1 FROM document_versions v
        JOIN source_observations o ON o.version_id = v.id
        JOIN source_objects so ON so.id = o.source_object_id
        JOIN sources s ON s.id = so.source_id
        WHERE v.document_id = d.id AND o.state = 'active'
          AND so.acl_known = false AND s.kind = 'local_fs'
          AND NOT EXISTS (
              SELECT 1 FROM source_observations o2
              JOIN source_objects so2 ON so2.id = o2.source_object_id
              WHERE o2.version_id = v.id AND o2.state = 'active' AND so2.acl_known = true
          )
    ),
    EXISTS (
        SELECT 1 FROM document_versions v
        JOIN source_observations o ON o.version_id = v.id
        WHERE v.document_id = d.id AND o.state = 'active'
    )
FROM documents d
WHERE d.id IN ({documents})
ON CONFLICT (document_id) DO UPDATE SET
    project_id = excluded.project_id,
    local_delegation = excluded.local_delegation,
    has_active_observation = excluded.has_active_observation
"""

# Every document has a row from its insert on, so a project's row count is its
# document count: scope compilation counts one narrow index instead of two.
# (name, table, event, documents whose flags may have changed); PostgreSQL form,
# statement-level with transition tables so a COPY of 100,000 rows refreshes once.
PG_TRIGGERS = [
    ("document_insert", "documents", "INSERT", "SELECT id FROM new_rows"),
    (
        "observation_insert", "source_observations", "INSERT",
        "SELECT v.document_id FROM new_rows n JOIN document_versions v ON v.id = n.version_id",
    ),
    (
        "observation_delete", "source_observations", "DELETE",
        "SELECT v.document_id FROM old_rows n JOIN document_versions v ON v.id = n.version_id",
    ),
    (
        # Only what changes visibility: a refreshed observed_at on every sync is not worth a refresh.
        "observation_update", "source_observations", "UPDATE",
        (
            "SELECT v.document_id FROM new_rows n JOIN old_rows p ON p.id = n.id"
            " JOIN document_versions v ON v.id IN (n.version_id, p.version_id)"
            " WHERE n.state <> p.state OR n.version_id <> p.version_id"
            " OR n.source_object_id <> p.source_object_id"
        ),
    ),
    (
        "object_update", "source_objects", "UPDATE",
        (
            "SELECT v.document_id FROM new_rows n JOIN old_rows p ON p.id = n.id"
            " JOIN source_observations o ON o.source_object_id = n.id"
            " JOIN document_versions v ON v.id = o.version_id"
            " WHERE n.acl_known <> p.acl_known OR n.source_id <> p.source_id"
        ),
    ),
    (
        "source_update", "sources", "UPDATE",
        (
            "SELECT v.document_id FROM new_rows n JOIN old_rows p ON p.id = n.id"
            " JOIN source_objects so ON so.source_id = n.id"
            " JOIN source_observations o ON o.source_object_id = so.id"
            " JOIN document_versions v ON v.id = o.version_id WHERE n.kind <> p.kind"
        ),
    ),
    ("version_delete", "document_versions", "DELETE", "SELECT document_id FROM old_rows"),
    (
        "version_update", "document_versions", "UPDATE",
        (
            "SELECT d.id FROM new_rows n JOIN old_rows p ON p.id = n.id"
            " JOIN documents d ON d.id IN (n.document_id, p.document_id)"
            " WHERE n.document_id <> p.document_id"
        ),
    ),
    (
        "document_update", "documents", "UPDATE",
        "SELECT n.id FROM new_rows n JOIN old_rows p ON p.id = n.id WHERE n.project_id <> p.project_id",
    ),
]

# SQLite has row-level triggers only: (name, event clause, documents).
SQLITE_TRIGGERS = [
    ("document_insert", "AFTER INSERT ON documents", "SELECT NEW.id"),
    (
        "observation_insert", "AFTER INSERT ON source_observations",
        "SELECT document_id FROM document_versions WHERE id = NEW.version_id",
    ),
    (
        "observation_delete", "AFTER DELETE ON source_observations",
        "SELECT document_id FROM document_versions WHERE id = OLD.version_id",
    ),
    (
        "observation_update", "AFTER UPDATE OF state, version_id, source_object_id ON source_observations",
        "SELECT document_id FROM document_versions WHERE id IN (OLD.version_id, NEW.version_id)",
    ),
    (
        "object_update",
        (
            "AFTER UPDATE OF acl_known, source_id ON source_objects"
            " WHEN OLD.acl_known IS NOT NEW.acl_known OR OLD.source_id IS NOT NEW.source_id"
        ),
        (
            "SELECT v.document_id FROM source_observations o"
            " JOIN document_versions v ON v.id = o.version_id WHERE o.source_object_id = NEW.id"
        ),
    ),
    (
        "source_update", "AFTER UPDATE OF kind ON sources WHEN OLD.kind IS NOT NEW.kind",
        (
            "SELECT v.document_id FROM source_objects so"
            " JOIN source_observations o ON o.source_object_id = so.id"
            " JOIN document_versions v ON v.id = o.version_id WHERE so.source_id = NEW.id"
        ),
    ),
    ("version_delete", "AFTER DELETE ON document_versions", "SELECT OLD.document_id"),
    (
        "version_update",
        "AFTER UPDATE OF document_id ON document_versions WHEN OLD.document_id IS NOT NEW.document_id",
        "SELECT OLD.document_id UNION SELECT NEW.document_id",
    ),
    (
        "document_update",
        "AFTER UPDATE OF project_id ON documents WHEN OLD.project_id IS NOT NEW.project_id",
        "SELECT NEW.id",
    ),
]


def _pg_function(name: str, documents: str) -> str:
    # Lock the documents first, in a statement of its own: the refresh then runs
    # with a fresh snapshot that includes what a concurrent writer just committed.
    return f"""
CREATE FUNCTION ki_access_summary_{name}() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    PERFORM 1 FROM documents WHERE id IN ({documents}) ORDER BY id FOR NO KEY UPDATE;
    {REFRESH.format(documents=documents)};
    RETURN NULL;
END
$body$"""


def _pg_trigger(name: str, table: str, event: str) -> str:
    referencing = {
        "INSERT": "NEW TABLE AS new_rows",
        "DELETE": "OLD TABLE AS old_rows",
        "UPDATE": "OLD TABLE AS old_rows NEW TABLE AS new_rows",
    }[event]
    return (
        f"CREATE TRIGGER ki_access_summary_{name} AFTER {event} ON {table}"
        f" REFERENCING {referencing} FOR EACH STATEMENT"
        f" EXECUTE FUNCTION ki_access_summary_{name}()"
    )


def _create_triggers(dialect: str) -> None:
    if dialect == "postgresql":
        for name, table, event, documents in PG_TRIGGERS:
            op.execute(_pg_function(name, documents))
            op.execute(_pg_trigger(name, table, event))
        return
    for name, clause, documents in SQLITE_TRIGGERS:
        op.execute(
            f"CREATE TRIGGER ki_access_summary_{name} {clause}"
            f" BEGIN {REFRESH.format(documents=documents)}; END"
        )


def _drop_triggers(dialect: str) -> None:
    if dialect == "postgresql":
        for name, table, _event, _documents in PG_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS ki_access_summary_{name} ON {table}")
            op.execute(f"DROP FUNCTION IF EXISTS ki_access_summary_{name}()")
        return
    for name, _clause, _documents in SQLITE_TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS ki_access_summary_{name}")


def upgrade() -> None:
    op.create_table(
        "document_access_summary",
        sa.Column("document_id", sa.String(length=32), nullable=False),
        sa.Column("project_id", sa.String(length=32), nullable=False),
        sa.Column("local_delegation", sa.Boolean(), nullable=False),
        sa.Column("has_active_observation", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["document_id"], ["documents.id"],
            name=op.f("fk_document_access_summary_document_id_documents"), ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"],
            name=op.f("fk_document_access_summary_project_id_projects"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("document_id", name=op.f("pk_document_access_summary")),
    )
    with op.batch_alter_table("document_access_summary", schema=None) as batch_op:
        batch_op.create_index(
            "ix_document_access_summary_project_flags",
            ["project_id", "local_delegation", "has_active_observation"],
            unique=False,
        )
    dialect = op.get_bind().dialect.name
    _create_triggers(dialect)
    op.execute(REFRESH.format(documents="SELECT id FROM documents"))


def downgrade() -> None:
    _drop_triggers(op.get_bind().dialect.name)
    with op.batch_alter_table("document_access_summary", schema=None) as batch_op:
        batch_op.drop_index("ix_document_access_summary_project_flags")
    op.drop_table("document_access_summary")
