"""Write many rows of one table in the caller's transaction: COPY on PostgreSQL, executemany on SQLite.

The one bulk row writer (STYLE.md): the pipeline's chunk rows and the benches'
corpora go through it. Rows are plain dicts keyed by column name, completed
with the columns' client-side defaults and run through the columns' own bind
processors, so a row stores exactly what an ORM or Core INSERT of it would
(enum values, JSON, timestamps, bytes). PostgreSQL statement-level triggers
(the access summary) fire once per call, as they would for one INSERT.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Column, Connection, Table, insert
from sqlalchemy.orm import Session


def write_rows(target: Session | Connection, table: Any, rows: Sequence[Mapping[str, Any]]) -> int:
    """Insert ROWS into TABLE (a Table or a mapped class); returns how many were written.

    A row may leave out a column: its client-side default fills it (ids,
    created_at), else NULL. The caller commits; nothing is written when it rolls back.
    """
    if not rows:
        return 0
    table = getattr(table, "__table__", table)
    connection = _connection_of(target)
    columns = _written_columns(table, rows)
    defaults = {c.key: _client_default(c) for c in columns}
    completed = [_completed(row, defaults) for row in rows]
    if connection.dialect.name == "postgresql":
        _copy_rows(connection, table, columns, completed)
    else:
        connection.execute(insert(table), completed)
    return len(completed)


def _connection_of(target: Session | Connection) -> Connection:
    """The connection of the caller's transaction; a session flushes first, so rows may
    refer to objects it has pending (a new document's chunks)."""
    if isinstance(target, Session):
        target.flush()
        return target.connection()
    return target


def _written_columns(table: Table, rows: Sequence[Mapping[str, Any]]) -> list[Column]:
    """The columns any row names, plus those with a client-side default; the rest keep their server default."""
    named = {key for row in rows for key in row}
    unknown = named - set(table.columns.keys())
    if unknown:
        raise KeyError(f"{table.name} has no column {', '.join(sorted(unknown))}")
    return [c for c in table.columns if c.key in named or _client_default(c) is not None]


def _client_default(column: Column) -> Callable[[], Any] | None:
    default = column.default
    if default is None or not (default.is_scalar or default.is_callable):
        return None
    if default.is_scalar:
        return lambda: default.arg
    # SQLAlchemy wraps a zero-argument default to take the execution context; none is needed here.
    return lambda: default.arg(None)


def _completed(row: Mapping[str, Any], defaults: dict[str, Callable[[], Any] | None]) -> dict[str, Any]:
    """Every written column, in one key order for all rows (executemany compiles one statement)."""
    values = {}
    for key, default in defaults.items():
        if key in row:
            values[key] = row[key]
        else:
            values[key] = default() if default is not None else None
    return values


def _copy_rows(connection: Connection, table: Table, columns: list[Column], rows: list[dict[str, Any]]) -> None:
    """COPY FROM STDIN on the connection's own psycopg connection, so it is part of its transaction.

    psycopg adapts each value as it would a query parameter; the columns' bind
    processors first turn enums, JSON and the like into what a parameter of an
    INSERT would carry.
    """
    dialect = connection.dialect
    preparer = dialect.identifier_preparer
    processors = [c.type.dialect_impl(dialect).bind_processor(dialect) for c in columns]
    statement = (
        f"COPY {preparer.format_table(table)} ({', '.join(preparer.format_column(c) for c in columns)}) FROM STDIN"
    )
    driver = connection.connection.driver_connection
    with driver.cursor() as cursor, cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row([row[c.key] if process is None else process(row[c.key])
                            for c, process in zip(columns, processors, strict=True)])
