"""In-memory columns of the embedded backend, one row per vector slot.

Every filter and every hit field is an int32 code into a per-column vocabulary, so a
ScopeFilter + SearchFilters becomes a boolean mask over slots in a few vectorized numpy
lookups (well under a millisecond at 100k rows). The same mask pre-filters faiss and
answers count and search_filter; tantivy gets the equivalent term query.
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from datetime import date, timedelta
from pathlib import Path

import numpy as np

from ki_core.search.types import TERM_FILTER_FIELDS, FilterHit, LegHit, LegHits, ScopeFilter, SearchFilters

log = logging.getLogger(__name__)

MISSING_DAY = np.iinfo(np.int32).min
SINGLE_COLUMNS = (
    "project_id",
    "document_id",
    "document_version_id",
    "matter_id",
    "doc_type",
    "version_status",
    "language",
    "chunk_kind",
    "clause_type",
)
# Multi-valued fields are interned as whole tuples: a corpus has few distinct ancestor chains.
TUPLE_COLUMNS = ("doc_type_ancestors", "identifiers")
# The filters on a field of their own name; doc_type is matched by its ancestor chains below.
_TERM_FILTERS = tuple(name for name, field in TERM_FILTER_FIELDS.items() if name == field)
_MASK_CACHE_SIZE = 64
_HIT_COLUMNS = ("document_id", "document_version_id", "project_id", "version_status", "chunk_kind", "identifiers")
_EPOCH = date(1970, 1, 1)


def _identity(value: Hashable) -> Hashable:
    return value


def _json_tuple(raw: Hashable) -> Hashable:
    return tuple(json.loads(raw)) if isinstance(raw, str) else raw


def _day_number(iso: Hashable) -> Hashable:
    return (date.fromisoformat(iso) - _EPOCH).days if isinstance(iso, str) else MISSING_DAY


class Vocabulary:
    """Dense int32 codes for stored values (code 0: None); `values` holds each decoded once.

    Interning by the stored form (a JSON array, an ISO date) decodes each distinct value
    once instead of once per row: loading 100k rows is then a few dict lookups per column.
    """

    def __init__(self, decode: Callable[[Hashable], Hashable] = _identity, keys: Sequence[Hashable] = (None,)) -> None:
        self.decode = decode
        self.keys: list[Hashable] = list(keys)
        self.values: list[Hashable] = [decode(key) for key in self.keys]
        self._codes: dict[Hashable, int] = {key: code for code, key in enumerate(self.keys)}

    def codes(self, stored: Sequence[Hashable]) -> np.ndarray:
        for key in set(stored).difference(self._codes):
            self._codes[key] = len(self.keys)
            self.keys.append(key)
            self.values.append(self.decode(key))
        return np.fromiter(map(self._codes.__getitem__, stored), dtype=np.int32, count=len(stored))

    def members(self, values: Iterable[Hashable]) -> np.ndarray:
        """Lookup table code -> is the stored value among `values` (unknown values match nothing)."""
        table = np.zeros(len(self.values), dtype=bool)
        table[[self._codes[v] for v in values if v in self._codes]] = True
        return table

    def members_where(self, predicate: Callable[[Hashable], bool]) -> np.ndarray:
        """Lookup table code -> does the decoded value satisfy `predicate`."""
        return np.fromiter((predicate(v) for v in self.values), dtype=bool, count=len(self.values))


# The stored columns a table is loaded from (ChunkStore.snapshot), by name, one list each.
RowColumns = dict[str, list]


@dataclass(frozen=True, slots=True)
class TableSnapshot:
    """A table as saved after the commit of `generation` (valid while the vector file's epoch holds)."""

    table: ChunkTable
    generation: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Admitted:
    """The rows a scope + filters admit, as a slot mask."""

    mask: np.ndarray
    count: int


class ChunkTable:
    def __init__(self) -> None:
        self.size = 0
        self.version = 0  # bumped on every change; keys the mask cache
        self.chunk_id = np.zeros(0, dtype=np.int64)
        self.stamp = np.zeros(0, dtype=np.int64)
        self.alive = np.zeros(0, dtype=bool)
        self.doc_day = np.zeros(0, dtype=np.int32)
        self.codes = {name: np.zeros(0, dtype=np.int32) for name in SINGLE_COLUMNS + TUPLE_COLUMNS}
        self.vocab = {name: Vocabulary() for name in SINGLE_COLUMNS}
        self.vocab.update({name: Vocabulary(_json_tuple) for name in TUPLE_COLUMNS})
        self.dates = Vocabulary(_day_number)
        self.slot_of: dict[int, int] = {}
        self._masks: OrderedDict[tuple, Admitted] = OrderedDict()
        self._version_rank: np.ndarray | None = None
        self._by_chunk_id: tuple[np.ndarray, np.ndarray] | None = None
        self._label_arrays: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------------ writes

    def grow(self, slots: int) -> None:
        if slots <= self.size:
            return
        extra = slots - self.size
        self.chunk_id = np.concatenate([self.chunk_id, np.full(extra, -1, dtype=np.int64)])
        self.stamp = np.concatenate([self.stamp, np.zeros(extra, dtype=np.int64)])
        self.alive = np.concatenate([self.alive, np.zeros(extra, dtype=bool)])
        self.doc_day = np.concatenate([self.doc_day, np.full(extra, MISSING_DAY, dtype=np.int32)])
        for name, column in self.codes.items():
            self.codes[name] = np.concatenate([column, np.zeros(extra, dtype=np.int32)])
        self.size = slots
        self._changed()

    def save(self, path: Path, *, generation: int, epoch: int) -> None:
        """Write the columns and vocabularies (npz, no pickle) atomically: a reopen loads them in
        milliseconds and replays only the rows changed after `generation` from the store."""
        meta = {
            "generation": generation,
            "epoch": epoch,
            "vocab": {name: vocab.keys for name, vocab in self.vocab.items()},
            "dates": self.dates.keys,
        }
        arrays = {f"codes.{name}": column for name, column in self.codes.items()}
        arrays.update(chunk_id=self.chunk_id, stamp=self.stamp, alive=self.alive, doc_day=self.doc_day)
        temporary = path.with_name(path.name + ".tmp")
        with open(temporary, "wb") as handle:
            np.savez(handle, meta=np.array(json.dumps(meta, ensure_ascii=False)), **arrays)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)

    @classmethod
    def load(cls, path: Path) -> TableSnapshot | None:
        """The saved table, or None when there is none or it cannot be read (then the store rebuilds it)."""
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["meta"]))
                table = cls()
                table.chunk_id, table.stamp = data["chunk_id"], data["stamp"]
                table.alive, table.doc_day = data["alive"], data["doc_day"]
                table.codes = {name: data[f"codes.{name}"] for name in table.codes}
        except (OSError, ValueError, KeyError) as exc:
            log.warning("ignoring the saved search table %s: %s: %s", path, type(exc).__name__, exc)
            return None
        decoders = {name: vocab.decode for name, vocab in table.vocab.items()}
        table.vocab = {name: Vocabulary(decoders[name], keys) for name, keys in meta["vocab"].items()}
        table.dates = Vocabulary(_day_number, meta["dates"])
        table.size = len(table.chunk_id)
        live = np.flatnonzero(table.alive)
        table.slot_of = dict(zip(table.chunk_id[live].tolist(), live.tolist(), strict=True))
        return TableSnapshot(table, meta["generation"], meta["epoch"])

    def apply(self, rows: RowColumns) -> None:
        """Make the table agree with these stored rows: a chunk lives in its row's slot, or nowhere."""
        chunk_ids = rows["chunk_id"]
        pop = self.slot_of.pop
        previous = np.fromiter((pop(c, -1) for c in chunk_ids), dtype=np.int64, count=len(chunk_ids))
        self.alive[previous[previous >= 0]] = False
        live = np.asarray(rows["alive"], dtype=bool)
        slots = np.asarray(rows["slot"], dtype=np.int64)[live]
        ids = np.asarray(chunk_ids, dtype=np.int64)[live]
        self.slot_of.update(zip(ids.tolist(), slots.tolist(), strict=True))
        self.chunk_id[slots] = ids
        self.stamp[slots] = np.asarray(rows["stamp"], dtype=np.int64)[live]
        self.alive[slots] = True
        day_codes = self.dates.codes(rows["doc_date"])[live]
        self.doc_day[slots] = np.asarray(self.dates.values, dtype=np.int32)[day_codes]
        for name in SINGLE_COLUMNS + TUPLE_COLUMNS:
            self.codes[name][slots] = self.vocab[name].codes(rows[name])[live]
        self._changed()

    def _changed(self) -> None:
        self.version += 1
        self._masks.clear()
        self._version_rank = None
        self._by_chunk_id = None

    # ------------------------------------------------------------------- reads

    def project_ids(self) -> list[str]:
        """Every project the table has seen (its vocabulary only grows)."""
        return self.vocab["project_id"].keys[1:]  # type: ignore[return-value]

    def live_slot(self, chunk_id: int) -> int | None:
        return self.slot_of.get(chunk_id)

    @property
    def live_count(self) -> int:
        return len(self.slot_of)

    def admitted(self, scope: ScopeFilter | None, filters: SearchFilters | None) -> Admitted:
        """The slot mask of scope AND filters AND alive, cached until the table changes."""
        key = (scope, filters)
        cached = self._masks.get(key)
        if cached is not None:
            self._masks.move_to_end(key)
            return cached
        mask = self.alive.copy()
        if scope is not None:
            mask &= self._scope_mask(scope)
        if filters is not None:
            mask &= self._filter_mask(filters)
        result = Admitted(mask, int(np.count_nonzero(mask)))
        self._masks[key] = result
        if len(self._masks) > _MASK_CACHE_SIZE:
            self._masks.popitem(last=False)
        return result

    def _member(self, name: str, values: Iterable[Hashable]) -> np.ndarray:
        return self.vocab[name].members(values)[self.codes[name]]

    def _scope_mask(self, scope: ScopeFilter) -> np.ndarray:
        if scope.match_none:
            return np.zeros(self.size, dtype=bool)
        mask = np.zeros(self.size, dtype=bool)
        if scope.project_ids:
            mask = self._member("project_id", scope.project_ids)
            if scope.excluded_document_ids:
                mask &= ~self._member("document_id", scope.excluded_document_ids)
        if scope.document_ids:
            mask |= self._member("document_id", scope.document_ids)
        return mask

    def _filter_mask(self, filters: SearchFilters) -> np.ndarray:
        mask = np.ones(self.size, dtype=bool)
        for name in _TERM_FILTERS:
            value = getattr(filters, name)
            if value is not None:
                mask &= self._member(name, (value,))
        if filters.doc_type is not None:
            doc_type = filters.doc_type
            chains = self.vocab["doc_type_ancestors"].members_where(lambda chain: bool(chain) and doc_type in chain)
            mask &= chains[self.codes["doc_type_ancestors"]]
        if filters.date_from is not None or filters.date_to is not None:
            mask &= self.doc_day != MISSING_DAY
            if filters.date_from is not None:
                mask &= self.doc_day >= (filters.date_from - _EPOCH).days
            if filters.date_to is not None:
                mask &= self.doc_day <= (filters.date_to - _EPOCH).days
        return mask

    def keyword_mask(self, conditions: Iterable[tuple[Any, bool]]) -> np.ndarray:
        """Slots holding one of each condition's values on its column ((condition, negated) pairs)."""
        mask = np.ones(self.size, dtype=bool)
        for condition, negated in conditions:
            member = self._member(condition.field, condition.values)
            mask &= ~member if negated else member
        return mask

    def versions(self, mask: np.ndarray) -> dict[str, str]:
        """version id -> document id of the versions among the masked slots (a boolean query's sets)."""
        codes, first = np.unique(self.codes["document_version_id"][mask[: self.size]], return_index=True)
        documents = self.codes["document_id"][np.flatnonzero(mask[: self.size])[first]]
        versions = self._labels("document_version_id")[codes]
        return dict(zip(versions.tolist(), self._labels("document_id")[documents].tolist(), strict=True))

    def _labels(self, name: str) -> np.ndarray:
        """The column's decoded values as an object array (code -> value): a gather in C instead of a
        dict lookup per hit (a ranked search's 2,500 lexical hits: 1.2 ms per dict built)."""
        values = self.vocab[name].values
        cached = self._label_arrays.get(name)
        if cached is None or len(cached) != len(values):  # a vocabulary only grows
            cached = self._label_arrays[name] = np.array(values, dtype=object)
        return cached

    def value(self, name: str, slot: int) -> Hashable:
        return self.vocab[name].values[self.codes[name][slot]]

    def slots_of(self, chunk_ids: Iterable[int]) -> np.ndarray:
        """Live slot per chunk id, -1 where the table does not hold the chunk.

        A binary search over the live ids sorted once per table change: a text leg maps 2,500
        hits per search, and a dict lookup per hit cost 2.8 ms of a 5 ms lexical leg."""
        ids = np.asarray(chunk_ids if isinstance(chunk_ids, (list, np.ndarray)) else list(chunk_ids), dtype=np.int64)
        sorted_ids, sorted_slots = self._live_ids_sorted()
        if not len(ids) or not len(sorted_ids):
            return np.full(len(ids), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
        return np.where(sorted_ids[at] == ids, sorted_slots[at], -1)

    def _live_ids_sorted(self) -> tuple[np.ndarray, np.ndarray]:
        """(live chunk ids ascending, their slots), rebuilt after a change."""
        if self._by_chunk_id is None:
            live = np.flatnonzero(self.alive[: self.size])
            order = np.argsort(self.chunk_id[live], kind="stable")
            self._by_chunk_id = (self.chunk_id[live][order], live[order].astype(np.int64))
        return self._by_chunk_id

    def leg_hits(self, slots: np.ndarray, scores: np.ndarray) -> LegHits:
        """Ranked hits for these slots: ids, scores and statuses gathered in one numpy pass; a
        LegHit is built only for a row that is read (fusion reads a few hundred of 7,500)."""
        slots = np.asarray(slots, dtype=np.int64)
        scores = np.asarray(scores, dtype=np.float64)
        labels = np.array(self.vocab["version_status"].values, dtype=str)
        statuses = labels[self.codes["version_status"][slots]]

        def row(position: int) -> LegHit:
            slot = int(slots[position])
            values = [self.vocab[name].values[self.codes[name][slot]] for name in _HIT_COLUMNS]
            return LegHit(
                chunk_id=int(self.chunk_id[slot]),
                document_id=values[0],
                document_version_id=values[1],
                project_id=values[2],
                version_status=values[3],
                chunk_kind=values[4],
                identifiers=tuple(values[5] or ()),
                score=float(scores[position]),
                rank=position,
            )

        def documents() -> dict[str, str]:
            codes = self.codes["document_id"][slots]
            _, first = np.unique(codes, return_index=True)
            first.sort()
            ids = self._labels("document_id")[codes[first]]
            versions = self._labels("document_version_id")[self.codes["document_version_id"][slots[first]]]
            return dict(zip(ids.tolist(), versions.tolist(), strict=True))

        return LegHits(self.chunk_id[slots], scores, statuses, row, documents)

    def filter_hits(self, admitted: Admitted, size: int, offset: int) -> list[FilterHit]:
        """One hit per version (its lowest chunk id), doc_date descending, missing dates last."""
        slots = np.flatnonzero(admitted.mask)
        if not len(slots):
            return []
        newest_first = -self.doc_day[slots].astype(np.int64)
        version_codes = self.codes["document_version_id"][slots]
        order = np.lexsort((self.chunk_id[slots], self._version_ranks()[version_codes], newest_first))
        ordered = slots[order]
        _, first = np.unique(self.codes["document_version_id"][ordered], return_index=True)
        page = ordered[np.sort(first)][offset : offset + size]
        return [self._filter_hit(int(slot)) for slot in page]

    def _filter_hit(self, slot: int) -> FilterHit:
        day = int(self.doc_day[slot])
        return FilterHit(
            chunk_id=int(self.chunk_id[slot]),
            document_id=self.value("document_id", slot),
            document_version_id=self.value("document_version_id", slot),
            project_id=self.value("project_id", slot),
            version_status=self.value("version_status", slot),
            chunk_kind=self.value("chunk_kind", slot),
            doc_date=None if day == MISSING_DAY else _EPOCH + timedelta(days=day),
        )

    def _version_ranks(self) -> np.ndarray:
        """Code -> rank of the version id string, so ties sort by id as OpenSearch's keyword sort does."""
        if self._version_rank is None or len(self._version_rank) != len(self.vocab["document_version_id"].values):
            values = self.vocab["document_version_id"].values
            order = sorted(range(len(values)), key=lambda code: (values[code] is not None, values[code] or ""))
            ranks = np.empty(len(values), dtype=np.int64)
            ranks[order] = np.arange(len(values))
            self._version_rank = ranks
        return self._version_rank
