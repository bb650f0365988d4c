"""The court table (ki_core/data/courts.json) and the court named near an identifier.

Case numbers, ECLIs and register numbers all read their courts and register
codes from this one table, loaded once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib.resources import files


@dataclass(frozen=True)
class CourtTable:
    federal: dict[str, str]  # name or code -> code
    court_types: dict[str, str]  # "Amtsgericht" -> "AG"
    state_adjectives: dict[str, str]
    regions: tuple[str, ...]
    ecli_courts: dict[str, str]
    register_types: frozenset[str]
    register_types_needing_cue: frozenset[str]
    register_suffixes: tuple[str, ...]
    register_court_aliases: dict[str, str]
    az_prefixes: frozenset[str]
    az_chamberless: frozenset[str]
    az_register_courts: dict[str, str]
    az_not_registers: frozenset[str]
    az_suffixes: tuple[str, ...]
    az_bracket_suffixes: tuple[str, ...]
    az_outer_registers: tuple[str, ...]  # a court's register before a second one ("3 KLs" in "3 KLs 101 Js 4/18")
    az_inner_registers: frozenset[str]  # the second register, which carries the number
    ecli_registers: dict[str, str]
    not_laws: frozenset[str]  # court codes, journals and company forms: never a law's abbreviation


@cache
def court_table() -> CourtTable:
    raw = json.loads(files("ki_core.data").joinpath("courts.json").read_text(encoding="utf-8"))
    az = raw["case_number"]
    return CourtTable(
        federal={name: code for code, names in raw["federal"].items() for name in names},
        court_types=raw["court_types"],
        state_adjectives=raw["state_adjectives"],
        regions=tuple(raw["regions"]),
        ecli_courts=raw["ecli_courts"],
        register_types=frozenset(raw["register_types"]),
        register_types_needing_cue=frozenset(raw["register_types_needing_cue"]),
        register_suffixes=tuple(raw["register_suffixes"]),
        register_court_aliases=raw["register_court_aliases"],
        az_prefixes=frozenset(az["prefixes"]),
        az_chamberless=frozenset(az["chamberless_registers"]),
        az_register_courts=az["register_courts"],
        az_not_registers=frozenset(az["not_registers"]),
        az_suffixes=tuple(az["suffixes"]),
        az_bracket_suffixes=tuple(az["bracket_suffixes"]),
        az_outer_registers=tuple(az["outer_registers"]),
        az_inner_registers=frozenset(az["inner_registers"]),
        ecli_registers={k: v for k, v in raw["ecli_registers"].items() if not k.startswith("_")},
        not_laws=frozenset(
            [*raw["federal"], *raw["court_types"].values(), "ArbG", "LSG", "LAG"]
            + raw["not_laws"]["journals"]
            + raw["not_laws"]["company_forms"]
        ),
    )


def alternation(words: Iterable[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


# a town as courts are named: "Köln", "Berlin-Charlottenburg", "Frankfurt am Main", "Frankfurt (Oder)";
# the word after "am"/"im" is a river or a region, never a register or a word of legal prose ("Amtsgericht
# Köln im Handelsregister", "Amtsgericht Hamburg im Verfahren").
_NOT_A_REGION = r"(?![\wäöüß]*register\b|(?:Übrigen|Verfahren|Wege|Rahmen|Namen|Auftrag|Jahre?|Termin|Zuge|Falle?|Ergebnis|Hinblick|Beschluss|Urteil)\b)"
PLACE = (
    r"(?:Bad\s)?[A-ZÄÖÜ][a-zäöüß][\wäöüß]*(?:-[A-ZÄÖÜ][\wäöüß]+)*"
    rf"(?:\s(?:am|an der|im|in der|ob der)\s{_NOT_A_REGION}[A-ZÄÖÜ][\wäöüß]+|\s?\([A-ZÄÖÜ][\wäöüß]+\))?"
)


@cache
def _court_pattern() -> re.Pattern[str]:
    courts = court_table()
    types = alternation([*courts.court_types, *courts.court_types.values()])
    adjectives = alternation(courts.state_adjectives)
    regions = alternation(courts.regions)
    federal = alternation(courts.federal)
    return re.compile(
        rf"(?P<adj>{adjectives})\s+(?P<atype>{types})(?![\w])"
        rf"|(?P<rtype>{types})\s+(?P<region>{regions})(?![\w])"
        rf"|(?P<ptype>{types})\s+(?P<place>{PLACE})"
        rf"|(?<![\w])(?P<federal>{federal})(?![\wäöü])"
    )


def court_before(text: str, start: int) -> str | None:
    last = None
    for last in _court_pattern().finditer(text, max(0, start - 100), start):
        pass
    return _court_name(last) if last else None


def _court_name(m: re.Match[str]) -> str:
    courts = court_table()
    if m.group("federal"):
        return courts.federal[m.group("federal")]
    kind = m.group("atype") or m.group("rtype") or m.group("ptype")
    code = courts.court_types.get(kind, kind)
    if m.group("adj"):
        return f"{code} {courts.state_adjectives[m.group('adj')]}"
    return f"{code} {m.group('region') or m.group('place')}"
