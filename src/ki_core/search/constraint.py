"""A boolean query both backends execute with the same meaning (amendments.md 6).

The query side parses the search box once (ki_query.query_language) and resolves its fields;
what reaches the index is this tree of text and keyword conditions. Each backend compiles
it into its own clauses (tantivy queries, an OpenSearch bool) and puts it into the strict
filter of every leg, so no leg can bring a chunk outside the set.

Text conditions carry their tokens as the embedded analyzer cut them (position, token):
tantivy matches those terms at those positions; OpenSearch reads the same text through its
copy of the analyzer (ki_german) with match_phrase.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

# Syntax field -> the indexed keyword field it is a term on, in both backends.
CONSTRAINT_KEYWORD_FIELDS = frozenset(
    {"doc_type_ancestors", "project_id", "matter_id", "identifier_values", "courts", "document_version_id"}
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextMatch(_Frozen):
    """A word or phrase of `text`: its tokens in a row (stop words leave their gap)."""

    kind: Literal["text"] = "text"
    text: str
    tokens: tuple[tuple[int, str], ...] = Field(min_length=1)


class TextPrefix(_Frozen):
    """A trailing wildcard: an indexed term of `text` starting with `prefix` (lowercase, umlauts
    folded as the Snowball stemmer folds them, so "Kündig*" finds "kündigung" -> "kundig")."""

    kind: Literal["prefix"] = "prefix"
    prefix: str = Field(min_length=1)


class KeywordMatch(_Frozen):
    """One of the values on a keyword field (an unknown name resolves to no value: matches nothing)."""

    kind: Literal["keyword"] = "keyword"
    field: str
    values: tuple[str, ...]


class KeywordPrefix(_Frozen):
    """A value on a keyword field starting with `prefix`: `norm:§ 573c` without a law is every
    whole value "§ 573c <law>" and "§ 573c Abs. 1 <law>" (the prefix ends in a space, so
    "§ 573" never reaches "§ 573c")."""

    kind: Literal["keyword_prefix"] = "keyword_prefix"
    field: str
    prefix: str = Field(min_length=1)


class KeywordPattern(_Frozen):
    """A value on a keyword field matching `pattern` whole: what no list of values or single
    prefix says (`norm:§§ 573-575` is "§ 573", "§ 573a" … "§ 575" in any law; `norm:DSGVO` the act
    and every article of it). The pattern is written in the regular-expression syntax tantivy
    (Rust), OpenSearch (Lucene `regexp`) and Python read alike: literals through
    `pattern_literal`, `[a-z]`, `?`, `.`, `*`, `+`, `( | )`, nothing else."""

    kind: Literal["keyword_pattern"] = "keyword_pattern"
    field: str
    pattern: str = Field(min_length=1)


# Characters with a meaning in one of the three dialects; `<` and `>` are left out, since Rust
# reads an escaped one as a word boundary (no identifier value holds either).
_PATTERN_META = re.compile(r'([\\.+*?()|\[\]{}^$#&~@"-])')


def pattern_literal(text: str) -> str:
    """`text` as a literal inside a KeywordPattern."""
    if "<" in text or ">" in text:
        raise ValueError(f"no literal for {text!r} in the shared pattern syntax")
    return _PATTERN_META.sub(r"\\\1", text)


class DateMatch(_Frozen):
    """doc_date inside [start, end], an end may be open; a chunk without doc_date never matches."""

    kind: Literal["date"] = "date"
    start: date | None = None
    end: date | None = None


class AllOf(_Frozen):
    """Every `must` and no `must_not`; with no `must`, everything but the `must_not`."""

    kind: Literal["all"] = "all"
    must: tuple[Constraint, ...] = ()
    must_not: tuple[Constraint, ...] = ()


class AnyOf(_Frozen):
    kind: Literal["any"] = "any"
    any: tuple[Constraint, ...] = Field(min_length=1)


Constraint = Annotated[
    Union[TextMatch, TextPrefix, KeywordMatch, KeywordPrefix, KeywordPattern, DateMatch, AllOf, AnyOf],
    Field(discriminator="kind"),
]
AllOf.model_rebuild()
AnyOf.model_rebuild()


def scores_text(node: Constraint) -> bool:
    """Whether a positive text condition is in the tree (else the lexical leg lists the set unscored)."""
    if isinstance(node, TextMatch | TextPrefix):
        return True
    if isinstance(node, AllOf):
        return any(scores_text(child) for child in node.must)
    if isinstance(node, AnyOf):
        return any(scores_text(child) for child in node.any)
    return False
