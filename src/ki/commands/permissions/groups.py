"""`ki groups`: local group memberships beside the ones mirrored from the DMS.

A local membership counts like a mirrored one in group expansion
(spec/access.md, Principals 3), so a member gets what the group is granted.
No source's membership sync replaces it, and `ki groups remove` removes only
local ones. Memberships are expanded at query time: a change shows in the
very next search and needs no index write (the projection names grantees).
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from ki.commands.permissions.access import configured_store
from ki.errors import cli_errors

groups_app = typer.Typer(
    help="Local group memberships (the DMS's own memberships are mirrored by its events).",
    no_args_is_help=True,
)

GROUP = typer.Argument(..., help="Group, as grants name it (case and spaces do not matter).")
MEMBERS = typer.Argument(..., help="Users or groups to add or remove.")


@groups_app.command("add")
@cli_errors
def add(group: str = GROUP, members: list[str] = MEMBERS) -> None:
    """Make each MEMBER a local member of GROUP."""
    from ki.commands.reading.trail import record_memberships
    from ki_core import grants

    with configured_store() as (settings, session):
        added = grants.add_local_members(session, group, members, settings=settings)
        record_memberships(settings, grants.MembershipDiff(group=grants.stored_principal(group, settings),
                                                           added=tuple(added)))
    stored = grants.stored_principal(group, settings)
    if added:
        Console().print(f"added to [bold]{stored}[/] (local): {', '.join(added)}", highlight=False)
    else:
        Console().print(f"already local members of {stored}; nothing changed", highlight=False)


@groups_app.command("remove")
@cli_errors
def remove(group: str = GROUP, members: list[str] = MEMBERS) -> None:
    """Remove local memberships of MEMBERs in GROUP; memberships mirrored from a source stay."""
    from ki.commands.reading.trail import record_memberships
    from ki_core import grants

    with configured_store() as (settings, session):
        removed = grants.remove_local_members(session, group, members, settings=settings)
        record_memberships(settings, *(grants.MembershipDiff(group=g, removed=tuple(r.member for r in removed
                                                                                     if r.group == g))
                                       for g in sorted({r.group for r in removed})))
        left = grants.list_memberships(session, group, settings=settings)
    console = Console()
    gone = {r.member for r in removed}
    if gone:
        console.print(f"removed from [bold]{grants.stored_principal(group, settings)}[/] (local): "
                      f"{', '.join(sorted(gone))}", highlight=False)
    wanted = {n for m in members for n in grants.names_of(m, settings)}
    for record in (r for r in left if r.member in wanted):
        console.print(f"{record.member} stays in {record.group}: mirrored from {record.origin}, change it there",
                      highlight=False)
    if not gone:
        console.print("no local membership matched; nothing changed", highlight=False)


@groups_app.command("list")
@cli_errors
def list_(group: str | None = typer.Argument(None, help="Only this group.")) -> None:
    """List memberships, local and mirrored, and where each comes from."""
    from ki_core import grants

    with configured_store() as (settings, session):
        rows = grants.list_memberships(session, group, settings=settings)
    table = Table(title=f"{len(rows)} membership(s)")
    for column in ("group", "member", "from"):
        table.add_column(column)
    for row in rows:
        table.add_row(row.group, row.member, row.origin)
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(groups_app, name="groups")
