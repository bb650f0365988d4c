"""Durable chunk metadata of the embedded backend (SQLite), and its commit point.

One transaction per commit writes the changed rows and the state (generation, slot count,
vector file): that transaction is what makes a commit of the vector side happen, so a
crash leaves either the old or the new state, never half. Rows carry the generation
that last changed them, so a reader catches up by reading only those.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any

from ki_core.search.chunk_table import RowColumns
from ki_core.search.types import AccessProjection, IndexChunk

SCHEMA_VERSION = 1
# name -> SQL type; new fields are appended here and added to existing files at open.
COLUMNS: dict[str, str] = {
    "chunk_id": "INTEGER PRIMARY KEY",
    "slot": "INTEGER NOT NULL",
    "stamp": "INTEGER NOT NULL",
    "changed": "INTEGER NOT NULL",
    "alive": "INTEGER NOT NULL",
    "project_id": "TEXT NOT NULL DEFAULT ''",
    "document_id": "TEXT NOT NULL DEFAULT ''",
    "document_version_id": "TEXT NOT NULL DEFAULT ''",
    "matter_id": "TEXT",
    "doc_type": "TEXT",
    "doc_type_ancestors": "TEXT NOT NULL DEFAULT '[]'",
    "version_status": "TEXT NOT NULL DEFAULT 'unknown'",
    "language": "TEXT",
    "doc_date": "TEXT",
    "chunk_kind": "TEXT NOT NULL DEFAULT 'chunk'",
    "clause_type": "TEXT",
    "identifiers": "TEXT NOT NULL DEFAULT '[]'",
    "allowed_principals": "TEXT NOT NULL DEFAULT '[]'",
    "denied_principals": "TEXT NOT NULL DEFAULT '[]'",
    "access_version": "INTEGER NOT NULL DEFAULT 0",
    "meta": "TEXT NOT NULL DEFAULT '{}'",
}
# What the in-memory table is loaded from (not the access projection nor meta).
TABLE_COLUMNS = (
    "chunk_id", "slot", "stamp", "alive", "project_id", "document_id", "document_version_id", "matter_id",
    "doc_type", "version_status", "language", "chunk_kind", "clause_type", "doc_date", "doc_type_ancestors",
    "identifiers",
)  # fmt: skip
_WRITTEN = [name for name in COLUMNS if name != "chunk_id"]
_UPSERT = (
    f"INSERT INTO chunks (chunk_id, {', '.join(_WRITTEN)}) VALUES ({', '.join('?' * (len(_WRITTEN) + 1))}) "
    f"ON CONFLICT(chunk_id) DO UPDATE SET {', '.join(f'{name} = excluded.{name}' for name in _WRITTEN)}"
)
_JSON_FIELDS = ("doc_type_ancestors", "identifiers", "allowed_principals", "denied_principals")


@dataclass(frozen=True, slots=True)
class StoreState:
    generation: int
    epoch: int
    slots: int
    dimensions: int
    vectors_file: str
    schema_version: int


@dataclass(frozen=True, slots=True)
class Commit:
    """What one commit changes: written chunks (chunk, slot), killed ids, access updates."""

    generation: int
    slots: int
    written: Sequence[tuple[IndexChunk, int]] = ()
    killed: Sequence[int] = ()
    access: Sequence[tuple[int, AccessProjection]] = ()


def _connect(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    return connection


def _written_values(chunk: IndexChunk, slot: int, generation: int) -> tuple[Any, ...]:
    values = {
        "slot": slot,
        "stamp": generation,
        "changed": generation,
        "alive": 1,
        "doc_date": chunk.doc_date.isoformat() if chunk.doc_date else None,
        "meta": json.dumps(chunk.meta, ensure_ascii=False, sort_keys=True, default=str),
    }
    for name in _WRITTEN:
        if name not in values:
            value = getattr(chunk, name)
            values[name] = json_list(value) if name in _JSON_FIELDS else value
    return (chunk.chunk_id, *(values[name] for name in _WRITTEN))


class ChunkStore:
    def __init__(self, path: Path, *, writable: bool):
        self.path = path
        self.db = _connect(path)
        if writable:
            self._create_or_extend()

    def close(self) -> None:
        self.db.close()

    def _create_or_extend(self) -> None:
        """Create the tables, or add columns a newer version declares (additive, like put_mapping)."""
        self.db.execute("CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        columns = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items())
        self.db.execute(f"CREATE TABLE IF NOT EXISTS chunks ({columns})")
        present = {row[1] for row in self.db.execute("PRAGMA table_info(chunks)")}
        for name, kind in COLUMNS.items():
            if name not in present:
                self.db.execute(f"ALTER TABLE chunks ADD COLUMN {name} {kind}")
        self.db.execute("CREATE INDEX IF NOT EXISTS chunks_changed ON chunks (changed)")

    # ------------------------------------------------------------------ state

    def state(self) -> StoreState | None:
        values = dict(self.db.execute("SELECT key, value FROM state"))
        if not values:
            return None
        return StoreState(
            generation=int(values["generation"]),
            epoch=int(values["epoch"]),
            slots=int(values["slots"]),
            dimensions=int(values["dimensions"]),
            vectors_file=values["vectors_file"],
            schema_version=int(values["schema_version"]),
        )

    def initialize(self, dimensions: int) -> None:
        with self._transaction():
            self._put_state(
                generation=0, epoch=0, slots=0, dimensions=dimensions, vectors_file="vectors-0.f32",
                schema_version=SCHEMA_VERSION,
            )  # fmt: skip

    def _put_state(self, **values: Any) -> None:
        self.db.executemany(
            "INSERT INTO state (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            [(key, str(value)) for key, value in values.items()],
        )

    def _transaction(self) -> _Transaction:
        return _Transaction(self.db)

    # ------------------------------------------------------------------ reads

    def snapshot(self, changed_after: int, *, only_alive: bool = False) -> tuple[StoreState, RowColumns]:
        """The state and, column by column, the rows changed after a generation, read in one
        transaction (consistent with each other)."""
        sql = f"SELECT {', '.join(TABLE_COLUMNS)} FROM chunks WHERE changed > ?"
        if only_alive:
            sql += " AND alive = 1"
        self.db.execute("BEGIN")
        try:
            state = self.state()
            records = self.db.execute(sql, (changed_after,)).fetchall()
        finally:
            self.db.execute("COMMIT")
        assert state is not None, "the index store has no state row"
        columns = list(zip(*records, strict=True)) if records else [()] * len(TABLE_COLUMNS)
        return state, {name: list(values) for name, values in zip(TABLE_COLUMNS, columns, strict=True)}

    def alive_stamps(self) -> dict[int, int]:
        return dict(self.db.execute("SELECT chunk_id, stamp FROM chunks WHERE alive = 1"))

    def stored_fields(self, chunk_id: int) -> dict[str, Any] | None:
        names = [name for name in COLUMNS if name not in ("slot", "stamp", "changed", "alive")]
        record = self.db.execute(
            f"SELECT {', '.join(names)} FROM chunks WHERE chunk_id = ? AND alive = 1", (chunk_id,)
        ).fetchone()
        if record is None:
            return None
        fields = dict(zip(names, record, strict=True))
        for name in _JSON_FIELDS:
            fields[name] = tuple(json.loads(fields[name]))
        fields["meta"] = json.loads(fields["meta"])
        fields["doc_date"] = date.fromisoformat(fields["doc_date"]) if fields["doc_date"] else None
        return fields

    # ----------------------------------------------------------------- writes

    def commit(self, change: Commit) -> None:
        with self._transaction():
            self.db.executemany(
                _UPSERT, [_written_values(chunk, slot, change.generation) for chunk, slot in change.written]
            )
            self.db.executemany(
                "UPDATE chunks SET alive = 0, changed = ? WHERE chunk_id = ? AND alive = 1",
                [(change.generation, chunk_id) for chunk_id in change.killed],
            )
            # Access fields are not held in memory, so they do not bump `changed` (no reader reloads them).
            self.db.executemany(
                "UPDATE chunks SET allowed_principals = ?, denied_principals = ?, access_version = ? "
                "WHERE chunk_id = ? AND alive = 1",
                [_access_values(chunk_id, projection) for chunk_id, projection in change.access],
            )
            self._put_state(generation=change.generation, slots=change.slots)

    def renumber(self, slots: Iterable[tuple[int, int]], *, generation: int, epoch: int, vectors_file: str) -> None:
        """Compaction: live chunks get dense slots in a new vector file; dead rows go."""
        slot_list = list(slots)
        with self._transaction():
            self.db.execute("DELETE FROM chunks WHERE alive = 0")
            self.db.executemany("UPDATE chunks SET slot = ? WHERE chunk_id = ?", [(s, c) for c, s in slot_list])
            self._put_state(
                generation=generation, epoch=epoch, slots=len(slot_list), vectors_file=vectors_file
            )


@lru_cache(maxsize=8192)
def json_list(values: tuple[str, ...]) -> str:
    """Stored form of a multi-valued field; cached because a document's chunks repeat the same tuples."""
    return json.dumps(list(values), ensure_ascii=False)


def _access_values(chunk_id: int, projection: AccessProjection) -> tuple[Any, ...]:
    return (
        json_list(projection.allowed_principals),
        json_list(projection.denied_principals),
        projection.access_version,
        chunk_id,
    )


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
