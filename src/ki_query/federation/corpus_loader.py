"""Load statute-format records (one Absatz per JSON line) into a corpus: SQL rows, then its own index.

The record format is that of shared/data/statutes: {id, law, section, subsection, heading,
text, repealed}. Contracts and guidelines load the same way: `law` is the container
("Rahmenvertrag", "Anlage 11"); statute abbreviations are normalized ("SGB 5" -> "SGB V").

Three phases, as for every index write: (1) register the corpus and replace the units of
the loaded containers in SQL, the authoritative copy; (2) embed and write the index through
the SearchIndex protocol (either backend); (3) record the unit count in a fresh transaction.
A crash between phases makes the next `ki corpus load` repeat the work, never skip it.

`remove_corpus` undoes a load: the index first, then the SQL rows (a crash between leaves a
registered corpus without an index, which `ki corpus list` shows and a second remove
finishes; the other order would leave an index nothing names). A reload under another
embedder writes a new index and then deletes the previous one.

The index has no container/section fields, so address lookups read the SQL rows
(`corpus_units`); the index maps project_id = corpus, document_id = container,
document_version_id = record id, matter_id = "container|section" (for a section filter)
and version_status = "repealed" / "in_force".
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session, sessionmaker

from ki_core.config import Settings
from ki_core.db import transaction
from ki_core.embedding import Embedder, signature_slug
from ki_core.identifiers import extract, normalize_law
from ki_core.models.corpora import Corpus, CorpusKind, CorpusUnit
from ki_core.search import DeleteOp, IndexOp, SearchIndex, open_index
from ki_core.search.types import IndexChunk
from ki_query.federation.errors import CorpusLoadError, UnknownCorpus

UNIT_KIND = "chunk"
SECTION_KIND = "section"
# Units embedded and written per index batch: bounds memory, and shows progress on long loads.
LOAD_BATCH_UNITS = 512
# Chunk ids are signed 64-bit in SQL and OpenSearch; keep them positive.
_ID_MASK = (1 << 63) - 1
# Texts the source uses for a repealed norm whose `repealed` flag it does not always set.
REPEALED_TEXTS = frozenset({"", "-", "(weggefallen)", "(aufgehoben)"})
REPEALED_PLACEHOLDER = "(weggefallen)"
_SENTENCE_END = re.compile(r"(?<=[.;:!?])\s+")

Progress = Callable[[int, int], None]


class StatuteRecord(BaseModel):
    """One line of a statute-format file."""

    model_config = ConfigDict(extra="ignore")

    id: str | None = None
    law: str
    section: str
    subsection: str | None = None
    heading: str | None = None
    text: str = ""
    repealed: bool = False

    @field_validator("subsection", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @property
    def record_id(self) -> str:
        return self.id or f"{self.law}|{self.section}|{self.subsection or ''}"


@dataclass(frozen=True)
class Unit:
    """One chunk at its address, as written to SQL and projected into the index."""

    chunk_id: int
    record_id: str
    container_id: str
    section_id: str
    subsection: str | None
    position: int
    piece: int
    chunk_index_in_section: int
    heading: str | None
    text: str
    text_hash: str
    repealed: bool

    @property
    def address(self) -> str:
        return unit_address(self.container_id, self.section_id, self.subsection)


@dataclass(frozen=True)
class Replaced:
    """What replacing the units of the loaded containers left behind in the index."""

    stale_units: list[int]
    stale_sections: list[int]
    # The embedder changed: the new index must receive the corpus's other containers too, and
    # the previous index (of the old embedder) is deleted once the new one is written.
    rebuild: bool
    previous_index: str | None = None


@dataclass
class LoadReport:
    corpus_id: str
    index_name: str
    records: int = 0
    units: int = 0
    deleted_units: int = 0
    containers: list[str] = field(default_factory=list)
    repealed_units: int = 0
    # Record ids the source file repeats, merged into one unit each (see merge_repeated_records).
    merged_ids: list[str] = field(default_factory=list)


def unit_address(container: str, section: str, subsection: str | None) -> str:
    """'§ 573c Abs. 1 BGB', 'Art. 3 GG', '§ 5 Anlage 11'."""
    absatz = f" Abs. {subsection}" if subsection else ""
    return f"{section}{absatz} {container}"


def unit_chunk_id(record_id: str, piece: int) -> int:
    """Deterministic 63-bit id: reloading rewrites the same rows, never duplicates."""
    digest = hashlib.sha256(f"{record_id}#{piece}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & _ID_MASK


def unit_text_hash(address: str, piece: int, text: str) -> str:
    """Hash of the text at its address: two repealed §§ both reading "(weggefallen)" stay two chunks."""
    return hashlib.sha256(f"{address}#{piece}\n{text}".encode()).hexdigest()


def embedding_text(unit: Unit | CorpusUnit) -> str:
    """What the embedder sees for a unit: the Absatz text only (never the heading), like BM25."""
    return unit.text


def corpus_index_name(corpus_id: str, signature: str) -> str:
    """Own index per corpus and embedder: vectors of two signatures never share an index."""
    return f"corpus-{signature_slug(corpus_id)}-{signature_slug(signature)}"


# ------------------------------------------------------------------ reading


def read_records(paths: Sequence[str | Path]) -> Iterator[StatuteRecord]:
    for path in map(Path, paths):
        opener = gzip.open if path.suffix == ".gz" else open
        try:
            with opener(path, "rt", encoding="utf-8") as lines:
                for number, line in enumerate(lines, start=1):
                    if line.strip():
                        yield _parse_record(path, number, line)
        except OSError as exc:
            raise CorpusLoadError(f"{path}: cannot read: {exc}") from None


def _parse_record(path: Path, number: int, line: str) -> StatuteRecord:
    try:
        return StatuteRecord.model_validate_json(line)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}" for e in exc.errors())
        raise CorpusLoadError(f"{path}:{number}: not a statute record ({problems})") from None


def merge_repeated_records(records: Iterable[StatuteRecord]) -> tuple[list[StatuteRecord], list[str]]:
    """One record per id, in first-seen order, and the ids that occurred more than once.

    Real statute dumps repeat an id now and then: a section that exists twice in the law (two
    "§ 34" in the KStG for different assessment periods), a consolidation artefact that lists an
    Absatz once live and once as "(weggefallen)", or the same Absatz twice. Every record is a
    unit at its address, so a repeated id cannot become two units; dropping either text would
    lose law a lawyer may be searching for. So identical repeats vanish, a repeal marker yields
    to a live text at the same address, and different live texts are joined in file order.
    """
    groups: dict[str, list[StatuteRecord]] = {}
    for record in records:
        groups.setdefault(record.record_id, []).append(record)
    merged = [_merged_record(group) for group in groups.values()]
    return merged, [record_id for record_id, group in groups.items() if len(group) > 1]


def _merged_record(group: list[StatuteRecord]) -> StatuteRecord:
    first = group[0]
    if len(group) == 1:
        return first
    texts = list(dict.fromkeys(r.text.strip() for r in group))
    live = [text for text in texts if text not in REPEALED_TEXTS]
    if not live:
        return first
    return first.model_copy(
        update={"text": "\n\n".join(live), "repealed": all(r.repealed for r in group if r.text.strip() in live)}
    )


def split_text(text: str, max_chars: int) -> list[str]:
    """An Absatz longer than max_chars, cut at sentence ends into pieces of at most max_chars.

    A single sentence longer than max_chars is cut at whitespace; nothing is dropped.
    """
    if len(text) <= max_chars:
        return [text]
    pieces: list[str] = []
    current = ""
    for sentence in _SENTENCE_END.split(text):
        for part in _hard_cut(sentence, max_chars):
            if current and len(current) + 1 + len(part) > max_chars:
                pieces.append(current)
                current = part
            else:
                current = f"{current} {part}" if current else part
    if current:
        pieces.append(current)
    return pieces


def _hard_cut(sentence: str, max_chars: int) -> list[str]:
    parts = []
    while len(sentence) > max_chars:
        cut = sentence.rfind(" ", max_chars // 2, max_chars)
        cut = cut if cut > 0 else max_chars
        parts.append(sentence[:cut].strip())
        sentence = sentence[cut:].strip()
    return [*parts, sentence] if sentence else parts


def units_from_records(records: Iterable[StatuteRecord], max_chars: int) -> list[Unit]:
    units: list[Unit] = []
    next_index: dict[tuple[str, str], int] = {}
    for record in records:
        container = normalize_law(record.law)
        text = record.text.strip()
        repealed = record.repealed or text in REPEALED_TEXTS
        text = text if text not in ("", "-") else REPEALED_PLACEHOLDER
        address = unit_address(container, record.section, record.subsection)
        for piece, piece_text in enumerate(split_text(text, max_chars)):
            key = (container, record.section)
            index_in_section = next_index.get(key, 0)
            next_index[key] = index_in_section + 1
            units.append(
                Unit(
                    chunk_id=unit_chunk_id(record.record_id, piece),
                    record_id=record.record_id,
                    container_id=container,
                    section_id=record.section,
                    subsection=record.subsection,
                    position=len(units),
                    piece=piece,
                    chunk_index_in_section=index_in_section,
                    heading=record.heading or None,
                    text=piece_text,
                    text_hash=unit_text_hash(address, piece, piece_text),
                    repealed=repealed,
                )
            )
    return units


# ------------------------------------------------------------------ index projection


def unit_identifiers(unit: Unit) -> tuple[str, ...]:
    """The unit's own address and the norms its text cites, for the identifier leg."""
    own = {unit_address(unit.container_id, unit.section_id, None), unit.address}
    cited = {
        i.normalized
        for i in extract(unit.text, context_law=unit.container_id, context_section=unit.section_id)
        if i.kind == "statute"
    }
    return tuple(sorted(own | cited))


def index_chunk(corpus_id: str, kind: str, unit: Unit, vector: Sequence[float]) -> IndexChunk:
    return IndexChunk(
        chunk_id=unit.chunk_id,
        text=unit.text,
        embedding=tuple(float(x) for x in vector),
        project_id=corpus_id,
        document_id=unit.container_id,
        document_version_id=unit.record_id,
        matter_id=section_key(unit.container_id, unit.section_id),
        doc_type=kind,
        doc_type_ancestors=(kind,),
        version_status="repealed" if unit.repealed else "in_force",
        language="de",
        chunk_kind=UNIT_KIND,
        identifiers=unit_identifiers(unit),
        allowed_principals=("public",),
        meta={
            "corpus_id": corpus_id,
            "record_id": unit.record_id,
            "address": unit.address,
            "container_id": unit.container_id,
            "section_id": unit.section_id,
            "subsection": unit.subsection,
            "chunk_index_in_section": unit.chunk_index_in_section,
            "text_hash": unit.text_hash,
            "repealed": unit.repealed,
        },
    )


def section_key(container: str, section: str) -> str:
    return f"{container}|{section}"


def section_chunk_id(container: str, section: str) -> int:
    digest = hashlib.sha256(f"section\n{container}\n{section}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & _ID_MASK


def section_chunks(corpus_id: str, kind: str, units: Sequence[Unit], vectors: np.ndarray) -> list[IndexChunk]:
    """One row per § (chunk_kind "section"): the whole text for section-level BM25.

    BM25 over the whole § sees query words spread over several Absätze; the vector is the
    normalized centroid of the Absätze (a row must carry one; retrieval ranks sections
    semantically by their best Absatz instead). document_version_id holds the section key.
    """
    groups: dict[tuple[str, str], list[int]] = {}
    for i, unit in enumerate(units):
        groups.setdefault((unit.container_id, unit.section_id), []).append(i)
    rows = []
    for (container, section), members in groups.items():
        centroid = vectors[members].mean(axis=0)
        rows.append(
            IndexChunk(
                chunk_id=section_chunk_id(container, section),
                text="\n".join(units[i].text for i in members),
                embedding=tuple(float(x) for x in centroid / (np.linalg.norm(centroid) or 1.0)),
                project_id=corpus_id,
                document_id=container,
                document_version_id=section_key(container, section),
                matter_id=section_key(container, section),
                doc_type=kind,
                doc_type_ancestors=(kind,),
                version_status="repealed" if all(units[i].repealed for i in members) else "in_force",
                language="de",
                chunk_kind=SECTION_KIND,
                allowed_principals=("public",),
                meta={"corpus_id": corpus_id, "container_id": container, "section_id": section, "kind": SECTION_KIND},
            )
        )
    return rows


# ------------------------------------------------------------------ loading


def index_metric(settings: Settings) -> str:
    """Both backends score cosine (unit vectors); an l2 OpenSearch space is not comparable."""
    if settings.search.backend == "opensearch" and settings.retrieval.vector_space_type == "l2":
        return "l2"
    return "cosine"


def default_container_of(units: Sequence[Unit], explicit: str | None) -> str | None:
    """The explicit one, else the only container; several containers without a choice: none."""
    if explicit:
        return normalize_law(explicit)
    containers = {u.container_id for u in units}
    return containers.pop() if len(containers) == 1 else None


def load_corpus(
    settings: Settings,
    sessions: sessionmaker[Session],
    embedder: Embedder,
    corpus_id: str,
    paths: Sequence[str | Path],
    *,
    kind: CorpusKind = CorpusKind.STATUTES,
    default_container: str | None = None,
    title: str | None = None,
    index: SearchIndex | None = None,
    progress: Progress | None = None,
) -> LoadReport:
    """Register the corpus and (re)load the containers of `paths`; other containers stay."""
    records = list(read_records(paths))
    distinct, repeated = merge_repeated_records(records)
    units = units_from_records(distinct, settings.retrieval.chunk_chars)
    if not units:
        raise CorpusLoadError(f"no records in {', '.join(map(str, paths))}")
    index_name = corpus_index_name(corpus_id, embedder.signature)
    report = LoadReport(corpus_id, index_name, records=len(records), units=len(units), merged_ids=repeated)
    report.containers = sorted({u.container_id for u in units})
    report.repealed_units = sum(u.repealed for u in units)
    replaced = _register(sessions, settings, embedder, corpus_id, units, kind, default_container, title, index_name)
    report.deleted_units = len(replaced.stale_units)
    stale = replaced.stale_units + replaced.stale_sections
    if replaced.rebuild:
        # A new embedder means a new index: it must hold the containers loaded earlier too.
        units = [*units, *_other_units(sessions, corpus_id, report.containers)]
    owned = index is None
    index = index or open_index(settings, index_name=index_name)
    try:
        index.ensure()
        _write_index(index, corpus_id, kind.value, embedder, units, stale, progress)
    finally:
        if owned:
            index.close()
    _record_count(sessions, corpus_id)
    if replaced.rebuild and replaced.previous_index:
        drop_corpus_index(settings, replaced.previous_index)
    return report


def _register(
    sessions: sessionmaker[Session],
    settings: Settings,
    embedder: Embedder,
    corpus_id: str,
    units: Sequence[Unit],
    kind: CorpusKind,
    default_container: str | None,
    title: str | None,
    index_name: str,
) -> Replaced:
    """Upsert the Corpus row and replace the loaded containers' units."""
    containers = sorted({u.container_id for u in units})
    with transaction(sessions) as session:
        corpus = session.get(Corpus, corpus_id)
        if corpus is None:
            corpus = Corpus(id=corpus_id, attributes={}, unit_count=0, index_name=index_name)
            session.add(corpus)
        previous_index = corpus.index_name
        rebuild = previous_index != index_name
        corpus.kind = kind
        corpus.index_name = index_name
        corpus.embedding_signature = embedder.signature
        corpus.metric = index_metric(settings)
        corpus.default_container = default_container_of(units, default_container) or corpus.default_container
        known = set((corpus.attributes or {}).get("containers", ()))
        corpus.attributes = {
            **(corpus.attributes or {}),
            "containers": sorted(known | set(containers)),
            "title": title or (corpus.attributes or {}).get("title") or corpus_id,
            "public": True,
        }
        held_rows = session.execute(
            select(CorpusUnit.chunk_id, CorpusUnit.container_id, CorpusUnit.section_id).where(
                CorpusUnit.corpus_id == corpus_id, CorpusUnit.container_id.in_(containers)
            )
        ).all()
        session.execute(
            delete(CorpusUnit).where(CorpusUnit.corpus_id == corpus_id, CorpusUnit.container_id.in_(containers))
        )
        session.flush()
        for start in range(0, len(units), 2000):
            rows = [{"corpus_id": corpus_id, **_unit_row(u)} for u in units[start : start + 2000]]
            session.execute(insert(CorpusUnit), rows)
    stale_units = {row.chunk_id for row in held_rows} - {u.chunk_id for u in units}
    stale_sections = {section_chunk_id(r.container_id, r.section_id) for r in held_rows} - {
        section_chunk_id(u.container_id, u.section_id) for u in units
    }
    return Replaced(sorted(stale_units), sorted(stale_sections), rebuild, previous_index if rebuild else None)


def _other_units(sessions: sessionmaker[Session], corpus_id: str, loaded: Sequence[str]) -> list[Unit]:
    with sessions() as session:
        rows = session.scalars(
            select(CorpusUnit)
            .where(CorpusUnit.corpus_id == corpus_id, CorpusUnit.container_id.not_in(loaded))
            .order_by(CorpusUnit.container_id, CorpusUnit.position)
        ).all()
        return [Unit(**{name: getattr(row, name) for name in Unit.__dataclass_fields__}) for row in rows]


def _unit_row(unit: Unit) -> dict[str, object]:
    return {name: getattr(unit, name) for name in Unit.__dataclass_fields__}


def _write_index(
    index: SearchIndex,
    corpus_id: str,
    kind: str,
    embedder: Embedder,
    units: Sequence[Unit],
    stale: Sequence[int],
    progress: Progress | None,
) -> None:
    if stale:
        index.bulk(DeleteOp(chunk_id) for chunk_id in stale)
    vectors = []
    for start in range(0, len(units), LOAD_BATCH_UNITS):
        batch = units[start : start + LOAD_BATCH_UNITS]
        vectors.append(embedder.embed_passages([embedding_text(u) for u in batch]))
        index.bulk(IndexOp(index_chunk(corpus_id, kind, u, v)) for u, v in zip(batch, vectors[-1], strict=True))
        if progress is not None:
            progress(start + len(batch), len(units))
    index.bulk(IndexOp(row) for row in section_chunks(corpus_id, kind, units, np.vstack(vectors)))
    index.refresh()


def _record_count(sessions: sessionmaker[Session], corpus_id: str) -> None:
    with transaction(sessions) as session:
        corpus = session.get(Corpus, corpus_id)
        if corpus is not None:
            count = select(func.count()).select_from(CorpusUnit).where(CorpusUnit.corpus_id == corpus_id)
            corpus.unit_count = session.scalar(count) or 0


# ------------------------------------------------------------------ index presence and removal


@dataclass(frozen=True)
class RegisteredCorpus:
    """What removing a corpus deletes (shown before the operator confirms)."""

    corpus_id: str
    index_name: str
    unit_count: int


@dataclass(frozen=True)
class RemovalReport:
    corpus_id: str
    index_name: str
    units: int
    index_removed: bool


def registered_corpus(sessions: sessionmaker[Session], corpus_id: str) -> RegisteredCorpus:
    with sessions() as session:
        corpus = session.get(Corpus, corpus_id)
        if corpus is None:
            raise UnknownCorpus(corpus_id)
        return RegisteredCorpus(corpus.id, corpus.index_name, corpus.unit_count)


def remove_corpus(settings: Settings, sessions: sessionmaker[Session], corpus_id: str) -> RemovalReport:
    """Delete the corpus's index, then its units and its registration (UnknownCorpus if none)."""
    corpus = registered_corpus(sessions, corpus_id)
    index_removed = drop_corpus_index(settings, corpus.index_name)
    with transaction(sessions) as session:
        units = session.execute(delete(CorpusUnit).where(CorpusUnit.corpus_id == corpus_id)).rowcount
        session.execute(delete(Corpus).where(Corpus.id == corpus_id))
    return RemovalReport(corpus_id, corpus.index_name, units, index_removed)


def corpus_index_exists(settings: Settings, index_name: str) -> bool:
    """Embedded: its chunk store is there; OpenSearch: an index or alias of that name."""
    if settings.search.backend == "opensearch":
        return bool(_on_opensearch(settings, index_name, lambda client: client.indices.exists(index=index_name)))
    from ki_core.search.embedded import STORE_FILE

    return (settings.embedded_index_path / index_name / STORE_FILE).is_file()


def drop_corpus_index(settings: Settings, index_name: str) -> bool:
    """Delete a corpus index (OpenSearch: the indices behind the alias); False when there was none."""
    if settings.search.backend == "opensearch":
        return _on_opensearch(settings, index_name, lambda client: _delete_opensearch_index(client, index_name))
    return _delete_embedded_index(settings.embedded_index_path / index_name)


def _delete_embedded_index(path: Path) -> bool:
    from ki_core.search.embedded import LOCK_FILE, acquire_writer_lock

    if not path.is_dir():
        return False
    # Under the writer lock: a load writing this index now raises IndexLockedError, nothing is deleted.
    lock = acquire_writer_lock(path / LOCK_FILE)
    try:
        shutil.rmtree(path)
    finally:
        os.close(lock)
    return True


def _delete_opensearch_index(client: Any, index_name: str) -> bool:
    names = sorted(client.indices.get_alias(name=index_name)) if client.indices.exists_alias(name=index_name) else []
    if not names and client.indices.exists(index=index_name):
        names = [index_name]
    if names:
        from ki_core.search.opensearch import ACCESS_SUFFIX

        # Each chunk index with its access-projection index beside it (ki_core.search.opensearch).
        client.indices.delete(index=",".join(names + [name + ACCESS_SUFFIX for name in names]),
                              params={"ignore_unavailable": "true"})  # fmt: skip
    return bool(names)


def _on_opensearch(settings: Settings, index_name: str, action: Callable[[Any], Any]) -> Any:
    from opensearchpy.exceptions import OpenSearchException

    from ki_core.search.opensearch import make_client, transport_detail
    from ki_core.search.types import SearchBackendError

    client = make_client(settings.search.opensearch)
    try:
        return action(client)
    except OpenSearchException as exc:
        raise SearchBackendError(f"OpenSearch on index {index_name} failed: {transport_detail(exc)}") from exc
    finally:
        client.close()
