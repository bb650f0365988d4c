"""The embedded backend (no server): tantivy for BM25, faiss for exact kNN, SQLite for the rest.

Layout under settings.embedded_index_path (`.ki/index/`):

    LOCK               flock'ed by the one writer
    table.npz          the in-memory columns as of some generation (a cache: the store is the truth)
    text/              tantivy: text, identifiers_text, keyword filter fields, chunk_id, stamp
    chunks.sqlite3     chunk metadata + access projection + state (generation, slots, vector file)
    vectors-<epoch>.f32  unit vectors, one float32 row per slot, append-only

A commit writes tantivy first, then appends vectors, then commits the SQLite
transaction, which is the commit point of the vector side. Every chunk carries the
generation that wrote it (`stamp`) on both sides; opening for write drops from each
side whatever the other lacks or holds at another stamp, so after a crash between the
two commits both sides hold the same chunks and the pipeline (whose watermark was not
recorded) writes them again.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ki_core.search.chunk_store import ChunkStore, Commit, StoreState
from ki_core.search.chunk_table import Admitted, ChunkTable
from ki_core.search.constraint import AllOf, AnyOf, Constraint, KeywordMatch
from ki_core.search.contract import BulkOperation, DeleteOp, IndexOp, update_access_ops
from ki_core.search.document_sets import document_search
from ki_core.search.signature import IndexSignature, check_recorded
from ki_core.search.text_index import IDENTIFIER_LEG_FIELD, RankedChunks, TextIndex
from ki_core.search.types import (
    AccessProjection,
    BulkFailure,
    FilterHit,
    IndexChunk,
    IndexDimensionMismatch,
    Leg,
    LegHits,
    MultiSearchRequest,
    MultiSearchResult,
    ScopeFilter,
    SearchBackendError,
    SearchFilters,
    check_result_window,
)
from ki_core.search.vector_index import VectorIndex, append_rows, checked_unit_rows

log = logging.getLogger(__name__)

LOCK_FILE = "LOCK"
STORE_FILE = "chunks.sqlite3"
# The SQL store's id (ki_core.store_identity), a one-line text file beside the chunk store.
STORE_ID_FILE = "store-id"
# What built its vectors and identifiers (ki_core.search.signature), JSON.
SIGNATURE_FILE = "index-signature.json"
TABLE_FILE = "table.npz"
TEXT_DIR = "text"
# The writer saves the in-memory table after this many commits or changed rows (and on close),
# so a reopen replays a bounded tail from the store instead of every row (~3 s at 100k);
# a save costs ~50 ms at 100k chunks.
SAVE_TABLE_EVERY_COMMITS = 64
SAVE_TABLE_EVERY_ROWS = 20_000
# Rewrite the vector file once dead slots (deleted or rewritten chunks) are both many and a
# large share: below that, skipping them in the mask costs less than rewriting every vector.
COMPACT_MIN_DEAD = 10_000
COMPACT_DEAD_SHARE = 0.3
_COPY_BLOCK_ROWS = 16_384
# A scope listing more ids than this is not sent to tantivy as term sets: the text legs rank
# under the metadata filters alone, oversampled, and the slot mask keeps the admitted hits
# (a 16,000-id term set cost ~19 ms per query; see bench/index.py for this backend's figures).
LARGE_SCOPE_TERMS = 512
POST_FILTER_OVERSAMPLE = 1.5
POST_FILTER_MAX_WINDOW = 10_000
# Up to this many matches, ranking every match and masking beats the term set (~1.3 µs a hit
# against ~11 ms CPU for a 1,786-id set at 50,000 chunks; the peer bench's 10 %-by-document-grants
# caller: lexical leg p50 10.8 -> 2.9 ms CPU, p95 unchanged).
POST_FILTER_ALL_MATCHES = 8_000
# Chunk masks of a boolean query's conditions kept at most (a few queries' worth, 100k slots = 100 KB each).
CONDITION_MASKS = 64
_ABSENT = object()


class IndexLockedError(RuntimeError):
    """Another process holds the embedded index's writer lock; the message names that process."""

    def __init__(self, lock_path: Path, holder: str = ""):
        self.lock_path = lock_path
        self.holder = holder or "another process"
        super().__init__(
            f"the embedded search index is being written by {self.holder} (lock {lock_path} is held); "
            "it has a single writer: open it read-only, or stop the other writer"
        )


def acquire_writer_lock(lock_path: Path) -> int:
    """An exclusive flock held for the writer's lifetime; the kernel releases it if the process dies.

    The holder writes its pid and command into the file, so a refused writer can say who holds it.
    """
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise IndexLockedError(lock_path, _lock_holder(lock_path)) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n{_this_command()}\n".encode())
    return fd


def _this_command() -> str:
    """`ki serve`, `ki ingest`, `celery worker`: the program's name and its first argument
    (`python -m ki.cli serve` runs .../ki/cli.py: its package names it)."""
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    name = program.parent.name if program.suffix == ".py" else program.name
    return " ".join([name, *sys.argv[1:2]])


def _lock_holder(lock_path: Path) -> str:
    """`ki serve (pid 4242)` from the lock file the holder wrote ('' when it says nothing)."""
    try:
        pid, _, command = lock_path.read_text(encoding="utf-8").strip().partition("\n")
    except OSError:
        return ""
    if not pid.strip().isdigit():
        return ""
    return f"`{command.strip()}` (pid {pid.strip()})" if command.strip() else f"pid {pid.strip()}"


@dataclass
class CommitPlan:
    """The net effect of a batch of operations, per chunk id, in operation order."""

    final: dict[int, IndexChunk | None] = field(default_factory=dict)
    access: dict[int, AccessProjection] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    # Unit vector of each chunk in `final`, checked and normalized once per batch.
    vectors: dict[int, np.ndarray] = field(default_factory=dict)


def with_access(chunk: IndexChunk, projection: AccessProjection) -> IndexChunk:
    return chunk.model_copy(
        update={
            "allowed_principals": projection.allowed_principals,
            "denied_principals": projection.denied_principals,
            "access_version": projection.access_version,
        }
    )


def plan_commit(
    operations: list[BulkOperation], *, exists: Callable[[int], bool], dimensions: int
) -> CommitPlan:
    """Net per-chunk outcome: later operations win; invalid items fail without stopping the rest."""
    plan = CommitPlan()
    chunks = [op.chunk for op in operations if isinstance(op, IndexOp)]
    units, problems = checked_unit_rows([chunk.embedding for chunk in chunks], dimensions)
    checked = iter(zip(units, problems, strict=True))
    for op in operations:
        if isinstance(op, IndexOp):
            unit, problem = next(checked)
            if op.chunk.chunk_id < 0:
                problem = "chunk_id must not be negative"
            if problem:
                plan.failed[op.chunk.chunk_id] = problem
                continue
            plan.final[op.chunk.chunk_id] = op.chunk
            plan.vectors[op.chunk.chunk_id] = unit
            plan.access.pop(op.chunk.chunk_id, None)
        elif isinstance(op, DeleteOp):
            plan.final[op.chunk_id] = None
            plan.access.pop(op.chunk_id, None)
        else:
            _plan_access(plan, op.projection, exists)
    return plan


def _plan_access(plan: CommitPlan, projection: AccessProjection, exists: Callable[[int], bool]) -> None:
    """A chunk not (yet, or no longer) in the index is skipped, as OpenSearch's document_missing is:
    the write that brings it takes its access fields from SQL then."""
    for chunk_id in projection.chunk_ids:
        pending = plan.final.get(chunk_id, _ABSENT)
        if pending is None or (pending is _ABSENT and not exists(chunk_id)):
            continue
        if pending is _ABSENT:
            plan.access[chunk_id] = projection
        else:
            plan.final[chunk_id] = with_access(pending, projection)  # type: ignore[arg-type]


def batched(operations: list[BulkOperation], chunks_per_commit: int) -> Iterator[list[BulkOperation]]:
    batch: list[BulkOperation] = []
    size = 0
    for op in operations:
        batch.append(op)
        size += len(op.chunk_ids)
        if size >= chunks_per_commit:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


class EmbeddedIndex:
    """SearchIndex in a local directory: one writer (flock), any number of read-only readers."""

    def __init__(
        self, path: Path, *, dimensions: int, read_only: bool = False, commit_batch_chunks: int = 2000,
        expected_signature: IndexSignature | None = None,
    ):
        self.path = Path(path)
        self.dimensions = dimensions
        # What this process embeds with: a new index records it, every read and write checks it (None: unchecked).
        self.expected_signature = expected_signature
        self.read_only = read_only
        self.commit_batch_chunks = commit_batch_chunks
        self._mutex = threading.RLock()
        self._lock_fd: int | None = None
        if not read_only:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock_fd = acquire_writer_lock(self.path / LOCK_FILE)
        self._store: ChunkStore | None = None
        self._text: TextIndex | None = None
        self.vectors = VectorIndex(dimensions)
        self.table = ChunkTable()
        self._loaded: StoreState | None = None
        self._saved_generation = -1
        self._rows_since_save = 0
        # Chunk masks of constraint nodes (_chunk_mask), valid for one table version.
        self._condition_masks: dict[tuple[Constraint, SearchFilters], np.ndarray] = {}
        self._masks_version = -1

    def __enter__(self) -> EmbeddedIndex:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------- lifecycle

    def ensure(self) -> None:
        with self._mutex:
            self._ready()

    def _ready(self) -> None:
        """Open on first use (ensure() is idempotent); readers then catch up with the writer."""
        if self._loaded is None:
            self._open()
        elif self.read_only:
            self._catch_up()

    def _open(self) -> None:
        store_path = self.path / STORE_FILE
        if self.read_only and not store_path.exists():
            raise SearchBackendError(f"no embedded search index at {self.path} yet; a writer creates it")
        store = ChunkStore(store_path, writable=not self.read_only)
        try:
            if store.state() is None:
                store.initialize(self.dimensions)
                if self.expected_signature is not None:
                    self.record_signature(self.expected_signature)
            self._check_dimension(store.state())  # type: ignore[arg-type]
            self._text = TextIndex(self.path / TEXT_DIR, writable=not self.read_only)
        except BaseException:
            store.close()
            raise
        self._store = store
        if not self.read_only:
            self._reconcile()
        self._load_all()

    def _check_dimension(self, state: StoreState) -> None:
        if state.dimensions != self.dimensions:
            raise IndexDimensionMismatch(
                f"the search index at {self.path} holds {state.dimensions}-dimensional vectors but the "
                f"configured embedder produces {self.dimensions}; run `ki reindex` to rebuild it"
            )

    def store_id(self) -> str | None:
        try:
            return (self.path / STORE_ID_FILE).read_text(encoding="ascii").strip() or None
        except FileNotFoundError:
            return None

    def claim_store(self, store_id: str) -> None:
        self._replace_file(STORE_ID_FILE, store_id + "\n")

    def recorded_signature(self) -> IndexSignature | None:
        try:
            return IndexSignature.model_validate_json((self.path / SIGNATURE_FILE).read_bytes())
        except FileNotFoundError:
            return None

    def record_signature(self, signature: IndexSignature) -> None:
        self._replace_file(SIGNATURE_FILE, signature.model_dump_json() + "\n")

    def _replace_file(self, name: str, content: str) -> None:
        """Written to a temporary file and renamed, so a reader never sees half of it."""
        self.path.mkdir(parents=True, exist_ok=True)
        partial = self.path / f"{name}.partial"
        partial.write_text(content, encoding="utf-8")
        os.replace(partial, self.path / name)

    def _check_signature(self) -> None:
        """Read on every search and write (~20 µs): `ki reindex` may have swapped the directory."""
        if self.expected_signature is not None:
            check_recorded(self.recorded_signature(), self.expected_signature)

    def refresh(self) -> None:
        """Writes are committed by bulk; this makes a reader see the writer's latest commit."""
        with self._mutex:
            self._ready()

    def close(self) -> None:
        with self._mutex:
            if not self.read_only and self._loaded is not None and self._loaded.generation != self._saved_generation:
                self._save_table()
            if self._text is not None:
                self._text.close()
                self._text = None
            if self._store is not None:
                self._store.close()
                self._store = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
            self._loaded = None

    @property
    def text(self) -> TextIndex:
        assert self._text is not None, "index is closed"
        return self._text

    @property
    def store(self) -> ChunkStore:
        assert self._store is not None, "index is closed"
        return self._store

    # ----------------------------------------------------------- load / sync

    def _load_all(self) -> None:
        """Columns from the saved table plus the store rows changed since, or all from the store."""
        saved = ChunkTable.load(self.path / TABLE_FILE)
        since = saved.generation if saved is not None else -1
        state, rows = self.store.snapshot(changed_after=since, only_alive=saved is None)
        if saved is not None and (saved.epoch != state.epoch or saved.generation > state.generation):
            saved = None  # written before a compaction (or by a newer writer): rebuild from the store
            state, rows = self.store.snapshot(changed_after=-1, only_alive=True)
        self.table = saved.table if saved is not None else ChunkTable()
        self.table.grow(state.slots)
        self.table.apply(rows)
        self.vectors.reset()
        self.vectors.load(self.path / state.vectors_file, state.slots)
        self._loaded = state
        self._saved_generation = saved.generation if saved is not None else -1

    def _save_table(self) -> None:
        assert self._loaded is not None
        self.table.save(self.path / TABLE_FILE, generation=self._loaded.generation, epoch=self._loaded.epoch)
        self._saved_generation = self._loaded.generation
        self._rows_since_save = 0

    def _catch_up(self) -> None:
        """Apply what commits after the loaded generation changed (all of it after a compaction)."""
        loaded = self._loaded
        assert loaded is not None
        if self.store.state() == loaded:
            return
        state, rows = self.store.snapshot(changed_after=loaded.generation)
        try:
            if state.epoch != loaded.epoch:
                raise FileNotFoundError(loaded.vectors_file)
            self.vectors.load(self.path / state.vectors_file, state.slots)
            self.table.grow(state.slots)
            self.table.apply(rows)
            self._loaded = state
        except FileNotFoundError:
            # A compaction renumbered the slots and replaced the vector file: load everything anew.
            self._load_all()
        if self.read_only:  # the writer's own commit already reloaded its searcher
            self.text.reload()

    def _reconcile(self) -> None:
        """Drop from each side the chunks the other lacks or holds at another stamp."""
        text_stamps = self.text.stamps()
        row_stamps = self.store.alive_stamps()
        text_only = [c for c, stamp in text_stamps.items() if row_stamps.get(c) != stamp]
        rows_only = [c for c, stamp in row_stamps.items() if text_stamps.get(c) != stamp]
        if text_only:
            self.text.replace(text_only, ())
            self.text.commit()
        state = self.store.state()
        assert state is not None
        if rows_only:
            self.store.commit(Commit(generation=state.generation + 1, slots=state.slots, killed=rows_only))
        if text_only or rows_only:
            log.warning(
                "search index %s reconciled after an interrupted commit: dropped %d text-only and %d "
                "vector-only chunks (their next index run writes them again)",
                self.path, len(text_only), len(rows_only),
            )  # fmt: skip

    # ---------------------------------------------------------------- writes

    def bulk(self, operations: Iterable[BulkOperation]) -> None:
        with self._mutex:
            self._require_writer()
            self._check_signature()
            failed: dict[int, str] = {}
            for batch in batched(list(operations), self.commit_batch_chunks):
                plan = plan_commit(batch, exists=self._exists, dimensions=self.dimensions)
                failed.update(plan.failed)
                self._commit_safely(plan)
            if failed:
                raise BulkFailure(failed)

    def update_access(self, projections: Iterable[AccessProjection]) -> None:
        self.bulk(update_access_ops(projections))

    def delete_document(self, document_id: str) -> None:
        with self._mutex:
            self._require_writer()
            mask = self.table.admitted(ScopeFilter(document_ids=frozenset({document_id})), None).mask
            self.bulk([DeleteOp(int(chunk_id)) for chunk_id in self.table.chunk_id[mask]])

    def _require_writer(self) -> None:
        if self.read_only:
            raise SearchBackendError(f"the search index at {self.path} is open read-only")
        self._ready()

    def _exists(self, chunk_id: int) -> bool:
        return self.table.live_slot(chunk_id) is not None

    def _commit_safely(self, plan: CommitPlan) -> None:
        """Commit; if it breaks half-way, reconcile at once so this process keeps a consistent index."""
        try:
            self._commit(plan)
        except BaseException:
            try:
                self.text.rollback()  # never publish what the failed commit had staged
                self._reconcile()
                self._load_all()
            except Exception as exc:  # noqa: BLE001 - the original error is the one to raise
                log.warning("reconciling %s after a failed commit failed too: %s: %s", self.path, type(exc).__name__, exc)
            raise

    def _commit(self, plan: CommitPlan) -> None:
        if not plan.final and not plan.access:
            return
        state = self._loaded
        assert state is not None
        generation = state.generation + 1
        written = [chunk for chunk in plan.final.values() if chunk is not None]
        killed = [c for c, chunk in plan.final.items() if chunk is None and self._exists(c)]
        if plan.final:
            self.text.replace(list(plan.final), [(chunk, generation) for chunk in written])
            self.text.commit()
        if written:
            vectors = np.stack([plan.vectors[chunk.chunk_id] for chunk in written])
            append_rows(self.path / state.vectors_file, vectors, state.slots)
        self.store.commit(
            Commit(
                generation=generation,
                slots=state.slots + len(written),
                written=[(chunk, state.slots + i) for i, chunk in enumerate(written)],
                killed=killed,
                access=list(plan.access.items()),
            )
        )
        self._catch_up()
        self._compact_if_worth_it()
        self._rows_since_save += len(written) + len(killed)
        assert self._loaded is not None
        commits = self._loaded.generation - self._saved_generation
        if commits >= SAVE_TABLE_EVERY_COMMITS or self._rows_since_save >= SAVE_TABLE_EVERY_ROWS:
            self._save_table()

    def _compact_if_worth_it(self) -> None:
        state = self._loaded
        assert state is not None
        dead = state.slots - self.table.live_count
        if dead >= COMPACT_MIN_DEAD and dead >= COMPACT_DEAD_SHARE * state.slots:
            self._compact(state)

    def _compact(self, state: StoreState) -> None:
        """Copy live vectors densely into a new file and renumber slots in one store transaction."""
        live = np.flatnonzero(self.table.alive)
        new_file = f"vectors-{state.epoch + 1}.f32"
        matrix = self.vectors.matrix()
        for start in range(0, len(live), _COPY_BLOCK_ROWS):
            append_rows(self.path / new_file, matrix[live[start : start + _COPY_BLOCK_ROWS]], start)
        if not len(live):
            append_rows(self.path / new_file, np.zeros((0, self.dimensions), dtype=np.float32), 0)
        chunk_ids = self.table.chunk_id[live].tolist()
        self.store.renumber(
            zip(chunk_ids, range(len(live)), strict=True),
            generation=state.generation + 1,
            epoch=state.epoch + 1,
            vectors_file=new_file,
        )
        (self.path / state.vectors_file).unlink(missing_ok=True)
        self._load_all()

    # ----------------------------------------------------------------- reads

    def multi_search(self, request: MultiSearchRequest) -> MultiSearchResult:
        """A boolean request holds per document version (ki_core.search.document_sets)."""
        with self._mutex:
            self._ready()
            self._check_signature()
            return document_search(self.version_sets, self._legs, request)

    def _legs(self, request: MultiSearchRequest) -> MultiSearchResult:
        admitted = self.table.admitted(request.scope, request.filters)
        if request.constraint is not None:
            admitted = self._constrained(request.constraint, request.scope, request.filters)
        legs = {leg: self._leg(leg, request, admitted) for leg in request.legs_to_send()}
        versions = self.table.versions(admitted.mask) if request.collect_versions and request.constraint else None
        return MultiSearchResult(legs=legs, versions=versions)

    def version_sets(
        self, scope: ScopeFilter, filters: SearchFilters, conditions: Sequence[Constraint]
    ) -> list[dict[str, str]]:
        """Per condition, the versions in scope with a chunk that satisfies it (version id -> document id)."""
        with self._mutex:
            self._ready()
            return [self.table.versions(self._constrained(c, scope, filters).mask) for c in conditions]

    def _constrained(self, constraint: Constraint, scope: ScopeFilter, filters: SearchFilters) -> Admitted:
        """The admitted slots that satisfy the constraint: the semantic leg ranks only inside the
        set, and every text leg's hit passes the same mask (amendments.md 6)."""
        admitted = self.table.admitted(scope, filters)
        if not admitted.count:
            return admitted
        mask = admitted.mask & self._chunk_mask(constraint, filters)
        return Admitted(mask, int(np.count_nonzero(mask)))

    def _chunk_mask(self, node: Constraint, filters: SearchFilters) -> np.ndarray:
        """Slots whose chunk satisfies `node` (no scope), kept per table version: a boolean query asks
        for its conditions' versions and then for its legs over the same conditions, and a version list
        (its eligible versions) is a column lookup here, never a tantivy term set."""
        if self._masks_version != self.table.version or len(self._condition_masks) > CONDITION_MASKS:
            self._condition_masks, self._masks_version = {}, self.table.version
        key = (node, filters)
        cached = self._condition_masks.get(key)
        if cached is not None:
            return cached
        if isinstance(node, KeywordMatch) and node.field == "document_version_id":
            mask = self.table.keyword_mask([(node, False)])
        elif isinstance(node, AnyOf) and all(self._answered(child, filters) for child in node.any):
            mask = np.logical_or.reduce([self._chunk_mask(child, filters) for child in node.any])
        elif isinstance(node, AllOf) and all(self._answered(c, filters) for c in (*node.must, *node.must_not)):
            mask = np.ones(self.table.size, dtype=bool)
            for child in node.must:
                mask &= self._chunk_mask(child, filters)
            for child in node.must_not:
                mask &= ~self._chunk_mask(child, filters)
        else:
            slots = self.table.slots_of(self.text.matching_chunk_ids(node, self.text.strict_filter(None, filters)))
            mask = np.zeros(self.table.size, dtype=bool)
            mask[slots[slots >= 0]] = True
        self._condition_masks[key] = mask
        return mask

    def _answered(self, node: Constraint, filters: SearchFilters) -> bool:
        """Whether `node`'s mask needs no new tantivy query (cached, a version list, or built of those)."""
        if (node, filters) in self._condition_masks:
            return True
        if isinstance(node, KeywordMatch):
            return node.field == "document_version_id"
        if isinstance(node, AnyOf):
            return all(self._answered(child, filters) for child in node.any)
        if isinstance(node, AllOf):
            return all(self._answered(c, filters) for c in (*node.must, *node.must_not))
        return False

    def _leg(self, leg: Leg, request: MultiSearchRequest, admitted: Admitted) -> LegHits:
        try:
            if admitted.count == 0:
                return LegHits.empty()
            if leg is Leg.SEMANTIC:
                return self._semantic_leg(request, admitted)
            return self._text_leg("text" if leg is Leg.LEXICAL else IDENTIFIER_LEG_FIELD, request, admitted)
        except SearchBackendError:
            raise
        except Exception as exc:
            raise SearchBackendError(f"the {leg} leg failed: {type(exc).__name__}: {exc}") from exc

    def _semantic_leg(self, request: MultiSearchRequest, admitted: Admitted) -> LegHits:
        units, [problem] = checked_unit_rows([request.query_vector or ()], self.dimensions)
        if problem:
            raise SearchBackendError(f"the semantic leg cannot run: query {problem}")
        slots, scores = self.vectors.nearest(units[0], admitted.mask, admitted.count, request.size)
        return self.table.leg_hits(slots, scores)

    def _text_leg(self, leg_field: str, request: MultiSearchRequest, admitted: Admitted) -> LegHits:
        if request.scope.term_count > LARGE_SCOPE_TERMS:
            hits = self._post_filtered_text_leg(leg_field, request, admitted)
            if hits is not None:
                return hits
        strict = self.text.strict_filter(request.scope, request.filters, self.table.project_ids())
        ranked = self.text.ranked(
            leg_field, request.query_text, strict, request.size, request.identifier_terms, request.constraint
        )
        slots, scores = self._admitted_hits(ranked, admitted)
        return self.table.leg_hits(slots, scores)

    def _post_filtered_text_leg(
        self, leg_field: str, request: MultiSearchRequest, admitted: Admitted
    ) -> LegHits | None:
        """A scope listing many documents: rank under the metadata filters alone and keep what the
        slot mask admits. Exact when the window yields `size` admitted hits or holds every match;
        otherwise None, and the caller runs the exact term-set filter.

        When the scope admits so few rows that the oversampled window would be too deep, the
        query's matches are counted first (~0.1 ms): a query matching at most
        POST_FILTER_ALL_MATCHES chunks ranks them all, which is exact whatever the scope admits
        and cheaper than the term set (10 % of 17,859 documents by document grants: the set
        alone costs ~11 ms CPU per leg); a query matching more goes to the term set directly."""
        loose = self.text.strict_filter(None, request.filters)
        window = math.ceil(request.size * POST_FILTER_OVERSAMPLE * self.table.live_count / admitted.count)
        if window > POST_FILTER_MAX_WINDOW:
            matches = self.text.match_count(
                leg_field, request.query_text, loose, request.identifier_terms, request.constraint
            )
            if matches > POST_FILTER_ALL_MATCHES:
                return None
            # One more than counted: a full window means a commit added matches since the count.
            window = matches + 1
        ranked = self.text.ranked(
            leg_field, request.query_text, loose, window, request.identifier_terms, request.constraint
        )
        slots, scores = self._admitted_hits(ranked, admitted)
        if len(slots) < request.size and len(ranked.chunk_ids) == window:
            return None
        return self.table.leg_hits(slots[: request.size], scores[: request.size])

    def _admitted_hits(self, ranked: RankedChunks, admitted: Admitted) -> tuple[np.ndarray, np.ndarray]:
        """(slots, scores) of the ranked hits that are the chunk the table holds (same stamp) and
        that the slot mask admits: the mask is the fail-closed backstop behind tantivy's filter."""
        slots = self.table.slots_of(ranked.chunk_ids)
        held = slots >= 0
        held[held] &= (self.table.stamp[slots[held]] == ranked.stamps[held]) & admitted.mask[slots[held]]
        return slots[held], ranked.scores[held]

    def search_filter(
        self, scope: ScopeFilter, filters: SearchFilters, size: int, offset: int = 0
    ) -> list[FilterHit]:
        check_result_window(offset, size)
        with self._mutex:
            self._ready()
            self._check_signature()
            return self.table.filter_hits(self.table.admitted(scope, filters), size, offset)

    def count(self, scope: ScopeFilter | None = None, filters: SearchFilters | None = None) -> int:
        with self._mutex:
            self._ready()
            return self.table.admitted(scope, filters).count

    def stored_fields(self, chunk_id: int) -> dict[str, Any] | None:
        """Every indexed field of a chunk except text and vector (inspection and export)."""
        with self._mutex:
            self._ready()
            return self.store.stored_fields(chunk_id)

    def stored_fields_of(self, chunk_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        with self._mutex:
            self._ready()
            found = ((chunk_id, self.store.stored_fields(chunk_id)) for chunk_id in dict.fromkeys(chunk_ids))
            return {chunk_id: fields for chunk_id, fields in found if fields is not None}
