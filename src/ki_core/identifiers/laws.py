"""The law table (ki_core/data/laws.json): abbreviations, full names and EU acts, loaded once."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib.resources import files


@dataclass(frozen=True)
class Law:
    """A law or EU act as cited: `citation` is the normalized name that ends a reference."""

    abbr: str
    celex: str | None = None
    cite_as: str | None = None
    article_celex_prefix: str | None = None
    point_articles: frozenset[str] = frozenset()

    @property
    def is_eu(self) -> bool:
        return self.cite_as is not None

    @property
    def citation(self) -> str:
        return self.cite_as or self.abbr


@dataclass(frozen=True)
class _LawTable:
    by_abbr: dict[str, Law]  # exact spelling of abbreviations, aliases, GII keys
    by_abbr_folded: dict[str, Law]
    by_name: dict[str, Law]  # casefolded full names and their inflected forms
    by_celex: dict[str, Law]
    # casefolded first word -> word counts of the names and abbreviations that start with it, longest first
    lengths: dict[str, tuple[int, ...]]


def name_key(words: Iterable[str]) -> str:
    return " ".join(w.replace(",", "") for w in words).casefold()


@cache
def law_table() -> _LawTable:
    raw = json.loads(files("ki_core.data").joinpath("laws.json").read_text(encoding="utf-8"))
    by_abbr: dict[str, Law] = {}
    by_name: dict[str, Law] = {}
    by_celex: dict[str, Law] = {}
    for entry in raw["laws"]:
        eu = entry.get("eu") or {}
        law = Law(
            abbr=entry["abbr"],
            celex=eu.get("celex"),
            cite_as=eu.get("cite_as"),
            article_celex_prefix=eu.get("article_celex_prefix"),
            point_articles=frozenset(eu.get("point_articles", ())),
        )
        for abbr in [entry["abbr"], *entry["aliases"], entry.get("gii")]:
            if abbr:
                by_abbr.setdefault(abbr, law)
        for name in entry["names"]:
            by_name.setdefault(name_key(name.split()), law)
        if law.celex and not law.article_celex_prefix:
            by_celex[law.celex] = law
    lengths: dict[str, set[int]] = {}
    for key in [*by_name, *by_abbr]:
        words = key.split()
        lengths.setdefault(name_key(words[:1]), set()).add(len(words))
    return _LawTable(
        by_abbr=by_abbr,
        by_abbr_folded={k.casefold(): v for k, v in by_abbr.items() if len(k) >= 4},
        by_name=by_name,
        by_celex=by_celex,
        lengths={k: tuple(sorted(v, reverse=True)) for k, v in lengths.items()},
    )


def normalize_law(name: str) -> str:
    """'SGB 5' -> 'SGB V', 'UWG 2004' -> 'UWG'; an unknown name is kept as given."""
    law = law_table().by_abbr.get(name.strip())
    return law.citation if law else name.strip()
