"""`ki projects` and `ki matters`: what the store holds, by project and matter.

A document counts as in search while some version of it is observed at its
source (document_access_summary, kept by triggers); one removed from its
folder or by `ki delete` stays in SQL and is counted as removed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from ki.errors import cli_errors

if TYPE_CHECKING:
    from sqlalchemy import Select


@cli_errors
def projects() -> None:
    """The projects with their documents (in search, removed) and matters."""
    from sqlalchemy import func, select

    from ki_core.models import Document, Matter, Project

    matters = select(func.count(Matter.id)).where(Matter.project_id == Project.id).scalar_subquery()
    rows = _with_document_counts(
        select(Project.name, Project.title, matters, Project.created_at), Project.id, Document.project_id,
    ).order_by(Project.name)
    table = _table("projects", "project", "title", "matters", "created", "documents", "removed")
    for name, title, matter_count, created, in_search, removed in _read(rows):
        table.add_row(name, title if title != name else "", str(matter_count), f"{created:%Y-%m-%d}",
                      str(in_search), str(removed))
    Console().print(table if table.row_count else "no projects yet: `ki ingest FOLDER --project NAME` makes one")


@cli_errors
def matters(project: str | None = typer.Option(None, "--project", help="Only this project's matters (name or id).")) -> None:
    """The matters with their project and documents (in search, removed)."""
    from sqlalchemy import select

    from ki_core.models import Document, Matter, Project

    rows = _with_document_counts(
        select(Matter.name, Project.name, Matter.title).join(Project, Project.id == Matter.project_id),
        Matter.id, Document.matter_id,
    ).order_by(Project.name, Matter.name)
    if project is not None:
        rows = rows.where(Project.id == _project_id(project))
    table = _table("matters", "matter", "project", "title", "documents", "removed")
    for name, project_name, title, in_search, removed in _read(rows):
        table.add_row(name, project_name, title if title != name else "", str(in_search), str(removed))
    Console().print(table if table.row_count else "no matters" + (f" in project {project!r}" if project else ""))


def _with_document_counts(query: Select, group_key, document_column) -> Select:
    """QUERY with two more columns: documents in search and removed ones, counted per GROUP_KEY."""
    from sqlalchemy import case, func, select

    from ki_core.models import Document, DocumentAccessSummary

    summary = DocumentAccessSummary
    in_search = func.coalesce(func.sum(case((summary.has_active_observation, 1), else_=0)), 0)
    counts = (
        select(document_column.label("key"), in_search.label("in_search"),
               (func.count(summary.document_id) - in_search).label("removed"))
        .select_from(Document).join(summary, summary.document_id == Document.id)
        .group_by(document_column).subquery()
    )
    return (query.add_columns(func.coalesce(counts.c.in_search, 0), func.coalesce(counts.c.removed, 0))
            .outerjoin(counts, counts.c.key == group_key))


def _project_id(name: str) -> str:
    from ki_core.grants import resolve_project

    with _sessions()() as session:
        return resolve_project(session, name).id


def _read(query: Select) -> list[tuple]:
    with _sessions()() as session:
        return list(session.execute(query).all())


def _sessions():
    from ki_workers.context import worker_context

    return worker_context().sessions


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title)
    for column in columns:
        numeric = column in ("documents", "removed", "matters")
        table.add_column(column, justify="right" if numeric else "left", overflow="fold")
    return table


def register(app: typer.Typer) -> None:
    app.command("projects")(projects)
    app.command("matters")(matters)
