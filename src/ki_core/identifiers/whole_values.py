"""What a chunk carries for `az:`/`norm:` filters and the court facet: whole normalized values.

A document's identifiers are normalized whole values ("§ 573c Abs. 1 Satz 2 BGB"). A filter
`norm:§ 573c BGB` must also find a document that cites only a part of that section, so a
statute or EU article reference is indexed with each of its ancestors ("§ 573c Abs. 1 BGB",
"§ 573c BGB"). Both backends index these values as one keyword field (`identifier_values`),
built here in one place; the identifier leg ranks on it (issue 44), each value once per
identifier it stands for (`value_occurrences`), so a filter sees the set and BM25 the count.

Courts come from the identifiers that name one (a case number's or ECLI's court), casefolded
so `gericht:bgh` finds "BGH".
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from .extraction import extract
from .model import Identifier


def identifier_values(identifiers: Iterable[str]) -> tuple[str, ...]:
    """Every value and, for statute and EU article references, each ancestor; in order, no repeats."""
    values: dict[str, None] = {}
    for value in identifiers:
        values[value] = None
        values.update(dict.fromkeys(_ancestors(value)))
    return tuple(values)


def value_occurrences(identifiers: Iterable[str]) -> tuple[str, ...]:
    """Each identifier's value and ancestors, repeated across identifiers: the identifier leg's term
    frequency is then how many of a chunk's identifiers lie at or below a value, so § 1004 Abs. 1
    (its own address and its section's) outweighs a § citing § 1004 once."""
    return tuple(value for identifier in dict.fromkeys(identifiers) for value in (identifier, *_ancestors(identifier)))


def courts_of(identifiers: Iterable[str]) -> tuple[str, ...]:
    """The casefolded courts the identifiers name ("bgh" for "VII ZR 123/19"), in order, no repeats."""
    return tuple(dict.fromkeys(normalized_court(court) for court in court_names(identifiers)))


def court_names(identifiers: Iterable[str]) -> tuple[str, ...]:
    """The courts as the identifiers name them ("BGH", "EuGH", "OLG München"), in order, no repeats."""
    return tuple(dict.fromkeys(court for value in identifiers if (court := _court(value))))


def normalized_court(name: str) -> str:
    return " ".join(name.split()).casefold()


@lru_cache(maxsize=65_536)
def _whole(value: str) -> Identifier | None:
    """The identifier that is the whole value, or None (a pasted file number the extractor does not know)."""
    found = [i for i in extract(value) if i.start == 0 and i.end == len(value)]
    return found[0] if found else None


@lru_cache(maxsize=65_536)
def _ancestors(value: str) -> tuple[str, ...]:
    """"§ 280 Abs. 1 Satz 2 BGB" -> ("§ 280 BGB", "§ 280 Abs. 1 BGB"): the section, then each
    level below it, as designator-value pairs between the section and the law."""
    found = _whole(value)
    if found is None or found.kind not in ("statute", "eu_reference") or not found.section or not found.law:
        return ()
    head, tail = f"{found.section} ", f" {found.law}"
    if not (value.startswith(head) and value.endswith(tail)):
        return ()
    parts = value[len(head) : -len(tail)].split()
    if len(parts) % 2:
        return (f"{found.section} {found.law}",)
    pairs = [" ".join(parts[i : i + 2]) for i in range(0, len(parts), 2)]
    return tuple(" ".join([found.section, *pairs[:depth], found.law]) for depth in range(len(pairs)))


@lru_cache(maxsize=65_536)
def _court(value: str) -> str | None:
    found = _whole(value)
    return " ".join(found.court.split()) if found is not None and found.court else None
