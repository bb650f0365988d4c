"""Stored principals lose the optional `group:` prefix (ki_core.principals, the group prefix rule).

`group:partner` and `partner` are now one principal: normalization drops the
prefix, and the access predicate compares stored names by plain equality. So
every grant and membership stored with the prefix (the demo's grants, DMS
groups, `ki groups add group:x`) is rewritten without it, whichever origin. A
row that would then duplicate one already stored without the prefix is
dropped instead: the two said the same thing. The access generation is bumped
so that no scope cached before the rewrite is served.

Downgrade keeps the names as they are: which of them carried the prefix is
not recorded, and the prefixed and bare spellings mean the same.

Revision ID: 0018_principals_group_prefix
Revises: 0017_audit_records
Create Date: 2026-12-07 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_principals_group_prefix"
down_revision = "0017_audit_records"
branch_labels = None
depends_on = None

PREFIX = "group:"

_memberships = sa.table(
    "group_memberships", sa.column("id"), sa.column("source_id"), sa.column("group_principal"),
    sa.column("member_principal"),
)
_grants = sa.table(
    "grants", sa.column("id"), sa.column("scope"), sa.column("project_id"), sa.column("document_id"),
    sa.column("source_object_id"), sa.column("principal"), sa.column("effect"), sa.column("origin"),
)
_generation = sa.table("access_generation", sa.column("id"), sa.column("generation"))


def upgrade() -> None:
    connection = op.get_bind()
    changed = _rewrite_memberships(connection) + _rewrite_grants(connection)
    if changed:
        connection.execute(sa.update(_generation).values(generation=_generation.c.generation + 1))


def downgrade() -> None:
    """Nothing to undo: see the module docstring."""


def _bare(name: str) -> str:
    return name[len(PREFIX):].strip() if name.startswith(PREFIX) else name


def _rewrite_memberships(connection: sa.Connection) -> int:
    rows = connection.execute(sa.select(_memberships).order_by(_memberships.c.id)).all()
    kept = {(r.source_id, r.group_principal, r.member_principal) for r in rows}
    changed = 0
    for row in rows:
        old = (row.source_id, row.group_principal, row.member_principal)
        new = (row.source_id, _bare(row.group_principal), _bare(row.member_principal))
        if new != old:
            changed += 1
            _replace(connection, _memberships, row.id, kept, old, new,
                     {"group_principal": new[1], "member_principal": new[2]})
    return changed


def _rewrite_grants(connection: sa.Connection) -> int:
    rows = connection.execute(sa.select(_grants).where(_grants.c.principal.startswith(PREFIX))).all()
    everything = connection.execute(sa.select(_grants)).all()
    kept = {_grant_key(r, r.principal) for r in everything}
    for row in sorted(rows, key=lambda r: r.id):
        old, new = _grant_key(row, row.principal), _grant_key(row, _bare(row.principal))
        _replace(connection, _grants, row.id, kept, old, new, {"principal": new[2]})
    return len(rows)


def _grant_key(row: sa.Row, principal: str) -> tuple:
    """The grant's unique key (uq_grants_target_principal_effect_origin) under PRINCIPAL."""
    return row.scope, row.project_id or row.document_id or row.source_object_id, principal, row.effect, row.origin


def _replace(connection: sa.Connection, table: sa.TableClause, row_id: str, kept: set, old: tuple, new: tuple,
             values: dict[str, str]) -> None:
    """Rename the row to NEW, or delete it where NEW is stored already (or a name became empty)."""
    kept.discard(old)
    if new in kept or not all(values.values()):
        connection.execute(sa.delete(table).where(table.c.id == row_id))
        return
    kept.add(new)
    connection.execute(sa.update(table).where(table.c.id == row_id).values(**values))
