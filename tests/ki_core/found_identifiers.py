"""What `extract` finds, in the two shapes the identifier tests compare against."""

from __future__ import annotations

from collections import Counter

from ki_core.identifiers import extract


def found(text: str, **context: str) -> list[str]:
    return [i.normalized for i in extract(text, **context)]


def found_kinds(text: str, **context: str) -> Counter[tuple[str, str]]:
    return Counter((i.kind, i.normalized) for i in extract(text, **context))
