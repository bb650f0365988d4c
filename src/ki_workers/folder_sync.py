"""Sync a local folder into the index: register the source, ingest every file, prune, link.

Runs the ki.ingest task per file on the workers; in-process in embedded mode,
ki.ingest for a large file and ki.ingest_many for a batch of small ones. Files
that vanished from the folder lose their observation (they leave search; SQL
keeps the history). Files the caller excluded, or
skipped as too large, are left as they are: not read, not pruned.

A single file is synced as part of its folder (`only`, see `file_in_folder`):
the same source and object a sync of the whole folder uses, and no pruning,
since the other files were not looked at.

In-process, small files are ingested up to 16 (or 1 MB) in one transaction
(ki.ingest_many), their metadata is recorded a batch at a time
(stages.record_metadata.deferred_extractions), index writes are shared by a
few files at a time (stages.embed_index.deferred_index_writes), nothing waits
more than a couple of seconds, and what waits is done before a large file
starts, so what is done is searchable while the rest runs, and Ctrl-C loses
only the files in progress (one large file, or one batch of small ones). A long
file's embedding progress is reported as that file's, even when it runs in a
batch after the next file began (ChunkProgress).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from fnmatch import fnmatch
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
from ki_core.config import Settings
from ki_core.grants import bumped_once
from ki_workers.app import EXTRACT_METADATA_MANY, INGEST, INGEST_MANY, REINDEX_ACCESS, start_task
from ki_workers.context import WorkerContext
from ki_workers.sources.local_fs import Manifest, ManifestEntry, document_key, iter_files, load_manifest
from ki_workers.stages.convert import supported_file_name
from ki_workers.stages.embed_index import deferred_index_writes, flush_if_waiting
from ki_workers.stages.ingest import IngestResult, ingest_bytes, retire_object
from ki_workers.stages.record_metadata import (
    deferred_extractions,
    extracting_at_once,
    flush_extractions_if_waiting,
    link_project_references,
)
from ki_workers.stages.rows import get_or_create_project, get_or_create_source, read_batch_rows

MEGABYTE = 1024 * 1024


@dataclass(frozen=True)
class FileSelection:
    """Which files of the folder a sync reads: not excluded, and at most `max_bytes` big."""

    max_bytes: int
    large_bytes: int
    exclude: tuple[str, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings, *, max_file_mb: float | None = None, exclude: Sequence[str] = ()) -> FileSelection:
        limit = settings.ingest.max_file_mb if max_file_mb is None else max_file_mb
        return cls(int(limit * MEGABYTE), int(settings.ingest.large_file_mb * MEGABYTE), tuple(exclude))

    def excluded(self, relative: str) -> bool:
        """A glob matches the relative path (`*` spans folders) or the file name."""
        name = relative.rsplit("/", 1)[-1]
        return any(fnmatch(relative, pattern) or fnmatch(name, pattern) for pattern in self.exclude)

    def too_large(self, size: int) -> str | None:
        if size <= self.max_bytes:
            return None
        return f"{size / MEGABYTE:.1f} MB is above the limit of {self.max_bytes / MEGABYTE:g} MB (--max-file-mb)"


@dataclass(frozen=True)
class FolderFile:
    path: Path
    relative: str
    size: int


@dataclass
class SyncSummary:
    files: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    errors: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    # Files of a type no converter reads: skipped, not failed, and named in one summary line.
    unsupported: list[str] = field(default_factory=list)
    excluded: int = 0
    # None: not looked for (a sync of single files does not prune).
    pruned: int | None = 0
    relations: int = 0

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


def folder_files(
    root: Path, selection: FileSelection, only: Collection[str] | None = None
) -> tuple[list[FolderFile], list[str]]:
    """(files to read, relative paths excluded), in the folder's stable order; `only`: of these relative paths."""
    files, excluded = [], []
    for path in iter_files(root):
        relative = path.relative_to(root).as_posix()
        if only is not None and relative not in only:
            continue
        if selection.excluded(relative):
            excluded.append(relative)
        else:
            files.append(FolderFile(path, relative, path.stat().st_size))
    return files, excluded


def source_name_for(root: Path) -> str:
    return f"local:{root.resolve()}"


def file_in_folder(ctx: WorkerContext, path: Path) -> tuple[Path, str]:
    """(folder root, relative path) to sync a single file as: under the nearest folder synced before
    that holds it, so it stays the object a sync of that folder sees; else under its own folder."""
    path = path.resolve()
    with ctx.sessions() as session:
        configs = session.scalars(select(Source.config).where(Source.kind == SourceKind.LOCAL_FS))
        roots = {Path(config["root"]) for config in configs if config.get("root")}
    root = next((folder for folder in path.parents if folder in roots), path.parent)
    return root, path.relative_to(root).as_posix()


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
    result = ingest_local_objects(ctx, source_id, project_id, [(external_id, entry)], matter)[0]
    if isinstance(result, OSError):
        raise result
    return result


def ingest_local_objects(
    ctx: WorkerContext, source_id: str, project_id: str, files: Sequence[tuple[str, dict]], matter: str | None
) -> list[IngestResult | OSError]:
    """Read files of a registered folder and ingest them in order, in one transaction committed before
    returning; a file that cannot be read gives its OSError in its place and the others go on."""
    limit = int(ctx.settings.ingest.max_file_mb * MEGABYTE)
    results: list[IngestResult | OSError] = []
    # One generation bump for the batch: nothing in it reads a scope before the commit.
    with ctx.sessions() as session, session.begin(), bumped_once(session):
        # Both rows in one statement: a round trip less (a millisecond on PostgreSQL).
        source, project = session.execute(
            select(Source, Project).join(Project, Project.id == project_id).where(Source.id == source_id)
        ).one()
        root = Path(source.config["root"])
        entries = [(external_id, ManifestEntry.model_validate(entry)) for external_id, entry in files]
        batch = read_batch_rows(session, source, project, [external_id for external_id, _ in entries],
                                [document_key(entry) for _, entry in entries])
        for external_id, entry in entries:
            try:
                data = _read(root / external_id, limit)
            except OSError as exc:
                results.append(exc)
                continue
            results.append(ingest_bytes(
                session, source=source, project=project, external_id=external_id, data=data,
                entry=entry, matter_name=matter, batch=batch,
            ))
    return results


def _read(path: Path, max_bytes: int) -> bytes:
    """The file's bytes; the worker's own size check (the file may have grown since the sync looked)."""
    size = path.stat().st_size
    if size > max_bytes:
        raise OSError(f"{path.name} is {size} bytes, above the {max_bytes} byte limit (ingest.max_file_mb)")
    return path.read_bytes()


# Called with (relative path, task result or None when queued to workers).
OnFile = Callable[[str, dict | None], None]
# Called with (relative path, chunks embedded, chunks in all) while a long file is embedded in-process.
OnChunks = Callable[[str, int, int], None]


def sync_folder(
    ctx: WorkerContext,
    root: Path,
    project_name: str,
    matter: str | None = None,
    on_file: OnFile | None = None,
    *,
    selection: FileSelection | None = None,
    on_chunks: OnChunks | None = None,
    only: Collection[str] | None = None,
    declared_types: Mapping[str, str] | None = None,
) -> SyncSummary:
    """Ingest the folder's files (`only`: just these relative paths, pruning nothing), then link.

    `declared_types`: relative path -> document type, for files whose manifest entry declares none.
    """
    selection = selection or FileSelection.from_settings(ctx.settings)
    manifest, _ = load_manifest(root)
    manifest = manifest.declaring(declared_types) if declared_types else manifest
    source_id, project_id = register_folder(ctx, root, project_name)
    files, excluded = folder_files(root, selection, only)
    summary = SyncSummary(excluded=len(excluded))
    seen: set[str] = set(excluded)
    progress = ChunkProgress(on_chunks)
    ctx.embed_progress = progress if on_chunks else None
    try:
        long = len(files) >= LONG_SYNC_FILES
        with start_up_heap_frozen(long), deferred_index_writes(ctx), \
                deferred_extractions(ctx, hand_on=_extract_batch, rules_ahead=long):
            _ingest_files(ctx, files, manifest, (source_id, project_id, matter), selection, summary, seen, on_file,
                          progress)
    finally:
        ctx.embed_progress = None
    if ctx.settings.broker.eager:
        with ctx.sessions() as session, session.begin():
            link_project_references(session, project_id)
    summary.pruned = prune_missing(ctx, source_id, seen) if only is None else None
    summary.relations = link_manifest_relations(ctx, project_id, manifest)
    return summary


# From this many files on, a sync is long: it sets the process's start-up heap aside from garbage
# collection, and a helper process runs the metadata rules ahead (stages.rules_ahead).
LONG_SYNC_FILES = 32


@contextmanager
def start_up_heap_frozen(long: bool) -> Iterator[None]:
    """For a long sync, the objects alive when it starts (modules, models, ontology, caches: some
    180,000) are left out of the garbage collector's full passes until it ends.

    A full pass walks every tracked object to free the few hundred cycles a batch leaves
    (closed sessions' ORM states): 100-130 ms each, one per ~75 files in bench/ingest.py,
    about a tenth of the sync. Handed back after: nothing stays exempt when the sync is done,
    and what was garbage already when it began is collected then.
    """
    if not long:
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class ChunkProgress:
    """A long version's embedding progress, told as its file's: a batch embeds versions of files
    ingested before the one in progress (stages.record_metadata.deferred_extractions)."""

    def __init__(self, on_chunks: OnChunks | None):
        self.on_chunks, self.current, self.files = on_chunks, "", {}

    def ingested(self, relative: str, result: dict) -> None:
        """The file's versions (a mail's attachments too) are this file's."""
        for version_id in (result.get("version_id"), *(a["version_id"] for a in result.get("attachments", ()))):
            if version_id:
                self.files[version_id] = relative

    def __call__(self, version_id: str, done: int, total: int) -> None:
        if self.on_chunks:
            self.on_chunks(self.files.get(version_id, self.current), done, total)


def _extract_batch(version_ids: list[str]) -> None:
    """Where deferred extractions go: one task for the batch (its retries are the task's)."""
    start_task(EXTRACT_METADATA_MANY, version_ids)


# In-process, small files go to ki.ingest_many this many (or this many bytes) at a time: one
# transaction for them instead of one each. A large file goes alone, after what waits is done.
INGEST_BATCH_FILES = 16
INGEST_BATCH_BYTES = MEGABYTE


def _ingest_files(ctx, files, manifest, target, selection, summary, seen, on_file, progress: ChunkProgress) -> None:
    """Every file through an ingest task, reported in folder order (see the module docstring)."""
    batch: list[FolderFile] = []

    def send() -> None:
        if batch:
            _ingest_batch(ctx, batch, manifest, target, summary, on_file, progress)
            batch.clear()

    for file in files:
        seen.add(file.relative)
        summary.files += 1
        reason = selection.too_large(file.size)
        large = file.size >= selection.large_bytes
        if not supported_file_name(file.relative):
            summary.unsupported.append(file.relative)
            summary.count("unsupported")
            if on_file:
                on_file(file.relative, {"outcome": "unsupported"})
        elif reason is not None:
            send()
            summary.skipped.append((file.relative, reason))
            summary.count("skipped")
            if on_file:
                on_file(file.relative, {"outcome": "skipped", "reason": reason})
        elif not ctx.settings.broker.eager or large:
            send()  # queued to workers one by one; or large, and what waits is done before it starts
            _ingest_alone(ctx, file, manifest, target, large, summary, on_file, progress)
        else:
            batch.append(file)
            if len(batch) >= INGEST_BATCH_FILES or sum(f.size for f in batch) >= INGEST_BATCH_BYTES:
                send()
    send()


def _ingest_batch(ctx, batch: list[FolderFile], manifest, target, summary, on_file, progress: ChunkProgress) -> None:
    source_id, project_id, matter = target
    flush_extractions_if_waiting(ctx)
    flush_if_waiting(ctx)
    entries = [(file.relative, manifest.entry_for(file.relative).model_dump(mode="json")) for file in batch]
    progress.current = batch[-1].relative
    results = start_task(INGEST_MANY, source_id, project_id, entries, matter).get()
    for file, result in zip(batch, results, strict=True):
        _report(file, result, summary, on_file, progress)


def _ingest_alone(ctx, file: FolderFile, manifest, target, large: bool, summary, on_file, progress: ChunkProgress) -> None:
    source_id, project_id, matter = target
    flush_extractions_if_waiting(ctx, before_long_work=large)
    flush_if_waiting(ctx, before_long_work=large)
    entry = manifest.entry_for(file.relative).model_dump(mode="json")
    progress.current = file.relative
    try:
        with extracting_at_once(ctx) if large else nullcontext():
            outcome = start_task(INGEST, source_id, file.relative, project_id, entry, matter)
            result = outcome.get() if ctx.settings.broker.eager else None
    except OSError as exc:
        result = {"outcome": "failed", "reason": str(exc)}
    _report(file, result, summary, on_file, progress)


def _report(file: FolderFile, result: dict | None, summary: SyncSummary, on_file, progress: ChunkProgress) -> None:
    """Count a file's outcome (None: queued to workers) and tell the caller."""
    if result is not None:
        progress.ingested(file.relative, result)
        summary.count(result["outcome"])
        if result["outcome"] == "failed":
            summary.errors.append((file.relative, result.get("reason") or "failed"))
        summary.errors.extend(
            (file.relative, attachment["reason"] or "attachment failed")
            for attachment in result.get("attachments", ()) if attachment["outcome"] == "failed"
        )
    else:
        summary.count("queued")
    if on_file:
        on_file(file.relative, result)


def prune_missing(ctx: WorkerContext, source_id: str, seen: set[str]) -> int:
    """Objects the folder no longer holds lose their observations and leave search."""
    with ctx.sessions() as session, session.begin():
        gone = [
            obj
            for obj in session.scalars(select(SourceObject).where(SourceObject.source_id == source_id))
            if obj.external_id not in seen and obj.deleted_at is None
        ]
        retired = [version_id for obj in gone for version_id in retire_object(session, obj)]
    if retired:
        start_task(REINDEX_ACCESS, retired)
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
