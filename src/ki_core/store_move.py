"""Move a store to another database (`ki store migrate --to URL`): every row, the store id included.

The usual move is embedded (SQLite) to PostgreSQL. The target is migrated to
the same revision and must hold nothing but what migrations and `ki init`
seed; the copy runs in one target transaction, table by table in foreign-key
order, and is compared row count by row count before it commits, so a failed
move leaves the target as it was. The copy keeps the store id: the search
index still belongs to it, and `ki reindex` moves the index to another backend
reusing the vectors stored in SQL (nothing is embedded again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import Connection, Table, bindparam, func, select, update

from ki_core.db import make_engine
from ki_core.migrate import current_revision, upgrade_to_head
from ki_core.models import Base

# Rows a fresh database already holds (migrations, `ki init`): replaced by the source's.
SEEDED_TABLES = frozenset({"access_generation", "store_identity", "ontology_nodes", "ontology_closure"})
# Written by database triggers as the other rows arrive (migration 0002), never copied.
TRIGGER_MAINTAINED = frozenset({"document_access_summary"})
ROWS_PER_INSERT = 500


class StoreMoveError(RuntimeError):
    """The target cannot take the store (not empty, another revision) or the copy did not add up."""


@dataclass
class MoveReport:
    revision: str | None
    rows: dict[str, int] = field(default_factory=dict)


def move_store(source_url: str, target_url: str, on_table: Callable[[str, int], None] | None = None) -> MoveReport:
    """Copy every row of SOURCE_URL's store into TARGET_URL; returns rows per table."""
    if source_url == target_url:
        raise StoreMoveError("the target is the configured database itself")
    revision = current_revision(source_url)
    upgrade_to_head(target_url)
    if current_revision(target_url) != revision:
        raise StoreMoveError(
            f"the source database is at revision {revision}, the target at {current_revision(target_url)}: "
            "run `ki init` on the source first"
        )
    source, target = make_engine(source_url), make_engine(target_url)
    report = MoveReport(revision)
    try:
        with source.connect() as reading, target.begin() as writing:
            _refuse_a_used_target(writing)
            for table in reversed(Base.metadata.sorted_tables):
                writing.execute(table.delete())
            order = [t for t in Base.metadata.sorted_tables if t.name not in TRIGGER_MAINTAINED]
            later: list[tuple[Table, list[str], list[dict]]] = []
            for position, table in enumerate(order):
                forward = _forward_references(table, order[position:])
                report.rows[table.name], pending = _copy_table(reading, writing, table, forward)
                later.append((table, forward, pending))
                if on_table:
                    on_table(table.name, report.rows[table.name])
            for table, forward, pending in later:
                _fill_forward_references(writing, table, forward, pending)
            _check_counts(reading, writing)
    finally:
        source.dispose()
        target.dispose()
    return report


def _refuse_a_used_target(connection: Connection) -> None:
    for table in Base.metadata.sorted_tables:
        if table.name in SEEDED_TABLES:
            continue
        rows = connection.scalar(select(func.count()).select_from(table))
        if rows:
            raise StoreMoveError(f"the target database is not empty: table {table.name} holds {rows} rows")


def _forward_references(table: Table, rest: list[Table]) -> list[str]:
    """Columns pointing at a table copied later (documents.latest_final_version_id -> document_versions):
    written empty first and filled in once every table is copied."""
    later = {t.name for t in rest[1:]}
    return [fk.parent.name for fk in table.foreign_keys if fk.column.table.name in later]


def _copy_table(reading: Connection, writing: Connection, table: Table, forward: list[str]) -> tuple[int, list[dict]]:
    """Rows copied, and the forward references to fill in later ({primary key..., column: value})."""
    copied, pending = 0, []
    keys = [column.name for column in table.primary_key.columns]
    result = reading.execution_options(yield_per=ROWS_PER_INSERT).execute(select(table))
    for rows in result.partitions():
        values = [dict(row._mapping) for row in rows]
        for row in values:
            if any(row[name] is not None for name in forward):
                pending.append({**{key: row[key] for key in keys}, **{name: row[name] for name in forward}})
                row.update(dict.fromkeys(forward))
        writing.execute(table.insert(), values)
        copied += len(rows)
    return copied, pending


def _fill_forward_references(writing: Connection, table: Table, forward: list[str], pending: list[dict]) -> None:
    if not pending:
        return
    keys = [column.name for column in table.primary_key.columns]
    statement = (
        update(table)
        .where(*(table.c[key] == bindparam(f"k_{key}") for key in keys))
        .values({name: bindparam(f"v_{name}") for name in forward})
    )
    writing.execute(statement, [
        {**{f"k_{key}": row[key] for key in keys}, **{f"v_{name}": row[name] for name in forward}} for row in pending
    ])  # fmt: skip


def _check_counts(reading: Connection, writing: Connection) -> None:
    """Every table, the trigger-maintained ones too, holds as many rows as the source's."""
    for table in Base.metadata.sorted_tables:
        source_rows = reading.scalar(select(func.count()).select_from(table))
        target_rows = writing.scalar(select(func.count()).select_from(table))
        if source_rows != target_rows:
            raise StoreMoveError(
                f"table {table.name}: {source_rows} rows in the source, {target_rows} in the target; nothing was committed"
            )
