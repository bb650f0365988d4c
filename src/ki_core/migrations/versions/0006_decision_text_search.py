"""Full-text search over decision records, so a decision query is ranked and limited in SQL.

PostgreSQL: a stored `text_vector` (the `german` configuration over locus,
change summary and rationale) with a GIN index. SQLite: an FTS5 table
`decision_fts` (unicode61 tokenizer, diacritics folded) kept in step by
triggers, keyed through `decision_fts_rows` so a VACUUM (which may renumber an
ordinary table's rowids) cannot detach a record from its text.

The DDL is spelled out here rather than shared with the query code: a migration
is history and must not change when the query code does.

Revision ID: 0006_decision_text_search
Revises: 0005_events_finished_index
Create Date: 2026-12-16 09:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0006_decision_text_search"
down_revision = "0005_events_finished_index"
branch_labels = None
depends_on = None

_PG_VECTOR = (
    "to_tsvector('german'::regconfig, coalesce(locus, '') || ' ' || coalesce(change_summary, '') "
    "|| ' ' || coalesce(rationale, ''))"
)
_SQLITE_BODY = "coalesce(new.locus, '') || ' ' || coalesce(new.change_summary, '') || ' ' || coalesce(new.rationale, '')"
_SQLITE_ROW = "(SELECT rowid FROM decision_fts_rows WHERE decision_id = {side}.id)"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE decision_records ADD COLUMN text_vector tsvector GENERATED ALWAYS AS ({_PG_VECTOR}) STORED")
        op.execute("CREATE INDEX ix_decision_records_text_vector ON decision_records USING gin (text_vector)")
        return
    op.execute("CREATE TABLE decision_fts_rows (rowid INTEGER PRIMARY KEY, decision_id VARCHAR(32) NOT NULL UNIQUE)")
    op.execute("CREATE VIRTUAL TABLE decision_fts USING fts5(body, tokenize = 'unicode61 remove_diacritics 2')")
    insert = (
        "INSERT INTO decision_fts_rows (decision_id) VALUES (new.id); "
        f"INSERT INTO decision_fts (rowid, body) VALUES ({_SQLITE_ROW.format(side='new')}, {_SQLITE_BODY});"
    )
    delete = (
        f"DELETE FROM decision_fts WHERE rowid = {_SQLITE_ROW.format(side='old')}; "
        "DELETE FROM decision_fts_rows WHERE decision_id = old.id;"
    )
    op.execute(f"CREATE TRIGGER decision_fts_insert AFTER INSERT ON decision_records BEGIN {insert} END")
    op.execute(f"CREATE TRIGGER decision_fts_delete AFTER DELETE ON decision_records BEGIN {delete} END")
    op.execute(
        "CREATE TRIGGER decision_fts_update AFTER UPDATE OF id, locus, change_summary, rationale ON decision_records "
        f"BEGIN {delete} {insert} END"
    )
    op.execute(
        "INSERT INTO decision_fts_rows (decision_id) SELECT id FROM decision_records ORDER BY id"
    )
    op.execute(
        "INSERT INTO decision_fts (rowid, body) SELECT r.rowid, coalesce(d.locus, '') || ' ' || "
        "coalesce(d.change_summary, '') || ' ' || coalesce(d.rationale, '') "
        "FROM decision_records d JOIN decision_fts_rows r ON r.decision_id = d.id"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX ix_decision_records_text_vector")
        op.execute("ALTER TABLE decision_records DROP COLUMN text_vector")
        return
    for trigger in ("decision_fts_insert", "decision_fts_delete", "decision_fts_update"):
        op.execute(f"DROP TRIGGER {trigger}")
    op.execute("DROP TABLE decision_fts")
    op.execute("DROP TABLE decision_fts_rows")
