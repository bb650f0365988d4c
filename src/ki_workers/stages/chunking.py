"""Split converted text into body chunks, and build the profile and clause rows.

Windows of `chunk_chars` with `chunk_overlap_chars` overlap, cut at a newline
where one lies in the back half of the window (a paragraph stays whole), else
at a sentence end, else at whitespace, so no word is split.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

# Chunk ids are signed 64-bit in SQL and OpenSearch; keep them positive.
_ID_MASK = (1 << 63) - 1
PROFILE_ORDINAL = -1
# The spec's "clause rows: ordinals 1000+", placed far above any body chunk: at 1000 a text of over
# ~1 MB (more than 1,000 body chunks) could not be stored (see migration 0008).
FIRST_CLAUSE_ORDINAL = 1_000_000_000
# The profile row carries this much of the text after its labeled lines (spec).
PROFILE_TEXT_CHARS = 400

_SENTENCE_END = re.compile(r"[.!?;:]\s")


@dataclass(frozen=True)
class TextSpan:
    text: str
    start: int
    end: int


def chunk_id(version_id: str, ordinal: int) -> int:
    """Deterministic 63-bit id: re-running a stage rewrites the same rows, never duplicates."""
    digest = hashlib.sha256(f"{version_id}:{ordinal}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & _ID_MASK


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def split_body(text: str, chunk_chars: int, overlap_chars: int) -> list[TextSpan]:
    """Body windows over `text`; every character belongs to at least one window."""
    if overlap_chars >= chunk_chars:
        raise ValueError("overlap must be smaller than the window")
    spans: list[TextSpan] = []
    start = _skip_space(text, 0)
    while start < len(text):
        end = _window_end(text, start, chunk_chars)
        piece = text[start:end].strip()
        if piece:
            spans.append(TextSpan(piece, start, end))
        if end >= len(text):
            break
        start = _next_start(text, start, end, overlap_chars)
    return spans


def _window_end(text: str, start: int, chunk_chars: int) -> int:
    hard_end = start + chunk_chars
    if hard_end >= len(text):
        return len(text)
    floor = start + chunk_chars // 2
    newline = text.rfind("\n", floor, hard_end)
    if newline != -1:
        return newline + 1
    sentence_end = _last_sentence_end(text, floor, hard_end)
    if sentence_end is not None:
        return sentence_end
    space = max(text.rfind(" ", floor, hard_end), text.rfind("\t", floor, hard_end))
    return space + 1 if space != -1 else hard_end


def _last_sentence_end(text: str, floor: int, hard_end: int) -> int | None:
    last = None
    for match in _SENTENCE_END.finditer(text, floor, hard_end):
        last = match.start() + 1
    return last


def _next_start(text: str, start: int, end: int, overlap_chars: int) -> int:
    """Step back by the overlap, then forward to a word start; always make progress."""
    candidate = max(end - overlap_chars, start + 1)
    if candidate < end and not text[candidate - 1].isspace():
        space = text.find(" ", candidate, end)
        newline = text.find("\n", candidate, end)
        boundaries = [b for b in (space, newline) if b != -1]
        candidate = min(boundaries) + 1 if boundaries else end
    return _skip_space(text, candidate)


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index].isspace():
        index += 1
    return index


def profile_text(labeled_lines: list[tuple[str, str | None]], body: str) -> str:
    """The profile row: labeled lines that have a value, then the opening of the text."""
    lines = [f"{label}: {value}" for label, value in labeled_lines if value]
    opening = body[:PROFILE_TEXT_CHARS].strip()
    return "\n".join([*lines, opening]) if opening else "\n".join(lines)


def context_header(title: str | None, doc_type_label: str | None, matter_title: str | None) -> str:
    """One line that keeps an isolated paragraph findable; embedded, never stored."""
    return " | ".join(part for part in (title, doc_type_label, matter_title) if part)


def embedding_input(text: str, header: str, contextualize: bool) -> str:
    return f"{header}\n{text}" if contextualize and header else text
