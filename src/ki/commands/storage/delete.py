"""`ki delete document|project`: out of search at once, history kept in SQL, who and when recorded.

An operator's delete is applied as the DMS's own `document.deleted` event for
every source object that shows the document (ki_workers.sources.dms): the
object is retired (its observations become history, the versions stay), the
access reindex takes the chunks out of the index, and the object's content
watermark records the event, `ki delete by <operator>` at the time of the
delete, so an older upsert from the DMS cannot bring it back. A file still in
its folder comes back with the next `ki ingest` of the folder, as it would
after any removal: the folder is the source.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from ki.errors import cli_errors

if TYPE_CHECKING:
    from sqlalchemy import Select
    from sqlalchemy.orm import Session

    from ki_core.models import Document
    from ki_workers.context import WorkerContext

delete_app = typer.Typer(help="Remove a document or a whole project from search; SQL keeps its history.",
                         no_args_is_help=True)

EVENT_PREFIX = "ki delete by "
BY = typer.Option(None, "--by", help="Operator recorded as having deleted it (default: the OS user).")
YES = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation.")


@dataclass(frozen=True)
class ShownAt:
    """A source object that shows a document being removed."""

    source_id: str
    source_name: str
    root: str | None
    external_id: str


@dataclass(frozen=True)
class Removal:
    """What a delete takes out of search: the objects showing the documents, and all they show."""

    label: str
    # The ids of the documents asked for, whether or not they are still in search.
    asked: list[str]
    objects: list[ShownAt]
    # The keys of the documents leaving search.
    documents: list[str]
    # Shown by the same objects, but not part of what was asked for (a mail, when its attachment was named).
    others: list[str]


@delete_app.command("document")
@cli_errors
def document(
    reference: str = typer.Argument(..., help="Document key (or id) within the project."),
    project: str = typer.Option(..., "--project", help="Project name (or id)."),
    by: str | None = BY,
    yes: bool = YES,
) -> None:
    """Remove one document (a mail with its attachments) from search; its versions stay in SQL."""
    from sqlalchemy import select

    from ki_core.acl import in_set
    from ki_core.grants import resolve_document, resolve_project
    from ki_core.models import Document

    def plan(session: Session) -> Removal:
        target = resolve_document(session, reference, resolve_project(session, project))
        ids = [target.id, *carried_attachments(session, target)]
        return plan_removal(session, f"{project}/{target.key}", select(Document.id).where(in_set(Document.id, ids)))

    run_removal(plan, by, yes)


@delete_app.command("project")
@cli_errors
def project(
    name: str = typer.Argument(..., help="Project name (or id)."),
    by: str | None = BY,
    yes: bool = YES,
) -> None:
    """Remove every document of a project from search; the project, its documents and versions stay in SQL."""
    from sqlalchemy import select

    from ki_core.grants import resolve_project
    from ki_core.models import Document

    def plan(session: Session) -> Removal:
        found = resolve_project(session, name)
        return plan_removal(session, f"project {found.name}", select(Document.id).where(Document.project_id == found.id))

    run_removal(plan, by, yes)


def run_removal(plan: Callable[[Session], Removal], by: str | None, yes: bool) -> None:
    """Plan in one read, confirm, then apply it object by object and hand the versions to the access reindex."""
    from ki_core.models.base import utcnow
    from ki_workers.context import worker_context

    operator = (by or getpass.getuser()).strip()
    if not operator:
        raise typer.BadParameter("name the operator", param_hint="--by")
    ctx = worker_context()
    with ctx.sessions() as session:
        removal = plan(session)
        recorded = None if removal.objects else last_removal(session, removal.asked)
    console = Console()
    if not removal.objects:
        console.print(f"{removal.label} is already deleted: {recorded or 'it is in no source object'}", highlight=False)
        return
    _refuse_others(removal)
    if not yes:
        _describe(console, removal)
        typer.confirm("Remove it from search?", abort=True)
    now = utcnow()
    retired, superseded = apply_removal(ctx, removal, operator, now)
    console.print(f"removed {removal.label} from search: {len(removal.documents)} document(s), {retired} version(s) "
                  f"at {len(removal.objects) - len(superseded)} source object(s); SQL keeps them. "
                  f"Recorded: {EVENT_PREFIX}{operator}, {_moment(now)}.", highlight=False)
    _warn(console, removal, superseded)


def plan_removal(session: Session, label: str, document_ids: Select) -> Removal:
    """The active objects that show the documents DOCUMENT_IDS selects, and every document those objects show."""
    from sqlalchemy import select

    from ki_core.acl import in_set
    from ki_core.models import Document, DocumentVersion, ObservationState, Source, SourceObject, SourceObservation

    showing = (
        select(SourceObservation.source_object_id)
        .join(DocumentVersion, DocumentVersion.id == SourceObservation.version_id)
        .where(SourceObservation.state == ObservationState.ACTIVE, DocumentVersion.document_id.in_(document_ids))
    )
    objects = session.execute(
        select(SourceObject.id, Source.id, Source.name, Source.config, SourceObject.external_id)
        .join(Source, Source.id == SourceObject.source_id)
        .where(SourceObject.id.in_(showing))
        .order_by(Source.name, SourceObject.external_id)
    ).all()
    asked = list(session.scalars(document_ids))
    shown = session.execute(
        select(Document.id, Document.key).distinct()
        .join(DocumentVersion, DocumentVersion.document_id == Document.id)
        .join(SourceObservation, SourceObservation.version_id == DocumentVersion.id)
        .where(SourceObservation.state == ObservationState.ACTIVE,
               in_set(SourceObservation.source_object_id, [row[0] for row in objects]))
        .order_by(Document.key)
    ).all()
    wanted = set(asked)
    return Removal(
        label, asked,
        [ShownAt(source_id, name, config.get("root"), external) for _, source_id, name, config, external in objects],
        [key for document_id, key in shown if document_id in wanted],
        [key for document_id, key in shown if document_id not in wanted],
    )


def carried_attachments(session: Session, mail: Document) -> list[str]:
    """The documents of the attachments any version of MAIL carried: they are seen where the mail is."""
    from ki_workers.stages.attachments import known_attachments

    return sorted({found.document_id for version in mail.versions for found in known_attachments(session, version)})


def apply_removal(ctx: WorkerContext, removal: Removal, operator: str, at: datetime) -> tuple[int, list[ShownAt]]:
    """(versions retired, objects a newer DMS event was already applied to and so were left)."""
    from ki_core.models import Source
    from ki_workers import tasks
    from ki_workers.sources.dms import apply_event, batched
    from ki_workers.sources.dms_events import DocumentDeleted

    event_id = f"{EVENT_PREFIX}{operator}"[:300]
    retired: set[str] = set()
    superseded = []
    for shown in removal.objects:
        event = DocumentDeleted(type="document.deleted", event_id=event_id, occurred_at=at, object_id=shown.external_id)
        followups = apply_event(ctx, Source(id=shown.source_id, name=shown.source_name), event)
        retired.update(followups.access)
        if followups.note:
            superseded.append(shown)
    for version_ids in batched(retired):
        tasks.reindex_access.delay(version_ids)
    return len(retired), superseded


def last_removal(session: Session, document_ids: list[str]) -> str | None:
    """When the documents' newest observation ended, and the delete recorded for its object, if any."""
    from sqlalchemy import select

    from ki_core.acl import in_set
    from ki_core.models import DocumentVersion, ObservationState, SourceObject, SourceObservation, SourceWatermark

    row = session.execute(
        select(SourceObservation.deleted_at, SourceWatermark.event_id)
        .join(DocumentVersion, DocumentVersion.id == SourceObservation.version_id)
        .join(SourceObject, SourceObject.id == SourceObservation.source_object_id)
        .outerjoin(SourceWatermark, (SourceWatermark.source_id == SourceObject.source_id)
                   & (SourceWatermark.subject == "content:" + SourceObject.external_id))
        .where(in_set(DocumentVersion.document_id, document_ids), SourceObservation.state == ObservationState.DELETED)
        .order_by(SourceObservation.deleted_at.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    deleted_at, event_id = row
    how = event_id if event_id and event_id.startswith(EVENT_PREFIX) else "gone from its source"
    return f"removed from search {_moment(deleted_at)} ({how})"


def _moment(moment: datetime | None) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC" if moment else "at an unknown time"


def _refuse_others(removal: Removal) -> None:
    if removal.others:
        Console(stderr=True).print(
            f"[bold red]error:[/] {removal.label} is seen through the same source object as "
            f"{', '.join(removal.others)} (an attachment is seen where its mail is): delete the mail, "
            "which takes its attachments with it", highlight=False)
        raise typer.Exit(1)


def _describe(console: Console, removal: Removal) -> None:
    console.print(f"{removal.label}: {len(removal.documents)} document(s) leave search, seen at "
                  f"{len(removal.objects)} source object(s):", highlight=False)
    for shown in removal.objects[:10]:
        console.print(f"  {shown.source_name}: {shown.external_id}", highlight=False, markup=False)
    if len(removal.objects) > 10:
        console.print(f"  ... and {len(removal.objects) - 10} more", highlight=False)
    console.print("Their versions, chunks and grants stay in SQL.", highlight=False)


def _warn(console: Console, removal: Removal, superseded: list[ShownAt]) -> None:
    from pathlib import Path

    for shown in superseded:
        console.print(f"[yellow]left[/] {shown.source_name}: {shown.external_id}: the DMS sent a newer event for it",
                      highlight=False)
    back = [Path(shown.root) / shown.external_id for shown in removal.objects
            if shown.root and (Path(shown.root) / shown.external_id).is_file()]
    if back:
        which = f"{back[0]} is" if len(back) == 1 else f"{len(back)} of these files (e.g. {back[0]}) are"
        console.print(f"[yellow]note:[/] {which} still in the folder: the next `ki ingest` of the folder brings "
                      "them back (move them away, or ingest with --exclude)", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(delete_app, name="delete")
