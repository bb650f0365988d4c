"""The query language's typed tree, as the search box's text says it (before any field is resolved).

`parse_query` (ki_query.query_language.parser) builds it once; `compile` (…compiler) turns it
into the index's backend-neutral constraint. Every node keeps the position in the query where
it starts, so an error about it can say where.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Literal

FieldName = Literal["type", "project", "matter", "date", "court", "docket", "statute"]
# German and English names, both accepted; the German one is what messages say.
FIELD_NAMES: dict[str, FieldName] = {
    "typ": "type",
    "type": "type",
    "projekt": "project",
    "project": "project",
    "mandat": "matter",
    "matter": "matter",
    "datum": "date",
    "date": "date",
    "gericht": "court",
    "court": "court",
    "az": "docket",
    "docket": "docket",
    "norm": "statute",
    "statute": "statute",
}
GERMAN_FIELD = {"type": "typ", "project": "projekt", "matter": "mandat", "date": "datum", "court": "gericht",
                "docket": "az", "statute": "norm"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Word:
    """A word of text; the analyzer decides what it matches ("Müller/Schmidt" is two tokens in a row)."""

    text: str
    position: int


@dataclass(frozen=True, slots=True)
class Phrase:
    text: str
    position: int


@dataclass(frozen=True, slots=True)
class Wildcard:
    """`Kündig*`: words of the text starting with the prefix."""

    prefix: str
    position: int


@dataclass(frozen=True, slots=True)
class Field:
    name: FieldName
    value: str
    position: int


@dataclass(frozen=True, slots=True)
class DateSpan:
    """`datum:2019-01-01..2020-12-31`, either end open; undated documents never match."""

    start: date | None
    end: date | None
    position: int


@dataclass(frozen=True, slots=True)
class Not:
    child: Node
    position: int


@dataclass(frozen=True, slots=True)
class All:
    """Every child holds (the implicit AND between words)."""

    children: tuple[Node, ...]
    position: int


@dataclass(frozen=True, slots=True)
class Any:
    children: tuple[Node, ...]
    position: int


Node = Word | Phrase | Wildcard | Field | DateSpan | Not | All | Any


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """The query as typed and as a tree. `plain`: no operator, phrase, wildcard or field, so it
    runs as today's ranked hybrid on its text; otherwise it is a boolean set."""

    text: str
    tree: Node | None
    plain: bool

    def positive_text(self) -> str:
        """The words and phrases that are not excluded: what the semantic leg embeds."""
        return " ".join(_positive_words(self.tree)) if self.tree is not None else ""

    def fields(self, name: FieldName) -> list[Field]:
        """The fields asked for, not the excluded ones: what the identifier leg ranks on (`-az:X` is
        no reason to rank X)."""
        return [node for node in _walk(self.tree) if isinstance(node, Field) and node.name == name]


def _walk(node: Node | None):
    """Every node outside an exclusion."""
    if node is None or isinstance(node, Not):
        return
    yield node
    if isinstance(node, All | Any):
        for child in node.children:
            yield from _walk(child)


def _positive_words(node: Node | None) -> list[str]:
    if isinstance(node, Word | Phrase):
        return [node.text]
    if isinstance(node, Wildcard):
        return [node.prefix]
    if isinstance(node, All | Any):
        return [word for child in node.children for word in _positive_words(child)]
    return []


class QuerySyntaxError(ValueError):
    """A query the language cannot read: HTTP 400 and CLI exit 2 with the position and a German
    message; never a silent fallback to free text."""

    def __init__(self, message: str, position: int, hint: str) -> None:
        self.message = message
        self.position = position
        self.hint = hint
        super().__init__(f"{message} (Stelle {position + 1})")
