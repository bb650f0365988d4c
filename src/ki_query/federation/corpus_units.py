"""Read a corpus's units from SQL: by chunk id (index hits), by address (lookups), neighbours.

The index ranks; the `corpus_units` rows hold the text and the address, so every hit is
materialized here and every lookup by container/section/subsection is a plain SQL query
on the address index, on both search backends.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ki_core.models.corpora import CorpusUnit
from ki_query.federation.corpus_loader import unit_address

Hit = dict[str, Any]


class UnitStore:
    """The units of one corpus."""

    def __init__(self, sessions: sessionmaker[Session], corpus_id: str):
        self.sessions = sessions
        self.corpus_id = corpus_id

    def by_chunk_ids(self, chunk_ids: Iterable[int]) -> dict[int, CorpusUnit]:
        wanted = list(dict.fromkeys(chunk_ids))
        found: dict[int, CorpusUnit] = {}
        with self.sessions() as session:
            for start in range(0, len(wanted), 500):
                query = select(CorpusUnit).where(
                    CorpusUnit.corpus_id == self.corpus_id, CorpusUnit.chunk_id.in_(wanted[start : start + 500])
                )
                found.update((unit.chunk_id, unit) for unit in session.scalars(query))
        return found

    def at_address(self, section_id: str, container: str | None, subsection: str | None) -> list[CorpusUnit]:
        """Units of the section (in text order), narrowed to the subsection when it exists.

        A section without numbered Absätze answers a subsection lookup with its whole text.
        """
        query = select(CorpusUnit).where(CorpusUnit.corpus_id == self.corpus_id, CorpusUnit.section_id == section_id)
        if container is not None:
            query = query.where(CorpusUnit.container_id == container)
        with self.sessions() as session:
            units = list(session.scalars(query.order_by(CorpusUnit.container_id, CorpusUnit.position)))
        if subsection is None:
            return units
        exact = [u for u in units if u.subsection == subsection]
        if exact or any(u.subsection is not None for u in units):
            return exact
        return units

    def in_force_texts(self) -> list[tuple[str, str, str]]:
        """(container, text hash, text) of every in-force unit: what the law prior learns from."""
        query = select(CorpusUnit.container_id, CorpusUnit.text_hash, CorpusUnit.text).where(
            CorpusUnit.corpus_id == self.corpus_id, CorpusUnit.repealed.is_(False)
        )
        with self.sessions() as session:
            return [tuple(row) for row in session.execute(query)]

    def sections(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[CorpusUnit]]:
        """(container, section) -> its units in text order, for neighbours and section structure."""
        wanted = set(keys)
        by_section: dict[tuple[str, str], list[CorpusUnit]] = {key: [] for key in wanted}
        sections = sorted({section for _, section in wanted})
        with self.sessions() as session:
            for start in range(0, len(sections), 500):
                query = select(CorpusUnit).where(
                    CorpusUnit.corpus_id == self.corpus_id, CorpusUnit.section_id.in_(sections[start : start + 500])
                )
                for unit in session.scalars(query):
                    if (unit.container_id, unit.section_id) in wanted:
                        by_section[(unit.container_id, unit.section_id)].append(unit)
        for units in by_section.values():
            units.sort(key=lambda u: u.position)
        return by_section


def unit_hit(
    unit: CorpusUnit, *, score: float, rank_score: float | None, kinds: Sequence[str]
) -> Hit:
    """The spec's plain hit dict for one unit."""
    hit: Hit = {
        "text": unit.text,
        "score": float(score),
        "metadata": {
            "corpus_id": unit.corpus_id,
            "container_id": unit.container_id,
            "section_id": unit.section_id,
            "subsection": unit.subsection,
            "chunk_index_in_section": unit.chunk_index_in_section,
            "text_hash": unit.text_hash,
            "record_id": unit.record_id,
            "repealed": unit.repealed,
            "heading": unit.heading,
            "address": unit_address(unit.container_id, unit.section_id, unit.subsection),
        },
        "retrieval_kinds": list(kinds),
        "corpus_id": unit.corpus_id,
    }
    if rank_score is not None:
        hit["rank_score"] = float(rank_score)
    return hit
