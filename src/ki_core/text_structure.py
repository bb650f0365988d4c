"""The structure a converted text shows by itself: numbered headings, the parts of a decision, pages.

One reading of "§ 6 Haftung" for both sides: the metadata stage cuts its
clauses at these headings, and the query side serves a document section by
section at the same places. Only what the text says is found here (no model).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# "§ 6 Haftung", "Art. 3 Gerichtsstand", "2.1 Lieferung"; a Markdown heading mark may precede it.
_NUMBERED_HEADING = re.compile(
    r"^(?:#{1,6}[ \t]+)?(?:(?P<para>§\s*\d+[a-z]?)|(?P<art>Art(?:ikel|\.)\s*\d+[a-z]?)"
    r"|(?:Ziffer\s+|Ziff\.\s*)?(?P<num>\d{1,2}(?:\.\d{1,2}){0,2}))"
    r"\.?[ \t]+(?P<heading>[A-ZÄÖÜ][^\n]{1,80})$",
    re.MULTILINE,
)
# The parts of a German court decision, each alone on its line.
_DECISION_PART = re.compile(
    r"^[ \t]*(?P<part>Leitsatz|Leitsätze|Tenor|Tatbestand|Entscheidungsgründe|Gründe)[ \t]*:?[ \t]*$",
    re.MULTILINE,
)
# A heading is short and not a sentence: numbered list items in running text are not headings.
MAX_HEADING_WORDS = 8


@dataclass(frozen=True)
class Heading:
    """A heading line: its locus ("§ 6"), its words ("Haftung"), where the line starts and ends."""

    locus: str
    title: str
    start: int
    end: int


@dataclass(frozen=True)
class Section:
    """A stretch of the text: a heading's up to the next one, or a page of a PDF."""

    id: str
    kind: str  # "heading", "part" or "page"
    title: str
    start: int
    end: int


def clause_headings(text: str, *, markdown: bool = True) -> list[Heading]:
    """"§ N", "Art. N" or "N." headings of the family the text uses most prominently.

    § headings beat numbered ones: "1." inside a § is a paragraph number, not a clause.
    `markdown`: also headings behind a Markdown mark ("## § 5 Gewährleistung").
    """
    matches = [
        m for m in _NUMBERED_HEADING.finditer(text)
        if _is_heading(m.group("heading")) and (markdown or text[m.start()] != "#")
    ]
    families = {_family(m) for m in matches}
    family = next((f for f in ("para", "art", "num") if f in families), None)
    return [
        Heading(locus=_locus(m), title=m.group("heading").strip(), start=m.start(), end=m.end())
        for m in matches
        if _family(m) == family
    ]


def sections_of(text: str, page_starts: Sequence[int] | None = None) -> list[Section]:
    """The headings' sections (each up to the next heading, the last to the end), the decision's
    parts, and a section per PDF page when the converter recorded where pages start."""
    sections = _heading_sections(text) + _part_sections(text)
    sections.sort(key=lambda s: s.start)
    return sections + page_sections(len(text), page_starts or ())


def page_sections(total: int, page_starts: Sequence[int]) -> list[Section]:
    bounds = [*page_starts, total]
    return [
        Section(id=f"page:{n}", kind="page", title=f"Seite {n}", start=start, end=bounds[n])
        for n, start in enumerate(page_starts, start=1)
    ]


def _heading_sections(text: str) -> list[Section]:
    headings = clause_headings(text)
    ends = [h.start for h in headings[1:]] + [len(text)] if headings else []
    sections: dict[str, Section] = {}
    for heading, end in zip(headings, ends, strict=True):
        # A locus that repeats (a second "§ 1" in an annex) keeps its first place; ids stay unique.
        sections.setdefault(heading.locus, Section(
            id=heading.locus, kind="heading", title=f"{heading.locus} {heading.title}", start=heading.start, end=end,
        ))
    return list(sections.values())


def _part_sections(text: str) -> list[Section]:
    parts = list(_DECISION_PART.finditer(text))
    ends = [m.start() for m in parts[1:]] + [len(text)] if parts else []
    sections: dict[str, Section] = {}
    for match, end in zip(parts, ends, strict=True):
        name = match.group("part")
        sections.setdefault(name, Section(id=name, kind="part", title=name, start=match.start(), end=end))
    return list(sections.values())


def _is_heading(heading: str) -> bool:
    return len(heading.split()) <= MAX_HEADING_WORDS and not heading.rstrip().endswith((".", ",", ";", ":"))


def _family(match: re.Match[str]) -> str:
    return "para" if match.group("para") else "art" if match.group("art") else "num"


def _locus(match: re.Match[str]) -> str:
    if match.group("para"):
        return "§ " + re.sub(r"§\s*", "", match.group("para"))
    if match.group("art"):
        return "Art. " + re.sub(r"^Art(?:ikel|\.)\s*", "", match.group("art"))
    return f"Ziffer {match.group('num')}"
