"""The document text as the page shows it: the hit's passage marked, statute references linked.

The text comes from GET /v1/documents/{id}/text (the API's access check); this
module only decides how a part of it is drawn. A statute reference links to
its section's page when a loaded corpus holds that section (statutes are
public: the corpus units are read directly).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote

from markupsafe import Markup, escape
from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from ki_core.identifiers import extract
from ki_core.models.corpora import CorpusUnit
from ki_query.reading import DEFAULT_TEXT_CHARS, MAX_TEXT_CHARS
from ki_query.web.render import highlight


@dataclass(frozen=True)
class Link:
    start: int
    end: int
    href: str


@dataclass(frozen=True)
class TextWindow:
    """Which characters of a version the page asks for: the page around a hit's passage, or an offset."""

    offset: int
    limit: int

    @classmethod
    def around(cls, offset: int | None, passage: tuple[int, int] | None) -> TextWindow:
        """An explicit offset wins; else the page of DEFAULT_TEXT_CHARS that holds the passage's start,
        stretched to its end."""
        if offset is not None or passage is None:
            return cls(offset or 0, DEFAULT_TEXT_CHARS)
        start = passage[0] - passage[0] % DEFAULT_TEXT_CHARS
        return cls(start, min(max(DEFAULT_TEXT_CHARS, passage[1] - start), MAX_TEXT_CHARS))


def statute_href(corpus_id: str, container: str, section: str) -> str:
    return f"/statutes/{quote(corpus_id, safe='')}/{quote(container, safe='')}/{quote(section, safe='')}"


def statute_links(session: Session, text: str) -> list[Link]:
    """A link per statute reference in `text` whose section a loaded corpus holds (first corpus by id)."""
    found = [i for i in extract(text) if i.kind == "statute" and i.law and i.section]
    if not found:
        return []
    wanted = {(i.law, i.section) for i in found}
    rows = session.execute(
        select(CorpusUnit.corpus_id, CorpusUnit.container_id, CorpusUnit.section_id)
        .where(tuple_(CorpusUnit.container_id, CorpusUnit.section_id).in_(sorted(wanted)))
        .distinct()
        .order_by(CorpusUnit.corpus_id)
    )
    loaded: dict[tuple[str, str], str] = {}
    for corpus_id, container, section in rows:
        loaded.setdefault((container, section), corpus_id)
    links: dict[int, Link] = {}
    for identifier in found:
        corpus_id = loaded.get((identifier.law, identifier.section))
        if corpus_id is not None:
            # "§§ 535, 546 BGB" is one span for two norms: it links to the first.
            links.setdefault(identifier.start, Link(identifier.start, identifier.end,
                                                    statute_href(corpus_id, identifier.law, identifier.section)))
    return sorted(links.values(), key=lambda link: link.start)


def section_units(session: Session, corpus_id: str, container: str, section: str) -> list[CorpusUnit]:
    """The units of one statute section in text order (its Absätze); none: no such section."""
    return list(session.scalars(
        select(CorpusUnit)
        .where(CorpusUnit.corpus_id == corpus_id, CorpusUnit.container_id == container, CorpusUnit.section_id == section)
        .order_by(CorpusUnit.position)
    ))


def text_markup(text: str, offset: int, passage: tuple[int, int] | None, query: str, links: Iterable[Link]) -> Markup:
    """The text escaped; the passage (offsets in the whole version) in spans of class "passage", the
    first with id="passage" (the hit's link scrolls there) and the query's words marked inside it;
    statute references as links. Every piece is wrapped on its own, so the tags always nest."""
    start, end = (max(passage[0] - offset, 0), max(passage[1] - offset, 0)) if passage else (0, 0)
    links = list(links)
    cuts = sorted({0, len(text), start, end, *(b for link in links for b in (link.start, link.end))})
    pieces: list[Markup] = []
    first = True
    for left, right in zip(cuts, cuts[1:]):
        if right > len(text) or left >= right:
            continue
        piece = text[left:right]
        inside = start <= left and right <= end
        drawn = highlight(piece, query) if inside else escape(piece)
        if inside:
            drawn = Markup('<span class="passage"{}>{}</span>').format(Markup(' id="passage"') if first else "", drawn)
            first = False
        link = next((k for k in links if k.start <= left and right <= k.end), None)
        if link is not None:
            drawn = Markup('<a class="statute" href="{}">{}</a>').format(link.href, drawn)
        pieces.append(drawn)
    return Markup("").join(pieces)
