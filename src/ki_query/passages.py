"""The passage of a version's own text that a hit shows, and where it lies in that text.

A hit may be a body chunk, the version's `_profile` row ("Titel: … Dokumenttyp: …",
labelled lines written for ranking) or a clause row (an extract of the metadata
stage). Only a body chunk is the document's own words at a known place, so a
profile or clause hit shows the body chunk of its version that holds the
query's words (the first body chunk when none does): no labelled line reaches
an excerpt, and the document page can highlight the passage at its offsets. A
clause row's passage is the stretch of body text the clause was cut from.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from ki_core.acl import in_set
from ki_core.models import Chunk, ChunkKind
from ki_query.fusion import Candidate
from ki_query.text_match import excerpt, first_match, query_terms
from ki_query.verification import ChunkText


# How much of a clause's opening must be found in a body chunk: a heading and the start of its sentence.
CLAUSE_PROBE_CHARS = 80


@dataclass(frozen=True)
class Passage:
    excerpt: str
    # Characters [start, end) of the version's text the passage covers; None where unknown.
    start: int | None = None
    end: int | None = None


def shown_passages(
    session: Session, shown: Sequence[Candidate], texts: dict[int, ChunkText], query: str
) -> dict[int, Passage]:
    """{chunk_id: the passage its hit shows}, for the page's candidates (`texts`: theirs, as read for the
    page): no round trip when all are body chunks, one for the body chunks of the others' versions."""
    passages = {
        c.chunk_id: _passage(texts.get(c.chunk_id), query) for c in shown if c.chunk_kind == ChunkKind.CHUNK.value
    }
    others = [c for c in shown if c.chunk_kind != ChunkKind.CHUNK.value]
    if others:
        chunks = _body_chunks(session, {c.version_id for c in others})
        for candidate in others:
            body = chunks.get(candidate.version_id, [])
            clause = texts.get(candidate.chunk_id) if candidate.chunk_kind == ChunkKind.CLAUSE.value else None
            found = _clause_passage(body, clause.text, query) if clause is not None else None
            passages[candidate.chunk_id] = found or _best_passage(body, query)
    return passages


def _clause_passage(chunks: list[ChunkText], clause: str, query: str) -> Passage | None:
    """Where the body holds the clause row's words (the rules cut a clause out of the text verbatim, a
    long one shortened with " …"): that stretch of the body; None when no body chunk holds its start."""
    words = clause.removesuffix(" …").strip()
    probe = words[:CLAUSE_PROBE_CHARS]
    for chunk in chunks:
        at = chunk.text.find(probe) if probe and chunk.start is not None else -1
        if at >= 0:
            return Passage(excerpt(words, query), chunk.start + at, chunk.start + at + len(words))
    return None


def _passage(chunk: ChunkText | None, query: str) -> Passage:
    return Passage("") if chunk is None else Passage(excerpt(chunk.text, query), chunk.start, chunk.end)


def _body_chunks(session: Session, version_ids: Collection[str]) -> dict[str, list[ChunkText]]:
    """{version_id: its body chunks in text order}."""
    rows = session.execute(
        select(Chunk.version_id, Chunk.text, Chunk.char_start, Chunk.char_end)
        .where(in_set(Chunk.version_id, version_ids), Chunk.kind == ChunkKind.CHUNK)
        .order_by(Chunk.version_id, Chunk.ordinal)
    )
    found: dict[str, list[ChunkText]] = {}
    for version_id, text, start, end in rows:
        found.setdefault(version_id, []).append(ChunkText(text, start, end))
    return found


def _best_passage(chunks: list[ChunkText], query: str) -> Passage:
    """The body chunk with the most of the query's words (the earliest among equals); none: no text."""
    if not chunks:
        return Passage("")
    terms = query_terms(query)
    _, best = max(enumerate(chunks), key=lambda item: (_matched_terms(item[1].text, terms), -item[0]))
    return _passage(best, query)


def _matched_terms(text: str, terms: frozenset[str]) -> int:
    return sum(first_match(text, frozenset([term])) is not None for term in terms)
