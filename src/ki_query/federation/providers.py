"""The providers the federation ships: law-mention router and named corpora, anchor register, Verweise.

All of them are data-driven so the federation stays a search layer: the law names come
from the identifiers' law table (ki_core/data/laws.json), anchors from a JSON file the
operator maintains, references from the identifiers extractor.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from ki_core.identifiers import extract, normalize_law
from ki_query.federation.errors import ProviderConfigError
from ki_query.federation.retriever import ADDRESS, Address, typed_entries

# A range "§§ 11-14" is expanded to its sections only when it is short: a long range is a
# block of rules, and the federation fetches at most max_verweis_normen targets anyway.
MAX_RANGE_EXPANSION = 10
_RANGE = re.compile(r"^(§§|Art\.)\s*(\d+)\s*-\s*(\d+)$")


# ------------------------------------------------------------------ law names


@cache
def _law_entries() -> dict[str, dict[str, Any]]:
    """Every spelling (abbreviation, alias, GII key) -> its law table entry."""
    raw = json.loads(files("ki_core.data").joinpath("laws.json").read_text(encoding="utf-8"))
    entries: dict[str, dict[str, Any]] = {}
    for entry in raw["laws"]:
        for spelling in (entry["abbr"], *entry.get("aliases", ()), entry.get("gii")):
            if spelling:
                entries.setdefault(spelling, entry)
    return entries


def law_spellings(container: str) -> tuple[set[str], set[str]]:
    """(abbreviations matched case-sensitively, names matched case-insensitively) of a container.

    A container the law table does not know ("Rahmenvertrag", "Anlage 11") is named by itself.
    """
    entry = _law_entries().get(container.strip()) or _law_entries().get(normalize_law(container))
    if entry is None:
        return set(), {container}
    abbreviations = {entry["abbr"], *entry.get("aliases", ()), container}
    if entry.get("gii"):
        abbreviations.add(entry["gii"])
    return abbreviations, {*entry.get("names", ()), entry.get("title") or entry["abbr"]}


def _alternation(spellings: Iterable[str]) -> str:
    # Longest first, flexible inner whitespace, whole words only ("GG" must not match "GGB").
    ordered = sorted({s for s in spellings if s.strip()}, key=len, reverse=True)
    return "|".join(r"\s+".join(map(re.escape, s.split())) for s in ordered)


def _mention_pattern(abbreviations: Iterable[str], names: Iterable[str]) -> re.Pattern[str] | None:
    parts = []
    if abbr := _alternation(abbreviations):
        parts.append(f"(?-i:{abbr})")
    if name := _alternation(names):
        parts.append(f"(?:{name})")
    if not parts:
        return None
    return re.compile(rf"(?<!\w)(?:{'|'.join(parts)})(?!\w)", re.IGNORECASE)


class CorpusMentions:
    """Which corpora a question names: by a law it holds (abbreviation or name), its id or title.

    Used as the federation's `named_corpora` provider and inside the router.
    """

    name = "law-mentions"

    def __init__(self, corpora: Mapping[str, Iterable[str]], titles: Mapping[str, str | None] | None = None):
        self.patterns: dict[str, re.Pattern[str]] = {}
        for corpus_id, containers in corpora.items():
            abbreviations: set[str] = set()
            names = {corpus_id, *([titles[corpus_id]] if titles and titles.get(corpus_id) else [])}
            for container in containers:
                abbr, full = law_spellings(container)
                abbreviations |= abbr
                names |= full
            pattern = _mention_pattern(abbreviations, names)
            if pattern is not None:
                self.patterns[corpus_id] = pattern

    @classmethod
    def from_registry(cls, registry: Any) -> CorpusMentions:
        specs = {corpus_id: registry.spec(corpus_id) for corpus_id in registry.available()}
        return cls(
            {c: getattr(s, "containers", ()) or () for c, s in specs.items()},
            {c: getattr(s, "title", None) for c, s in specs.items()},
        )

    def __call__(self, question: str, corpus_ids: Sequence[str]) -> list[str]:
        return [c for c in corpus_ids if c in self.patterns and self.patterns[c].search(question)]


class MentionRouter:
    """Route to the corpora the question names (plus the always-asked ones); else to all."""

    name = "law-mention-router"

    def __init__(self, mentions: CorpusMentions, *, always: Iterable[str] = ()):
        self.mentions = mentions
        self.always = tuple(always)

    def __call__(self, question: str, corpus_ids: Sequence[str]) -> list[str]:
        named = self.mentions(question, corpus_ids)
        if not named:
            return list(corpus_ids)
        return named + [c for c in self.always if c in corpus_ids and c not in named]


# ------------------------------------------------------------------ anchors


class AnchorRegister:
    """Question patterns -> addresses that must be in the context, read from a JSON file.

    Format (see ki_core/data/anchors.example.json; an address is read as the federation reads one):
    {"anchors": [{"pattern": "<regex, case-insensitive>", "addresses": [
        {"corpus_id": ..., "container_id": ..., "section_id": ..., "subsection": ..., "max_chunks": ...}]}]}
    """

    name = "anchor-register"

    def __init__(self, rules: Sequence[tuple[re.Pattern[str], tuple[Address, ...]]]):
        self.rules = list(rules)

    @classmethod
    def from_file(cls, path: str | Path) -> AnchorRegister:
        path = Path(path)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ProviderConfigError(f"anchors file {path}: {exc}") from None
        return cls([_anchor_rule(path, i, entry) for i, entry in enumerate(raw.get("anchors", ()))])

    def __call__(self, question: str) -> list[Address]:
        found = [a for pattern, addresses in self.rules if pattern.search(question) for a in addresses]
        return list(dict.fromkeys(found))


def _anchor_rule(path: Path, index: int, entry: Mapping[str, Any]) -> tuple[re.Pattern[str], tuple[Address, ...]]:
    where = f"anchors file {path}, anchors[{index}]"
    try:
        pattern = re.compile(entry["pattern"], re.IGNORECASE)
        addresses, problems = typed_entries(entry["addresses"], ADDRESS, "addresses")
    except KeyError as exc:
        raise ProviderConfigError(f"{where}: missing key {exc}") from None
    except (re.error, TypeError) as exc:
        raise ProviderConfigError(f"{where}: {exc}") from None
    if problems:
        raise ProviderConfigError(f"{where}: addresses " + " | ".join(problems))
    return pattern, tuple(addresses)


# ------------------------------------------------------------------ Verweise


class StatuteVerweise:
    """The § references in the hits' texts, resolved to addresses in the corpora that hold the law.

    A bare "§ 10" is read in the hit's own container (context law), so "§ 10" in a contract
    resolves to the contract, not to § 10 of some statute. Self-references are skipped.
    """

    name = "statute-verweise"

    def __init__(self, containers: Mapping[str, Iterable[str]]):
        self.containers = {corpus: {normalize_law(c) for c in names} for corpus, names in containers.items()}

    @classmethod
    def from_registry(cls, registry: Any) -> StatuteVerweise:
        return cls({c: getattr(registry.spec(c), "containers", ()) or () for c in registry.available()})

    def __call__(self, hits: Sequence[Mapping[str, Any]], corpus_ids: Sequence[str]) -> list[Address]:
        found: list[Address] = []
        for hit in hits:
            found += self.references_of(hit, corpus_ids)
        return list(dict.fromkeys(found))

    def references_of(self, hit: Mapping[str, Any], corpus_ids: Sequence[str]) -> list[Address]:
        meta = hit.get("metadata") or {}
        own_corpus = hit.get("corpus_id") or meta.get("corpus_id")
        container, section = meta.get("container_id"), meta.get("section_id")
        addresses = []
        for ident in extract(str(hit.get("text") or ""), context_law=container, context_section=section):
            if ident.kind != "statute" or not ident.section or not ident.law:
                continue
            corpus = self._corpus_holding(ident.law, own_corpus, corpus_ids)
            if corpus is None:
                continue
            law = normalize_law(ident.law)
            for target in expand_sections(ident.section):
                if (law, target) == (normalize_law(container or ""), section):
                    continue
                addresses.append(Address(corpus, target, law, _plain_subsection(ident.absatz)))
        return addresses

    def _corpus_holding(self, law: str, own: str | None, corpus_ids: Sequence[str]) -> str | None:
        law = normalize_law(law)
        candidates = ([own] if own in corpus_ids else []) + [c for c in corpus_ids if c != own]
        return next((c for c in candidates if law in self.containers.get(c, ())), None)


def expand_sections(section: str) -> list[str]:
    """'§§ 11-14' -> § 11 .. § 14 (short numeric ranges only); '§ 31' -> [§ 31]."""
    match = _RANGE.match(section.strip())
    if not match:
        return [section.replace("§§", "§").split("-")[0].strip()]
    sign = "§" if match.group(1) == "§§" else "Art."
    low, high = int(match.group(2)), int(match.group(3))
    if high < low or high - low >= MAX_RANGE_EXPANSION:
        return [f"{sign} {low}"]
    return [f"{sign} {n}" for n in range(low, high + 1)]


def _plain_subsection(absatz: str | None) -> str | None:
    """A single Absatz ('2', '1a') addresses a subsection; a range addresses the whole section."""
    if not absatz or "-" in absatz or "," in absatz:
        return None
    return absatz
