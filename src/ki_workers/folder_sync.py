"""Sync a local folder into the index: register the source, ingest every file, prune, link.

Runs the ki.ingest task per file: in-process in embedded mode, on the
workers otherwise. Files that vanished from the folder lose their observation
(they leave search; SQL keeps the history).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select

from ki_core.models import (
    Document,
    Project,
    Relation,
    RelationKind,
    Source,
    SourceKind,
    SourceObject,
)
from ki_workers.context import WorkerContext
from ki_workers.sources.local_fs import Manifest, ManifestEntry, document_key, iter_files, load_manifest
from ki_workers.stages.record_metadata import link_project_references
from ki_workers.stages.ingest import (
    IngestResult,
    get_or_create_project,
    get_or_create_source,
    ingest_bytes,
    retire_object,
)

# Bigger files are recorded as failed, not read: a 2 GB scan would stall the batch.
MAX_FILE_BYTES = 50 * 1024 * 1024


@dataclass
class SyncSummary:
    files: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    errors: list[tuple[str, str]] = field(default_factory=list)
    pruned: int = 0
    relations: int = 0

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


def source_name_for(root: Path) -> str:
    return f"local:{root.resolve()}"


def register_folder(ctx: WorkerContext, root: Path, project_name: str) -> tuple[str, str]:
    """(source id, project id), created when missing."""
    with ctx.sessions() as session, session.begin():
        source = get_or_create_source(session, source_name_for(root), SourceKind.LOCAL_FS, {"root": str(root.resolve())})
        project = get_or_create_project(session, project_name)
        return source.id, project.id


def ingest_local_object(
    ctx: WorkerContext, source_id: str, external_id: str, project_id: str, entry: dict, matter: str | None
) -> IngestResult:
    """Read one file of a registered folder and ingest it, committing before returning."""
    with ctx.sessions() as session, session.begin():
        source = session.get(Source, source_id)
        project = session.get(Project, project_id)
        path = Path(source.config["root"]) / external_id
        data = _read(path)
        return ingest_bytes(
            session, source=source, project=project, external_id=external_id, data=data,
            entry=ManifestEntry.model_validate(entry), matter_name=matter,
        )


def _read(path: Path) -> bytes:
    """The file's bytes; an unreadable or oversized file becomes bytes the converter rejects."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise OSError(f"{path.name} is {size} bytes, above the {MAX_FILE_BYTES} byte limit")
    return path.read_bytes()


def sync_folder(
    ctx: WorkerContext,
    root: Path,
    project_name: str,
    matter: str | None = None,
    on_file: Callable[[str, dict | None], None] | None = None,
) -> SyncSummary:
    manifest, _ = load_manifest(root)
    source_id, project_id = register_folder(ctx, root, project_name)
    summary = SyncSummary()
    seen: set[str] = set()
    with ctx.deferred_index_writes():
        _ingest_files(ctx, root, manifest, source_id, project_id, matter, summary, seen, on_file)
    if ctx.settings.broker.eager:
        with ctx.sessions() as session, session.begin():
            link_project_references(session, project_id)
    summary.pruned = prune_missing(ctx, source_id, seen)
    summary.relations = link_manifest_relations(ctx, project_id, manifest)
    return summary


def _ingest_files(ctx, root, manifest, source_id, project_id, matter, summary, seen, on_file) -> None:
    from ki_workers import tasks

    for path in iter_files(root):
        relative = path.relative_to(root).as_posix()
        seen.add(relative)
        summary.files += 1
        entry = manifest.entry_for(relative).model_dump(mode="json")
        try:
            outcome = tasks.ingest.delay(source_id, relative, project_id, entry, matter)
            result = outcome.get() if ctx.settings.broker.eager else None
        except OSError as exc:
            result = {"outcome": "failed", "reason": str(exc)}
        if result is not None:
            summary.count(result["outcome"])
            if result["outcome"] == "failed":
                summary.errors.append((relative, result.get("reason") or "failed"))
        else:
            summary.count("queued")
        if on_file:
            on_file(relative, result)


def prune_missing(ctx: WorkerContext, source_id: str, seen: set[str]) -> int:
    """Objects the folder no longer holds lose their observations and leave search."""
    from ki_workers import tasks

    with ctx.sessions() as session, session.begin():
        gone = [
            obj
            for obj in session.scalars(select(SourceObject).where(SourceObject.source_id == source_id))
            if obj.external_id not in seen and obj.deleted_at is None
        ]
        retired = [version_id for obj in gone for version_id in retire_object(session, obj)]
    if retired:
        tasks.reindex_access.delay(retired)
    return len(gone)


def link_manifest_relations(ctx: WorkerContext, project_id: str, manifest: Manifest) -> int:
    """annex_of / responds_to / references / thread edges the manifest declares, by document key."""
    created = 0
    with ctx.sessions() as session, session.begin():
        documents = {d.key: d.id for d in session.scalars(select(Document).where(Document.project_id == project_id))}
        by_path = {entry.path: document_key(entry) for entry in manifest.files}
        for entry in manifest.files:
            source = documents.get(document_key(entry))
            for relation in entry.relations:
                target = documents.get(relation.target) or documents.get(by_path.get(relation.target, ""))
                if source is None or target is None or source == target:
                    continue
                if _relation_exists(session, relation.relation_kind, source, target):
                    continue
                session.add(Relation(kind=relation.relation_kind, from_document_id=source, to_document_id=target, origin="manifest"))
                session.flush()
                created += 1
    return created


def _relation_exists(session, kind: RelationKind, source: str, target: str) -> bool:
    return session.scalar(
        select(Relation.id).where(
            Relation.kind == kind,
            Relation.from_document_id == source,
            Relation.to_document_id == target,
            Relation.from_version_id.is_(None),
        )
    ) is not None
