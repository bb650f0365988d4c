"""Where a text matches a query, word by word, as the lexical leg sees words.

A word is marked when its analysed token (text_index.german_analyzer: lowercase,
German stop words, Snowball stem, no decompounding) is a query token, so a
highlight never claims a match the search did not make: "Vertrag" marks
"Verträge" (both stem to "vertrag") but not "unverträglich" ("unvertrag").
A phrase is marked as one span where its tokens stand in a row; a stop word
inside it matches any word in its place, as the index keeps the position of
a dropped stop word (tantivy and OpenSearch alike).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ki_core.search.text_index import german_analyzer

# What tantivy's simple tokenizer keeps: runs of letters and digits.
_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True, slots=True)
class Word:
    start: int
    end: int
    # The analysed token; None for a stop word or an over-long token (it keeps its position).
    token: str | None


@lru_cache(maxsize=1)
def _analyzer():
    return german_analyzer()


@lru_cache(maxsize=65536)
def analysed(word: str) -> str | None:
    """One word's token; the analyzer is applied per word so each token keeps its word's offsets."""
    tokens = _analyzer().analyze(word)
    return tokens[0] if tokens else None


def words(text: str) -> list[Word]:
    return [Word(m.start(), m.end(), analysed(m.group())) for m in _WORD.finditer(text)]


def _pattern(phrase: str) -> tuple[tuple[int, str], ...]:
    """A phrase's tokens with their offsets from its first word; leading and trailing stop words dropped."""
    tokens = [word.token for word in words(phrase)]
    first = next((i for i, token in enumerate(tokens) if token), None)
    if first is None:
        return ()
    return tuple((i - first, token) for i, token in enumerate(tokens) if token and i >= first)


def match_spans(text: str, terms: Iterable[str] = (), phrases: Iterable[str] = ()) -> list[tuple[int, int]]:
    """(start, end) of what to mark, in order and not overlapping.

    `terms`: plain query text (a whole unparsed query may be given as one term: each of
    its words counts alone); `phrases`: the text of each quoted phrase, marked only as a
    whole. The query-language parser passes its terms and phrases apart.
    """
    found = words(text)
    tokens = {word.token for term in terms for word in words(term) if word.token}
    spans = [(w.start, w.end) for w in found if w.token in tokens]
    for phrase in phrases:
        spans += _phrase_spans(found, _pattern(phrase))
    return _merged(spans)


def _phrase_spans(found: Sequence[Word], pattern: tuple[tuple[int, str], ...]) -> list[tuple[int, int]]:
    if not pattern:
        return []
    last = pattern[-1][0]
    return [
        (found[start].start, found[start + last].end)
        for start in range(len(found) - last)
        if all(found[start + offset].token == token for offset, token in pattern)
    ]


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, with a word inside a phrase's span taken into the phrase."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged
