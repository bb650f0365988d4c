"""`ki init`: create or upgrade the SQL schema and seed the ontology; `ki status`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from ki.errors import cli_errors

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from ki_core.config import Settings


def prepare_store(settings: Settings) -> tuple[str | None, str | None]:
    """Migrate to head and seed the ontology; returns (revision before, revision after)."""
    from ki_core.db import make_engine, session_factory
    from ki_core.migrate import current_revision, upgrade_to_head
    from ki_core.ontology import seed_ontology

    url = settings.database_url
    before = current_revision(url)
    upgrade_to_head(url)
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session, session.begin():
            seed_ontology(session)
    finally:
        engine.dispose()
    return before, current_revision(url)


@cli_errors
def init() -> None:
    """Create the database schema, or upgrade it to the newest revision, and seed the ontology. Safe to repeat."""
    from ki_core.config import load_settings, mask_url_password

    settings = load_settings()
    before, after = prepare_store(settings)
    where = mask_url_password(settings.database_url)
    console = Console(highlight=False)
    if before == after:
        console.print(f"database {where} is up to date (revision {after})")
    else:
        console.print(f"database {where}: {before or 'empty'} -> revision {after}")
    console.print(prepare_index(settings), markup=False)
    console.print("next: ki ingest FOLDER --project NAME, then ki search QUERY --as PRINCIPAL", markup=False)


def prepare_index(settings: Settings) -> str:
    """Create the search index (empty) and claim it for this database's store, so a new store answers
    searches with no hits rather than "no index yet", and an index of another store is named now."""
    from ki_core.db import make_engine, session_factory
    from ki_core.search.embedded import IndexLockedError
    from ki_core.search.index import open_index
    from ki_core.search.signature import bind_index_signature
    from ki_core.search.types import IndexSignatureMismatch
    from ki_core.store_identity import bind_index_to_store, index_location

    engine = make_engine(settings.database_url)
    index = open_index(settings)
    try:
        index.ensure()
        bind_index_to_store(index, settings, session_factory(engine), claim=True)
        bind_index_signature(index, settings, session_factory(engine), claim=True)
    except IndexLockedError:
        return f"{index_location(settings)} is open in a running writer (ki serve?); left as it is"
    except IndexSignatureMismatch as exc:
        return f"{index_location(settings)}: {exc}"
    finally:
        index.close()
        engine.dispose()
    return f"{index_location(settings)} is ready"


@cli_errors
def status(
    errors: int = typer.Option(10, min=0, help="How many of the latest errors to show."),
    failed: bool = typer.Option(False, "--failed", help="List every failed version: file, document, reason, time."),
) -> None:
    """Counts of versions per processing state, chunks, and the latest errors (--failed: every failed version)."""
    from ki_core.config import load_settings
    from ki_core.models import ProcessingState

    console = Console()
    if failed:
        _, _, rows = _store_counts(load_settings(), None)
        title = f"{len(rows)} failed version(s), newest first"
        console.print(_failed_table(rows, title) if rows else "no failed versions")
        return
    settings = load_settings()
    counts, chunks, rows = _store_counts(settings, errors)
    console.print(_state_table(counts))
    console.print(f"chunks in SQL: {chunks}")
    from ki_core.search.signature import signature_status

    for line in signature_status(settings):
        console.print(line, markup=False, highlight=False)
    if rows:
        console.print(_failed_table(rows, "latest errors"))
    if len(rows) < (failed_in_all := counts.get(ProcessingState.FAILED, 0)):
        console.print(f"{failed_in_all} version(s) failed in all: `ki status --failed` lists every one",
                      highlight=False)


@dataclass(frozen=True)
class FailedVersion:
    """A failed version as an operator looks for it: by the file it came from, not its id alone."""

    version_id: str
    document: str  # project/key
    files: tuple[tuple[str, str], ...]  # (source name, external id: the path in a folder, the DMS object id)
    reason: str
    failed_at: datetime | None


def _state_table(counts: dict) -> Table:
    from ki_core.models import ProcessingState

    table = Table(title="versions by processing state")
    table.add_column("state")
    table.add_column("versions", justify="right")
    for state in ProcessingState:
        table.add_row(state.value, str(counts.get(state, 0)))
    return table


def _failed_table(rows: list[FailedVersion], title: str) -> Table:
    """Ids in full and unwrapped: what `ki get`, `ki access explain` and the API take."""
    from rich.markup import escape

    table = Table(title=title, show_lines=True)
    table.add_column("file", overflow="fold")
    table.add_column("document", overflow="fold")
    table.add_column("version", no_wrap=True, min_width=32)
    table.add_column("reason", overflow="fold")
    table.add_column("failed at (UTC)", no_wrap=True)
    for row in rows:
        files = "\n".join(f"{escape(path)}\n[dim]{escape(source)}[/]" for source, path in row.files)
        table.add_row(files or "[dim](no source file)[/]", escape(row.document), row.version_id, escape(row.reason),
                      _utc(row.failed_at))
    return table


def _utc(moment: datetime | None) -> str:
    """SQLite hands back naive datetimes; every stored time is UTC."""
    if moment is None:
        return ""
    return moment.replace(tzinfo=moment.tzinfo or UTC).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _store_counts(settings: Settings, errors: int | None) -> tuple[dict, int | None, list[FailedVersion]]:
    """(versions per processing state, chunks, the latest `errors` failed versions; None: all of them)."""
    from sqlalchemy import func, select

    from ki_core.db import make_engine, session_factory
    from ki_core.models import Chunk, DocumentVersion

    engine = make_engine(settings.database_url)
    try:
        with session_factory(engine)() as session:
            state = DocumentVersion.processing_state
            counts = dict(session.execute(select(state, func.count()).group_by(state)).all())
            chunks = session.scalar(select(func.count()).select_from(Chunk))
            failed = _failed_versions(session, errors)
    finally:
        engine.dispose()
    return counts, chunks, failed


def _failed_versions(session: Session, limit: int | None) -> list[FailedVersion]:
    from sqlalchemy import select

    from ki_core.models import Document, DocumentVersion, ProcessingState, Project

    rows = session.execute(
        select(DocumentVersion.id, DocumentVersion.last_error, DocumentVersion.updated_at, Project.name, Document.key)
        .join(Document, Document.id == DocumentVersion.document_id)
        .join(Project, Project.id == Document.project_id)
        .where(DocumentVersion.processing_state == ProcessingState.FAILED)
        .order_by(DocumentVersion.updated_at.desc(), DocumentVersion.id)
        .limit(limit)
    ).all()
    files = _observed_files(session, [row.id for row in rows])
    return [
        FailedVersion(row.id, f"{row.name}/{row.key}", files.get(row.id, ()), row.last_error or "", row.updated_at)
        for row in rows
    ]


def _observed_files(session: Session, version_ids: list[str]) -> dict[str, tuple[tuple[str, str], ...]]:
    """{version id: (source name, external id) of every object it was seen as}, deleted ones too."""
    from sqlalchemy import select

    from ki_core.acl import in_set
    from ki_core.models import Source, SourceObject, SourceObservation

    found: dict[str, list[tuple[str, str]]] = {}
    stmt = (
        select(SourceObservation.version_id, Source.name, SourceObject.external_id)
        .join(SourceObject, SourceObject.id == SourceObservation.source_object_id)
        .join(Source, Source.id == SourceObject.source_id)
        .where(in_set(SourceObservation.version_id, version_ids))
        .order_by(Source.name, SourceObject.external_id)
    )
    for version_id, source, path in session.execute(stmt):
        found.setdefault(version_id, []).append((source, path))
    return {version_id: tuple(dict.fromkeys(pairs)) for version_id, pairs in found.items()}


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("status")(status)
