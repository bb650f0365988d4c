"""Find and normalize legal identifiers in German legal text.

Five kinds: statute references (§/Art. chains), case numbers (Aktenzeichen),
ECLIs, commercial/association register numbers and EU references (acts,
articles of EU acts, EuGH cases). Normalization follows the normative rules in
shared/data/README.md: one statute entry per norm in German citation order
("§ 573c Abs. 1 Satz 2 BGB"), ranges kept as ranges, "/" as the year separator
of a case number, complete upper-case ECLIs.

Each kind is found by a precompiled trigger regex and then parsed locally, so
the cost is linear in the text. The law table and court codes are data
(ki_core/data/laws.json, courts.json), loaded once.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from importlib.resources import files
from typing import Literal

from pydantic import BaseModel, ConfigDict

Kind = Literal["statute", "case_number", "ecli", "register_number", "eu_reference"]


class Identifier(BaseModel):
    """One identifier found in a text; `text[start:end] == as_written`.

    Kind-specific parts are None where they do not apply: statute and EU
    article references fill law/section/absatz/satz/nummer/buchstabe, case
    numbers and ECLIs court/date, register numbers register_type/number/court,
    EU references celex where it is determinable.
    """

    model_config = ConfigDict(frozen=True)

    kind: Kind
    normalized: str
    as_written: str
    start: int
    end: int
    law: str | None = None
    section: str | None = None
    absatz: str | None = None
    satz: str | None = None
    nummer: str | None = None
    buchstabe: str | None = None
    court: str | None = None
    date: str | None = None
    year: int | None = None
    number: str | None = None
    register_type: str | None = None
    case_number: str | None = None
    celex: str | None = None


def extract(
    text: str, *, context_law: str | None = None, context_section: str | None = None
) -> list[Identifier]:
    """All identifiers in `text`, ordered by position.

    `context_law` is the law a bare "§ 5" refers to (the law being read);
    `context_section` (e.g. "§ 204") additionally resolves relative references
    such as "Absatz 1 Nr. 6a", which are skipped without it.
    """
    # An ECLI hides what its ordinal looks like; statutes and EU references come next;
    # a case number or register number inside an earlier span is part of that span.
    found = list(_scan_eclis(text))
    statutes = _outside(_scan_statutes(text, context_law, context_section), found)
    acts = _outside(_scan_eu_acts(text), found)
    found += statutes + _dedupe_eu_acts(acts, statutes) + _outside(_scan_eu_cases(text), found)
    found += _outside(_scan_case_numbers(text), found)
    found += _outside(_scan_registers(text), found)
    return sorted(found, key=lambda i: (i.start, i.end, i.kind))


def _outside(candidates: Iterable[Identifier], taken: list[Identifier]) -> list[Identifier]:
    index = _SpanIndex((i.start, i.end) for i in taken)
    return [i for i in candidates if not index.overlaps(i.start, i.end)]


def identifiers_text(ids: Iterable[Identifier]) -> str:
    """The normalized forms, space-joined: the text of the search index's identifier leg."""
    return " ".join(i.normalized for i in ids)


class _SpanIndex:
    """Answers 'does [start, end) overlap a taken span' in O(log n)."""

    def __init__(self, spans: Iterable[tuple[int, int]]) -> None:
        merged: list[list[int]] = []
        for s, e in sorted(spans):
            if merged and s < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        self._starts = [s for s, _ in merged]
        self._ends = [e for _, e in merged]

    def overlaps(self, start: int, end: int) -> bool:
        i = bisect_right(self._starts, end - 1) - 1
        return i >= 0 and self._ends[i] > start


# ---------------------------------------------------------------- data


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


def _name_key(words: Iterable[str]) -> str:
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
            by_name.setdefault(_name_key(name.split()), law)
        if law.celex and not law.article_celex_prefix:
            by_celex[law.celex] = law
    lengths: dict[str, set[int]] = {}
    for key in [*by_name, *by_abbr]:
        words = key.split()
        lengths.setdefault(_name_key(words[:1]), set()).add(len(words))
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


@dataclass(frozen=True)
class _CourtTable:
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
    ecli_registers: dict[str, str]
    not_laws: frozenset[str]  # court codes, journals and company forms: never a law's abbreviation


@cache
def court_table() -> _CourtTable:
    raw = json.loads(files("ki_core.data").joinpath("courts.json").read_text(encoding="utf-8"))
    az = raw["case_number"]
    return _CourtTable(
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
        ecli_registers={k: v for k, v in raw["ecli_registers"].items() if not k.startswith("_")},
        not_laws=frozenset(
            [*raw["federal"], *raw["court_types"].values(), "ArbG", "LSG", "LAG"]
            + raw["not_laws"]["journals"]
            + raw["not_laws"]["company_forms"]
        ),
    )


def _alternation(words: Iterable[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


# ---------------------------------------------------------------- statutes

# levels of a citation; PART is "Art. 13 Teil B"
SEC, SUBSEC, PART, ABS, UABS, SATZ, HS, NR, BUCHST, DBUCHST, ALT = range(11)

_WS = re.compile(r"\s*")
# Trigger regexes start with a literal or a character class so that `re` can skip ahead fast;
# the "not inside a word" condition is checked in Python (`_at_word_start`), not by a lookbehind.
_STATUTE_HEAD = re.compile(
    r"(?=[§PA])(?:(?P<par>§§?|Paragra(?:ph|f)(?:en|s)?\b)(?=\s*\d)|(?P<art>Art(?:ikeln?s?|t?\.|icles?)?)(?=\s*\d))"
)
_REL_HEAD = re.compile(r"\b(?:Absatz(?:es)?|Absätzen?|Abs\.)(?=\s*\d)")
_SEC_NUM = re.compile(r"(\d{1,4})(?:([a-z])(?![a-zäöüß])|\s([a-z])(?![\w.]))?(?!\d|[./]\d)")
_NUM_VALUE = re.compile(r"(\d{1,3}[a-z]?)(?![a-zäöüß\d]|[./]\d)")
_LETTER_VALUE = re.compile(r"(?P<v>([a-z])\2?)(?![a-zäöüß])(?:\)(?=\s))?")
_PART_VALUE = re.compile(r"(?P<v>[A-Z]|[IVX]{1,4}|\d{1,2})(?![\w])")
_ROMAN = re.compile(r"(X{0,2}(?:IX|IV|V?I{0,3}))(?![\w.])")
_DESIGNATOR = re.compile(
    r"(?:(?P<uabs>U(?:nter)?[Aa]bs(?:atz|\.)?)"
    r"|(?P<abs>Abs(?:atzes|atz|ätzen|ätze|\.)?)"
    r"|(?P<hs>Halbs(?:atzes|atz|\.)|Hs\.?|HS\.?|Hbs\.)"
    r"|(?P<satz>S(?:atzes|atz|ätzen|ätze|\.)?)"
    r"|(?P<nr>Nrn?\.?|Nummern?|Ziff(?:ern|er|\.)?)"
    r"|(?P<dbuchst>Doppelbuchst(?:aben|abe|\.)|Dbuchst\.)"
    r"|(?P<buchst>Buchst(?:aben|abe|\.)?|lit\.?|Bst\.)"
    r"|(?P<alt>Alt(?:ernative|\.)?|Var(?:iante|\.)?)"
    r"|(?P<teil>Teil))"
    r"(?:(?<=\.)|(?![A-Za-zäöüßÄÖÜ]))\s*"
)
_DESIGNATOR_LEVELS = {
    "abs": (ABS, "Abs."),
    "uabs": (UABS, "UAbs."),
    "satz": (SATZ, "Satz"),
    "hs": (HS, "Halbsatz"),
    "nr": (NR, "Nr."),
    "buchst": (BUCHST, "Buchst."),
    "dbuchst": (DBUCHST, "Doppelbuchst."),
    "alt": (ALT, "Alt."),
    "teil": (PART, "Teil"),
}
# "Satz 1 erster Halbsatz", "Abs. 1 zweite Alternative", "2. Alt."
_ORDINAL_DESIGNATOR = re.compile(
    r"\s*(?:(?P<word>erste|zweite|dritte|vierte)[rnsm]?|(?P<num>\d)\.)\s*"
    r"(?P<what>Halbsatz(?:es)?|Halbs\.|Hs\.|Alternative|Alt\.|Variante|Var\.)(?![\w])"
)
_ORDINALS = {"erste": "1", "zweite": "2", "dritte": "3", "vierte": "4"}
# "Nr. 3 a)": a letter item of a numbered item
_ENUM_LETTER = re.compile(r" ?(?P<v>[a-z])\)(?=[\s,;.])")
_LETTER_LEVELS = (BUCHST, DBUCHST)
_PAREN_VALUE = re.compile(r" ?\((?:(?P<num>\d{1,3}[a-z]?)|(?P<letter>[a-z]{1,2}))\)")
_NESTED_SEC = re.compile(r"\s*§\s*(\d{1,4}[a-z]?)(?!\d)")
_FF = re.compile(r"\s?(ff\.?|f\.)(?![\w])")
_RANGE = re.compile(r"\s*(?:bis(?![\w])|-|–|—)\s*")
_LIST_SEP = re.compile(
    r"\s*(?:,(?:\s*(?:und|oder|sowie|bzw\.)(?![\w]))?|(?:und|oder|sowie|bzw\.|u\.)(?![\w])"
    r"|i\.\s?V\.\s?(?:m\.|mit(?![\w]))|in Verbindung mit(?![\w])|iVm(?![\w]))\s*"
)
# a bare number followed by one of these is a quantity, not another norm ("§ 5 und 10 Jahre")
_QUANTITY_AFTER = re.compile(
    r"\s*(?:Jahre|Jahren|Monate|Monaten|Wochen|Tage|Tagen|Stunden|Prozent|Euro|EUR|DM|%)(?![\w])"
)
# "... und § 7c und 2. die Durchführung": "2." numbers the next item of an enumeration
_ENUMERATION_AFTER = re.compile(r"\.\s+[a-zäöüß]")
_GROUP_SEP = re.compile(
    r"\s*(?:,|;|und|oder|sowie|bzw\.|i\.\s?V\.\s?(?:m\.|mit)|iVm|in Verbindung mit)?\s*"
    r"(?:(?:die|der|des|den|dem|jeweils)\s+)?"
    r"(?:Anh(?:\.|ang)\s*(?:Nr\.\s*)?\d+[a-z]?\s*,\s*)?"  # "§ 3 Abs. 3 i.V. mit Anh. Nr. 13, § 5 Abs. 2 UWG"
    r"(?=§|Art|Paragra)"
)
# "SozR 4-2500 § 13 Nr 33", "Buchholz 406.11 § 9 BauGB Nr. 74": collection numbering, not a norm
_REPORTER_BEFORE = re.compile(r"(?:SozR|Buchholz|BVerwGE)\s*[\d.\-–]*\s*\Z")
_ARTICLE_WORDS = frozenset({"des", "der", "dem", "den", "im", "zum", "zur", "vom"})
_DETERMINERS = _ARTICLE_WORDS | {"dieses", "dieser", "diesem", "seines", "seiner", "ihres", "ihrer", "eines", "einer"}
_THIS_LAW = re.compile(
    r"\s*(?:dieses|dieser|diesem)\s+(?:Gesetzes|Gesetz|Verordnung|Gesetzbuchs|Gesetzbuches|Buches|Code)(?![\w])"
)
_INSTRUMENT_NOUN = re.compile(
    r"(?:gesetz|gesetzes|gesetzbuch|gesetzbuchs|gesetzbuches|ordnung|verordnung|vertrag|vertrages|vertrags|"
    r"satzung|vereinbarung|richtlinie|abkommens?|statuts?|bedingungen|regelung|tarifvertrags?|tarifvertrages|agb)$"
)
_PAREN_ABBR_AFTER_NAME = re.compile(
    r"[^()\n;:§]{0,140}?(?:gesetz(?:es|buch(?:e?s)?)?|ordnung|verordnung)\s*(?:\d{4}\s*)?"
    r"(?:\((?P<a>[A-ZÄÖÜ][\w./-]{1,15})\)|--\s*(?P<b>[A-ZÄÖÜ][\w./-]{1,15})\s*--)"
)
_LAW_WORD = re.compile(r"[^\s]+")
_TRAILING = ".,;:)\"'?!"
_GENERIC_ABBR = re.compile(r"[A-ZÄÖÜ][A-Za-zÄÖÜäöüß]{0,12}(?:-[A-Za-zÄÖÜäöüß]{1,8})?(?:G|O|V|VO|GB|B)")
_LAW_YEAR = re.compile(r"\s(?:1[89]|20)\d\d(?![\d]|[.,/]\d)")
_LAW_PAREN = re.compile(r"\s*(?:\((?P<a>[A-ZÄÖÜ][\w ./-]{1,15})\)|--\s*(?P<b>[A-ZÄÖÜ][\w./-]{1,15})\s*--)")
_LAW_VERSION = re.compile(r"\s*(?:[an]\.\s?F\.|[an]F(?![\w])|\((?:alt|neu)\))")
_LAW_BEFORE = re.compile(
    r"(?:(?<=[\s(\[,;\"])|\A)(?P<law>[A-ZÄÖÜ][\w./-]*(?:\s(?:[IVX]{1,4}|\d{1,2}))?)(?:\s(?:1[89]|20)\d\d)?\s+\Z"
)
# commentaries: "Palandt/Grüneberg, BGB, 79. Aufl., § 280", "Schlegelberger, HGB, Bd. 1, 4. Aufl., 1960, § 74",
# "Jansen FGG 2.Aufl. § 5"
_COMMENTARY_LAW_BEFORE = re.compile(
    r"(?<=[\s(,;/])(?P<law>[A-ZÄÖÜ][\w-]*(?:\s(?:[IVX]{1,4}|\d{1,2}))?)"
    r"(?:,\s+Bd\.\s*[\dIVX]+)?(?:,?\s+\d{1,2}\.\s?Aufl(?:\.|age)(?:,?\s+\d{4})?|,\s+\d{4})?,?\s*\Z"
)


@dataclass(frozen=True)
class _Part:
    level: int
    label: str  # "§", "Art.", "§" (nested), "Abs.", "Satz", ...; "(" marks "(1)" resolved at rendering
    value: str
    suffix: str = ""  # " ff." / " f."


@dataclass
class _Chain:
    start: int
    end: int
    leaves: list[list[_Part]]
    is_par: bool  # "§" rather than "Art."
    plural: bool  # "§§": a bare number after a sub-level may start the next section


@dataclass(frozen=True)
class _LawHit:
    law: Law | None
    start: int
    end: int
    blocked: bool = False  # another instrument is named ("des Vertrages"): no fallback to the context law
    context: bool = False  # "dieses Gesetzes": the context law, named


def _at_word_start(text: str, pos: int, also: str = "") -> bool:
    return pos == 0 or not (text[pos - 1].isalnum() or text[pos - 1] in also)


def _skip_ws(text: str, pos: int) -> int:
    return _WS.match(text, pos).end()  # type: ignore[union-attr]


def _scan_statutes(text: str, context_law: str | None, context_section: str | None) -> Iterator[Identifier]:
    context = law_table().by_abbr.get(context_law) if context_law else None
    if context_law and context is None:
        context = Law(abbr=context_law)
    resume = 0
    heads = [
        (m.start(), m)
        for m in _STATUTE_HEAD.finditer(text)
        if text[m.start()] == "§" or _at_word_start(text, m.start())
    ]
    if context_section:
        heads += [(m.start(), m) for m in _REL_HEAD.finditer(text)]
        heads.sort(key=lambda h: h[0])
    for start, head in heads:
        if start < resume:
            continue
        if head.re is _REL_HEAD:
            groups = _parse_relative_group(text, head, context_section or "")
        else:
            groups = _parse_groups(text, head)
        if not groups:
            continue
        last_chains, last_hit = groups[-1]
        resume = max(last_chains[-1].end, last_hit.end if last_hit else 0)
        if _REPORTER_BEFORE.search(text, max(0, start - 24), start):
            continue
        for chains, law_hit in groups:
            yield from _group_identifiers(text, chains, law_hit, context)


_Group = tuple[list["_Chain"], "_LawHit | None"]


def _parse_groups(text: str, head: re.Match[str]) -> list[_Group]:
    """Chains joined by ',', 'und', 'i.V.m.' ... up to the law that closes them.

    After a law, '§§ 823 Abs. 2 BGB, 263 StGB' goes on with the next number and its own law.
    """
    chains: list[_Chain] = []
    chain = _parse_chain_at_head(text, head)
    while chain is not None:
        chains.append(chain)
        hit = _law_after(text, chain.end)
        if hit is not None:
            return [(chains, hit), *_continue_after_law(text, chain, hit)]
        sep = _GROUP_SEP.match(text, chain.end)
        next_head = _STATUTE_HEAD.match(text, sep.end()) if sep else None
        chain = _parse_chain_at_head(text, next_head) if next_head else None
    if not chains:
        return []
    return [(chains, _law_before(text, chains[0].start))]


def _continue_after_law(text: str, chain: _Chain, hit: _LawHit) -> list[_Group]:
    groups: list[_Group] = []
    while chain.plural and hit.law is not None:
        sep = _LIST_SEP.match(text, hit.end)
        m = _SEC_NUM.match(text, sep.end()) if sep else None
        if m is None:
            break
        value = m.group(1) + (m.group(2) or m.group(3) or "")
        head = _Part(SEC, chain.leaves[0][0].label, value)
        chain = _parse_chain(text, m.start(), m.end(), [head], chain.is_par, plural=True)
        next_hit = _law_after(text, chain.end)
        if next_hit is None or next_hit.law is None:
            break
        hit = next_hit
        groups.append(([chain], hit))
    return groups


def _parse_relative_group(text: str, head: re.Match[str], context_section: str) -> list[_Group]:
    m = re.match(r"\s*(§|Art\.?)\s*(\d{1,4}[a-z]?)", context_section)
    if m is None:
        return []
    kind = "Art." if m.group(1).startswith("Art") else "§"
    chain = _parse_chain(text, head.start(), head.start(), [_Part(SEC, kind, m.group(2))], kind == "§", plural=False)
    if len(chain.leaves[0]) < 2:
        return []
    hit = _law_after(text, chain.end)
    if hit is not None and hit.law is not None:
        return []  # "Absatz 2 des Vertrags über ...": not a part of the section being read
    return [([chain], hit)]


def _parse_chain_at_head(text: str, head: re.Match[str]) -> _Chain | None:
    word = head.group("par") or head.group("art")
    is_par = head.group("par") is not None
    plural = word in ("§§", "Artt.", "Paragraphen", "Paragrafen", "Artikeln", "Articles")
    pos = _skip_ws(text, head.end())
    m = _SEC_NUM.match(text, pos)
    if m is None:
        return None
    value = m.group(1) + (m.group(2) or m.group(3) or "")
    if not is_par and _looks_like_kind_of(text, head.start(), pos, m.end()):
        return None
    return _parse_chain(text, head.start(), m.end(), [_Part(SEC, "§" if is_par else "Art.", value)], is_par, plural)


def _looks_like_kind_of(text: str, head_start: int, num_start: int, num_end: int) -> bool:
    """'psychischer Art.\\n8\\n': the noun Art (kind) followed by a paragraph number on its own line."""
    return "\n" in text[head_start:num_start] and (num_end >= len(text) or text[num_end] == "\n")


@dataclass
class _ChainState:
    """A chain being read: the path of the current norm, the norms already complete, the read position."""

    text: str
    path: list[_Part]
    pos: int
    is_par: bool
    plural: bool
    leaves: list[list[_Part]] = field(default_factory=list)
    roman: bool = False  # Absätze written as Roman numerals: a bare number after one is a Satz

    def child(self, part: _Part, end: int) -> bool:
        self.path.append(part)
        self.pos = end
        return True

    def amend(self, end: int, **changes: str) -> bool:
        self.path[-1] = replace(self.path[-1], **changes)
        self.pos = end
        return True


def _parse_chain(text: str, start: int, pos: int, path: list[_Part], is_par: bool, plural: bool) -> _Chain:
    state = _ChainState(text, path, pos, is_par, plural)
    while any(step(state) for step in _CHAIN_STEPS):
        pass
    state.leaves.append(state.path)
    return _Chain(start, state.pos, state.leaves, is_par, plural)


def _step_ff(s: _ChainState) -> bool:
    m = None if s.path[-1].suffix else _FF.match(s.text, s.pos)
    return bool(m) and s.amend(m.end(), suffix=" ff." if m.group(1).startswith("ff") else " f.")  # type: ignore[union-attr]


def _step_range(s: _ChainState) -> bool:
    cur = s.path[-1]
    m = None if "-" in cur.value else _RANGE.match(s.text, s.pos)
    v = _value_at(s.text, m.end(), cur.level) if m else None
    return bool(v) and s.amend(v[1], value=f"{cur.value}-{v[0]}")  # type: ignore[index]


def _step_nested_section(s: _ChainState) -> bool:
    m = None if s.is_par or len(s.path) > 1 else _NESTED_SEC.match(s.text, s.pos)
    return bool(m) and s.child(_Part(SUBSEC, "§", m.group(1)), m.end())  # type: ignore[union-attr]


def _step_designator(s: _ChainState) -> bool:
    d = _designator_at(s.text, s.pos)
    if d is None:
        return False
    s.roman = False
    return s.child(_Part(d[0], d[1], d[2]), d[3])


def _step_ordinal(s: _ChainState) -> bool:
    m = _ORDINAL_DESIGNATOR.match(s.text, s.pos)
    if m is None:
        return False
    value = _ORDINALS[m.group("word")] if m.group("word") else m.group("num")
    what = m.group("what")
    level, label = (HS, "Halbsatz") if what[0] == "H" else (ALT, "Var." if what[0] == "V" else "Alt.")
    return s.child(_Part(level, label, value), m.end())


def _step_enumerated_letter(s: _ChainState) -> bool:
    m = _ENUM_LETTER.match(s.text, s.pos) if s.path[-1].level == NR else None
    return bool(m) and s.child(_Part(BUCHST, "Buchst.", m.group("v")), m.end())  # type: ignore[union-attr]


def _step_parenthesized(s: _ChainState) -> bool:
    m = _PAREN_VALUE.match(s.text, s.pos)
    if m is None:
        return False
    part = _Part(ABS, "(", m.group("num")) if m.group("num") else _Part(BUCHST, "Buchst.", m.group("letter"))
    return s.child(part, m.end())


def _step_roman(s: _ChainState) -> bool:
    """'§ 10 II 1 BGB': a Roman Absatz right after the section, then an arabic Satz."""
    p = _skip_ws(s.text, s.pos)
    if p == s.pos:
        return False
    if len(s.path) == 1 and (m := _ROMAN.match(s.text, p)) and m.group(1):
        s.roman = True
        return s.child(_Part(ABS, "Abs.", str(_roman_to_int(m.group(1)))), m.end())
    if s.roman and s.path[-1].level == ABS and (m := _NUM_VALUE.match(s.text, p)):
        return s.child(_Part(SATZ, "Satz", m.group(1)), m.end())
    return False


def _step_list_item(s: _ChainState) -> bool:
    sep = _LIST_SEP.match(s.text, s.pos)
    nxt = _after_separator(s.text, sep.end(), s.path, s.roman, s.plural) if sep else None
    if nxt is None:
        return False
    s.leaves.append(s.path)
    s.path, s.pos = nxt
    return True


_CHAIN_STEPS = (
    _step_ff,
    _step_range,
    _step_nested_section,
    _step_designator,
    _step_ordinal,
    _step_enumerated_letter,
    _step_parenthesized,
    _step_roman,
    _step_list_item,
)


def _after_separator(
    text: str, pos: int, path: list[_Part], roman: bool, plural: bool
) -> tuple[list[_Part], int] | None:
    """The path that a list item after ',', 'und', ... starts, or None if the list ends here."""
    if d := _designator_at(text, pos):
        return _relevel(path, d[0]) + [_Part(d[0], d[1], d[2])], d[3]
    cur = path[-1]
    if roman and cur.level == ABS and (m := _ROMAN.match(text, pos)) and m.group(1):
        return path[:-1] + [replace(cur, value=str(_roman_to_int(m.group(1))), suffix="")], m.end()
    level = cur.level
    if level in _LETTER_LEVELS and not _LETTER_VALUE.match(text, pos):
        numeric = [i for i, part in enumerate(path) if part.level not in _LETTER_LEVELS]
        path = path[: numeric[-1] + 1]
        cur, level = path[-1], path[-1].level
    v = _value_at(text, pos, level)
    if v is None or _QUANTITY_AFTER.match(text, v[1]) or _ENUMERATION_AFTER.match(text, v[1]):
        return None
    value, end = v
    if level != SEC and _starts_next_section(text, pos, end, path, level, plural):
        return [_Part(SEC, path[0].label, _sec_value_at(text, pos) or value)], end
    following = _designator_at(text, _skip_ws(text, end))
    if following is not None:
        used = [i for i, part in enumerate(path) if part.level == following[0] and i > 0]
        if used and used[0] > 1 and (path[used[0] - 1].level in _LETTER_LEVELS) == (level in _LETTER_LEVELS):
            # "Abs. 1 Nr. 2, 3 Nr. 4": the number sits one level above the repeated designator
            parent = path[used[0] - 1]
            return path[: used[0] - 1] + [replace(parent, value=value, suffix="")], end
    if level == SEC:
        value = _sec_value_at(text, pos) or value
    return path[:-1] + [replace(cur, value=value, suffix="")], end


def _starts_next_section(text: str, pos: int, end: int, path: list[_Part], level: int, plural: bool) -> bool:
    """Whether a bare number after ',' / 'und' below the section level is the next section.

    It is when a designator follows that this path already used ("§§ 92 Abs. 1, 97 Abs. 1") or that
    sits above the current level ("§§ 3 Nr. 40, 3c Abs. 2"); after '§§' also when it is followed by
    "ff." or is larger than the section ("§§ 823 Abs. 1, 249 ff.", "§§ 12 Abs. 1, 14").
    """
    if level in _LETTER_LEVELS and _LETTER_VALUE.match(text, pos):
        return False
    following = _designator_at(text, _skip_ws(text, end))
    if following is not None:
        above = [part.level for part in path if part.level < following[0]]
        used_at_top = any(part.level == following[0] for part in path[1:2])
        return used_at_top or (following[0] < level and above == [SEC])
    if not plural:
        return False
    value = _sec_value_at(text, pos) or ""
    return bool(_FF.match(text, end)) or _leading_int(value) > _leading_int(path[0].value)


def _relevel(path: list[_Part], level: int) -> list[_Part]:
    for i, part in enumerate(path):
        if i > 0 and part.level == level:
            return path[:i]
    shallower = [i for i, part in enumerate(path) if part.level < level]
    return path[: shallower[-1] + 1]


def _designator_at(text: str, pos: int) -> tuple[int, str, str, int] | None:
    m = _DESIGNATOR.match(text, _skip_ws(text, pos))
    if m is None:
        return None
    group = m.lastgroup or ""
    level, label = _DESIGNATOR_LEVELS[group]
    if group == "alt" and m.group(group).startswith("Var"):
        label = "Var."
    v = _value_at(text, m.end(), level)
    if v is None:
        return None
    return level, label, v[0], v[1]


def _value_at(text: str, pos: int, level: int) -> tuple[str, int] | None:
    if level in _LETTER_LEVELS:
        m = _LETTER_VALUE.match(text, pos)
        return (m.group("v"), m.end()) if m else None
    if level == PART:
        m = _PART_VALUE.match(text, pos)
        return (m.group("v"), m.end()) if m else None
    if level in (SEC, SUBSEC):
        value = _sec_value_at(text, pos)
        m = _SEC_NUM.match(text, pos)
        return (value, m.end()) if value and m else None
    m = _NUM_VALUE.match(text, pos)
    return (m.group(1), m.end()) if m else None


def _sec_value_at(text: str, pos: int) -> str | None:
    m = _SEC_NUM.match(text, pos)
    return m.group(1) + (m.group(2) or m.group(3) or "") if m else None


def _leading_int(value: str) -> int:
    m = re.match(r"\d+", value)
    return int(m.group()) if m else 0


def _roman_to_int(roman: str) -> int:
    values = {"I": 1, "V": 5, "X": 10}
    total = 0
    for i, ch in enumerate(roman):
        v = values[ch]
        total += -v if i + 1 < len(roman) and values[roman[i + 1]] > v else v
    return total


# ---------------------------------------------------------------- law names


def _law_after(text: str, pos: int) -> _LawHit | None:
    """The law named right after a chain: 'BGB', 'des Aktiengesetzes', 'der Verordnung (EU) 2016/679'."""
    p = _skip_ws(text, pos)
    if p >= len(text) or not text[p].isalpha():
        return None
    if m := _THIS_LAW.match(text, pos):
        return _LawHit(None, p, m.end(), context=True)
    if m := _EU_ACT_AFTER.match(text, p):
        act = _eu_act_from_match(m)
        if act is not None:
            return _LawHit(act, p, m.end())
    words = _words(text, p, 2)
    first = 1 if words[0][0] in _ARTICLE_WORDS else 0
    if len(words) > first:
        longest = law_table().lengths.get(_name_key([words[first][0].rstrip(_TRAILING)]), (1,))[0]
        words = _words(text, p, first + max(longest, 3))
    hit = _lookup_law(words, first)
    if hit is not None:
        law, end = hit
        return _LawHit(law, p, _extend_law(text, end, law))
    first = 1 if words[0][0] in _DETERMINERS else 0
    if _names_instrument(words[first : first + 3] if first else words[:1]):
        if (m := _PAREN_ABBR_AFTER_NAME.match(text, words[first][1])) is not None:
            abbr = m.group("a") or m.group("b")
            return _LawHit(law_table().by_abbr.get(abbr) or Law(abbr=abbr), p, m.end())
        return _LawHit(None, p, p, blocked=True)
    return None


def _names_instrument(words: list[tuple[str, int, int]]) -> bool:
    """'des Vertrages', 'der geänderten Satzung', 'des Gesetzes über ...': some other instrument is named."""
    for word, _, _ in words:
        bare = word.rstrip(_TRAILING)
        if word[:1].isupper() and _INSTRUMENT_NOUN.search(bare.casefold()):
            return True
        if word[:1].isupper() or bare != word:
            return False
    return False


def _words(text: str, pos: int, limit: int) -> list[tuple[str, int, int]]:
    out = []
    for m in _LAW_WORD.finditer(text, pos):
        out.append((m.group(), m.start(), m.end()))
        if len(out) >= limit:
            break
    return out


def _lookup_law(words: list[tuple[str, int, int]], first: int) -> tuple[Law, int] | None:
    """Longest known name or abbreviation starting at words[first]: (law, end offset)."""
    table = law_table()
    if not words[first:] or not words[first][0][0].isalpha():
        return None
    word = words[first][0].rstrip(_TRAILING)
    for n in table.lengths.get(_name_key([word]), ()):
        span = words[first : first + n]
        if len(span) < n:
            continue
        last = span[-1][0].rstrip(_TRAILING)
        raw = [w for w, _, _ in span[:-1]] + [last]
        law = table.by_abbr.get(" ".join(raw))
        if law is None and not any(w.endswith((".", ";", ":", ")")) for w in raw[:-1]):
            law = table.by_name.get(_name_key(raw))
        if law is not None:
            return law, span[-1][1] + len(last)
    law = table.by_abbr_folded.get(word.casefold()) if sum(c.isupper() for c in word) >= 2 else None
    if law is None and _looks_like_law_abbreviation(word):
        law = Law(abbr=word)
    return (law, words[first][1] + len(word)) if law else None


def _looks_like_law_abbreviation(word: str) -> bool:
    """'WoBindG', 'BayBO', 'NMVO': capitals and a law's ending (G, O, V, VO, GB, B), not a court or journal."""
    return (
        sum(c.isupper() for c in word) >= 2
        and _GENERIC_ABBR.fullmatch(word) is not None
        and word not in court_table().not_laws
    )


def _extend_law(text: str, end: int, law: Law) -> int:
    """Take a year, a version mark and a bracketed abbreviation into the law's span."""
    if m := _LAW_YEAR.match(text, end):
        end = m.end()
    if m := _LAW_PAREN.match(text, end):
        abbr = (m.group("a") or m.group("b") or "").strip()
        known = law_table().by_abbr.get(abbr)
        if known is law or (known is None and _looks_like_law_abbreviation(abbr)):
            end = m.end()
    if m := _LAW_VERSION.match(text, end):
        end = m.end()
    return end


def _law_before(text: str, head_start: int) -> _LawHit | None:
    """Law written first: juris style 'GG Art 80 Abs 1', 'HGB §§ 74 ff', 'GmbHG 1892 § 13', 'DORA Art. 19',
    or a commentary 'Palandt/Grüneberg, BGB, 79. Aufl., § 280 Rn. 12'."""
    lo = max(0, head_start - 48)
    if m := _EU_ACT_BEFORE.search(text, lo, head_start):
        act = _eu_act_from_match(m)
        if act is not None:
            return _LawHit(act, m.start(), m.end())
    m = _LAW_BEFORE.search(text, lo, head_start) or _COMMENTARY_LAW_BEFORE.search(text, lo, head_start)
    if m is None:
        return None
    words = [(w, m.start("law") + i, 0) for w, i in _split_with_offsets(m.group("law"))]
    for first in range(len(words)):
        hit = _lookup_law(words[first:], 0)
        if hit is not None and hit[1] == m.end("law"):
            return _LawHit(hit[0], words[first][1], m.end("law"))
    return None


def _split_with_offsets(s: str) -> list[tuple[str, int]]:
    return [(m.group(), m.start()) for m in re.finditer(r"\S+", s)]


def _group_identifiers(
    text: str, chains: list[_Chain], hit: _LawHit | None, context: Law | None
) -> Iterator[Identifier]:
    if hit is not None and hit.blocked:
        return
    law = hit.law if hit is not None and hit.law is not None else context
    if law is None:
        return
    for i, chain in enumerate(chains):
        start, end = chain.start, chain.end
        if hit is not None and i == 0 and hit.end <= chain.start:
            start = hit.start  # the law written first: "GG Art 80"
        if hit is not None and i == len(chains) - 1 and hit.start >= chain.end:
            end = hit.end  # the law closing the group belongs to its last citation
        for leaf in chain.leaves:
            yield _statute_identifier(text, leaf, law, start, end)


def _statute_identifier(text: str, leaf: list[_Part], law: Law, start: int, end: int) -> Identifier:
    article = leaf[0].value if leaf[0].label == "Art." else None
    rendered = [_render_part(part, law, article) for part in leaf]
    values = {part.level: part.value for part in reversed(leaf)}
    section = " ".join(r for part, r in zip(leaf, rendered, strict=True) if part.level in (SEC, SUBSEC, PART))
    celex = None
    if law.is_eu:
        celex = law.celex
        if law.article_celex_prefix and article and article.isdigit():
            celex = f"{law.article_celex_prefix}{int(article):03d}"
    return Identifier(
        kind="eu_reference" if law.is_eu else "statute",
        normalized=" ".join([*rendered, law.citation]),
        as_written=text[start:end],
        start=start,
        end=end,
        law=law.citation,
        section=section,
        absatz=values.get(ABS),
        satz=values.get(SATZ),
        nummer=values.get(NR),
        buchstabe=values.get(BUCHST),
        celex=celex,
    )


def _render_part(part: _Part, law: Law, article: str | None) -> str:
    if part.level == SEC:
        label = part.label
        if label == "§" and ("-" in part.value or part.suffix):
            label = "§§"
        return f"{label} {part.value}{part.suffix}"
    label = part.label
    if label == "(":
        label = "Nr." if article in law.point_articles else "Abs."
    elif label == "Buchst." and law.is_eu:
        label = "lit."
    return f"{label} {part.value}{part.suffix}"


# ---------------------------------------------------------------- EU references

_EU_TYPE = (
    r"(?P<type>Durchführungsverordnung|Delegierten?\s+Verordnung|Verordnung|VO|Richtlinie|RL|Rahmenbeschluss|"
    r"Beschluss|Regulation|Directive|Decision)"
)
_EU_ACT_CORE = (
    _EU_TYPE + r"\s*(?:\((?P<org>EU|EG|EWG|EC|EEC|Euratom|EGKS)\)\s*)?(?:(?P<nr>Nr\.?|No\.?)\s*)?"
    r"(?P<a>\d{1,4})/(?P<b>\d{1,4})(?:/(?P<suffix>EU|EG|EWG|EC|EEC|EGKS|Euratom))?(?![\d/])"
)
# one pass per form: a single alternation of all four is several times slower in `re`
_EU_ACT_PATTERNS = (
    re.compile(_EU_ACT_CORE),
    re.compile(r"(?P<ba>\d\d(?:\d\d)?)/(?P<bb>\d{1,4})/(?P<bsuffix>EU|EG|EWG|EC|EEC)(?![\w])"),  # "2009/24/EC"
    re.compile(r"(?:CELEX|celex|Celex)(?:-?Nr\.?)?(?::|%3A|\s)\s?(?P<celex>[1-9]\d{4}[A-Z]{1,2}\d{1,4})"),
    re.compile(r"eli/(?P<eli>reg|dir|dec)(?:_impl|_del)?/(?P<eli_year>\d{4})/(?P<eli_num>\d{1,4})(?!\d)"),
)
_EU_ACT_AFTER = re.compile(
    r"(?:(?:des|der|dem|den|einer|of(?:\s+the)?)\s+)?(?:(?:[A-ZÄÖÜ][a-zäöü]*ten|\d{1,2}\.)\s+)?" + _EU_ACT_CORE
)
_EU_ACT_BEFORE = re.compile(_EU_ACT_CORE + r"\s*,?\s*\Z")
_EU_CASE = re.compile(r"(?P<court>[CT])-(?P<num>\d{1,4})/(?P<yy>\d{2})(?![\d/])(?:\s?(?P<appeal>P)(?![\w]))?")
_CELEX_TYPES = {"VO": "R", "RL": "L", "Beschluss": "D"}
_DIRECTIVE_WORDS = frozenset({"Richtlinie", "RL", "Directive"})
_DECISION_WORDS = frozenset({"Beschluss", "Decision", "Rahmenbeschluss"})
_CELEX = re.compile(r"(?P<sector>3)(?P<year>\d{4})(?P<type>[RLD])(?P<num>\d{1,4})")


def _scan_eu_acts(text: str) -> list[Identifier]:
    found = [m for pattern in _EU_ACT_PATTERNS for m in pattern.finditer(text)]
    return sorted(_eu_act_identifiers(text, found), key=lambda i: i.start)


def _eu_act_identifiers(text: str, matches: list[re.Match[str]]) -> Iterator[Identifier]:
    for m in matches:
        groups = m.groupdict()
        if not (groups.get("celex") or groups.get("eli") or _at_word_start(text, m.start(), "/_")):
            continue
        act = _eu_act_from_match(m)
        if act is not None:
            yield Identifier(
                kind="eu_reference",
                normalized=act.citation,
                as_written=m.group(),
                start=m.start(),
                end=m.end(),
                law=act.citation,
                celex=act.celex,
            )


def _eu_act_from_match(m: re.Match[str]) -> Law | None:
    groups = m.groupdict()
    if groups.get("celex"):
        c = _CELEX.fullmatch(groups["celex"])
        if c is None:
            return None
        kind = {v: k for k, v in _CELEX_TYPES.items()}[c.group("type")]
        return _eu_act(kind, int(c.group("year")), int(c.group("num")), None)
    if groups.get("eli"):
        kind = {"reg": "VO", "dir": "RL", "dec": "Beschluss"}[groups["eli"]]
        return _eu_act(kind, int(groups["eli_year"]), int(groups["eli_num"]), None)
    if groups.get("ba"):
        return _eu_act("RL", _year4(groups["ba"]), int(groups["bb"]), groups["bsuffix"])
    kind_word, org, a, b = groups["type"], groups["org"], groups["a"], groups["b"]
    if kind_word in _DECISION_WORDS and not (org or groups["suffix"]):
        return None  # "Beschluss 1/19" is a court's decision, not the EU's
    if kind_word in _DIRECTIVE_WORDS or kind_word in _DECISION_WORDS:
        kind = "RL" if kind_word in _DIRECTIVE_WORDS else "Beschluss"
        return _eu_act(kind, _year4(a), int(b), groups["suffix"] or org)  # directives and decisions: year/number
    # regulations: number/year until 2014 ("Nr. 1215/2012"), year/number since 2015 ("2016/679")
    if not groups["nr"] and len(a) == 4 and 2015 <= int(a) <= 2099 and org in (None, "EU"):
        return _eu_act("VO", int(a), int(b), org)
    if len(b) not in (2, 4):
        return None
    return _eu_act("VO", _year4(b), int(a), org)


def _year4(year: str) -> int:
    y = int(year)
    if len(year) <= 2:
        return 1900 + y if y >= 50 else 2000 + y
    return y


def _eu_org(org: str | None, year: int) -> str:
    if org:
        return {"EC": "EG", "EEC": "EWG"}.get(org, org)
    return "EWG" if year <= 1993 else "EG" if year <= 2009 else "EU"


def _eu_act(kind: str, year: int, number: int, org: str | None) -> Law:
    """The normalized designation of an EU act, e.g. ('RL', 1995, 46) -> 'RL 95/46/EG', CELEX 31995L0046."""
    celex = f"3{year}{_CELEX_TYPES[kind]}{number:04d}"
    known = law_table().by_celex.get(celex)
    if known is not None:
        return known
    short_year = str(year)[2:] if year < 1999 else str(year)
    if kind == "VO":
        if year >= 2015:
            designation = f"VO (EU) {year}/{number}"
        else:
            designation = f"VO ({_eu_org(org, year)}) Nr. {number}/{short_year}"
    elif year >= 2015:
        designation = f"{kind} (EU) {year}/{number}"
    else:
        designation = f"{kind} {short_year}/{number}/{_eu_org(org, year)}"
    return Law(abbr=designation, celex=celex, cite_as=designation)


def _dedupe_eu_acts(acts: list[Identifier], statutes: list[Identifier]) -> list[Identifier]:
    """An act is reported once per text, and not at all when one of its articles is cited."""
    seen = {i.celex for i in statutes if i.kind == "eu_reference" and i.celex}
    spans = _SpanIndex((i.start, i.end) for i in statutes)
    out = []
    for act in acts:
        if act.celex in seen or spans.overlaps(act.start, act.end):
            continue
        seen.add(act.celex)
        out.append(act)
    return out


def _scan_eu_cases(text: str) -> Iterator[Identifier]:
    for m in _EU_CASE.finditer(text):
        if not _at_word_start(text, m.start(), "_-"):
            continue
        court = "EuGH" if m.group("court") == "C" else "EuG"
        number = f"{m.group('court')}-{m.group('num')}/{m.group('yy')}" + (" P" if m.group("appeal") else "")
        year = _year4(m.group("yy"))
        celex = f"6{year}{m.group('court')}J{int(m.group('num')):04d}"
        date = _date_before(text, m.start())
        common = {"as_written": m.group(), "start": m.start(), "end": m.end(), "court": court}
        yield Identifier(kind="case_number", normalized=number, date=date, number=number, **common)
        yield Identifier(kind="eu_reference", normalized=f"{court} {number}", celex=celex, **common)


# ---------------------------------------------------------------- ECLI

_ECLI = re.compile(
    r"(?:ECLI|ecli|Ecli):(?P<country>[A-Za-z]{2}):(?P<court>[A-Za-z0-9]{1,7}):(?P<year>\d{4})"
    r":(?P<ordinal>[A-Za-z0-9.]*[A-Za-z0-9])"
)
_TRUNCATED = re.compile(r"\.{2,}|…")


def _scan_eclis(text: str) -> Iterator[Identifier]:
    for m in _ECLI.finditer(text):
        if _TRUNCATED.match(text, m.end()) or len(m.group("ordinal")) > 25:
            continue
        court_code = m.group("court").upper()
        year = int(m.group("year"))
        ordinal = m.group("ordinal").upper()
        country = m.group("country").upper()
        court = court_table().ecli_courts.get(court_code) if country in ("DE", "EU") else None
        date, case_number = (None, None)
        if country == "DE":
            date, case_number = _ecli_parts(court_code, year, ordinal)
        yield Identifier(
            kind="ecli",
            normalized=m.group().upper(),
            as_written=m.group(),
            start=m.start(),
            end=m.end(),
            court=court,
            year=year,
            date=date,
            number=ordinal,
            case_number=case_number,
        )


_ECLI_FORMS = {
    "BVERFG": re.compile(r"[A-Z]{2}(?P<date>\d{8})\.(?P<chamber>\d?)(?P<reg>[A-Z]+?)(?P<num>\d{4})(?P<yy>\d{2})"),
    "BGH": re.compile(
        r"(?P<ddmmyy>\d{6})[A-Z](?P<chamber>[IVX]+|\d+)?(?P<reg>[A-Z]+?)(?P<num>\d+)\.(?P<yy>\d{2})\.\d+"
    ),
    "BVERWG": re.compile(r"(?P<ddmmyy>\d{6})[A-Z](?P<chamber>\d+)(?P<reg>[A-Z]+?)(?P<num>\d+)\.(?P<yy>\d{2})\.\d+"),
    "BPATG": re.compile(r"(?P<ddmmyy>\d{6})[A-Z](?P<chamber>\d+)(?P<reg>[A-Z]+?)(?P<num>\d+)\.(?P<yy>\d{2})\.\d+"),
    "BAG": re.compile(r"(?P<ddmmyy>\d{6})\.[A-Z]\.(?P<chamber>\d+)(?P<reg>[A-Z]+?)(?P<num>\d+)\.(?P<yy>\d{2})\.\d+"),
    "BFH": re.compile(r"[A-Z]\.(?P<ddmmyy>\d{6})\.(?P<chamber>[IVX]+)(?P<reg>[A-Z]+?)(?P<num>\d+)\.(?P<yy>\d{2})\.\d+"),
    "BSG": re.compile(
        r"(?P<ddmmyy>\d{6})[A-Z]B(?P<chamber>\d{1,2})(?P<reg>[A-Z]{1,3}?)(?P<num>\d+)(?P<yy>\d{2})(?P<suffix>[A-Z]{0,3})\d"
    ),
}
_ECLI_LAND = re.compile(r"(?P<mmdd>\d{4})\.")


def _ecli_parts(court_code: str, year: int, ordinal: str) -> tuple[str | None, str | None]:
    """Date and, for federal courts, the case number encoded in a German ECLI's ordinal."""
    form = _ECLI_FORMS.get(court_code)
    m = form.fullmatch(ordinal) if form else None
    if m is None:
        land = _ECLI_LAND.match(ordinal)
        return (_iso_date(year, land.group("mmdd")[:2], land.group("mmdd")[2:]) if land else None), None
    parts = m.groupdict()
    if parts.get("date"):
        date = _iso_date(int(parts["date"][:4]), parts["date"][4:6], parts["date"][6:])
    else:
        ddmmyy = parts["ddmmyy"]
        date = _iso_date(year // 100 * 100 + int(ddmmyy[4:]), ddmmyy[2:4], ddmmyy[:2])
    reg = parts["reg"]
    reg = court_table().ecli_registers.get(reg) or (re.sub(r"^(P?)BV", r"\1Bv", reg) if court_code == "BVERFG" else reg)
    lead = [x for x in ((("B " if court_code == "BSG" else "") + (parts.get("chamber") or "")).strip(), reg) if x]
    suffix = f" {parts['suffix']}" if parts.get("suffix") else ""
    return date, f"{' '.join(lead)} {int(parts['num'])}/{parts['yy']}{suffix}"


def _iso_date(year: int, month: str, day: str) -> str | None:
    if not (1 <= int(month) <= 12 and 1 <= int(day) <= 31):
        return None
    return f"{year:04d}-{int(month):02d}-{int(day):02d}"


# ---------------------------------------------------------------- case numbers

# number/year ("12/19"), BVerwG number.year ("43.93"), Bavarian year.number ("19.1234", kept as written)
_AZ_TRIGGER = re.compile(r"\d(?:\d{0,4}[/.]\d{2}|\d\.\d{3,5})(?!\.?\d|/|,\d)")
_AZ_LEAD = re.compile(
    r"(?:(?<=[\s(\[\"'„“,;:–-])|\A)"
    r"(?:(?P<prefix>[A-ZÄÖÜ][A-Za-z]{0,2})\s+(?=\d|[IVX]{1,4}-))?"
    r"(?:(?P<pre2>[IVX]{1,4}|\d{1,2})-)?"
    r"(?:(?P<chamber>\d{1,3}[a-z]?|[IVX]{1,5}[a-z]?)\s+)?"
    r"(?P<reg>(?:[A-ZÄÖÜ][A-Za-zÄÖÜäöü]{0,5}(?:-[A-Z][A-Za-z]{0,4})?|\([A-Za-zÄÖÜäöü]{1,5}\))"
    r"(?:\s*\([A-Za-zÄÖÜäöü]{1,5}\)|\s+[A-ZÄÖÜ][A-Za-zÄÖÜäöü]{0,5}(?:-[A-Z][A-Za-z]{0,4})?){0,2})"
    r"\s+\Z"
)
_AZ_DASH_LEAD = re.compile(r"(?:(?<=[\s(\"'])|\A)(?P<chamber>\d{1,3})\s-\s\Z")
_LOWER_RUN = re.compile(r"[a-zäöüß]{4}")


@cache
def _az_suffix_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    courts = court_table()
    words = _alternation(courts.az_suffixes)
    brackets = _alternation(courts.az_bracket_suffixes)
    return (
        re.compile(rf"(?:(?:\.[A-ZÄÖÜ]{{1,4}})+|\s(?:{words})(?:,(?:{words}))*)(?![\wÄÖÜäöü-])"),
        re.compile(rf"\s?\((?:{brackets}|[A-ZÄÖÜ][a-zäöü]{{1,4}})\)"),
    )


def _scan_case_numbers(text: str) -> Iterator[Identifier]:
    courts = court_table()
    word_suffix, bracket_suffix = _az_suffix_patterns()
    for m in _AZ_TRIGGER.finditer(text):
        if m.start() and text[m.start() - 1] in "0123456789/.,":
            continue
        lead = _case_number_lead(text, m.start(), courts)
        if lead is None:
            continue
        start, parts, court = lead
        end = m.end()
        suffix = ""
        if s := word_suffix.match(text, end):
            suffix, end = s.group(), s.end()
        if s := bracket_suffix.match(text, end):
            suffix, end = suffix + " " + s.group().strip(), s.end()
        elif "-" in parts:
            continue  # "1 - 20/13" is a file number only with its register in brackets
        num, year = re.split(r"[/.]", m.group(), maxsplit=1)
        number = f"{num}/{year}" if len(year) == 2 else m.group()  # Bavarian year.number stays as written
        normalized = " ".join([*parts, number]) + re.sub(r"\s+", " ", suffix)
        yield Identifier(
            kind="case_number",
            normalized=normalized,
            as_written=text[start:end],
            start=start,
            end=end,
            court=_court_before(text, start) or court,
            date=_date_before(text, start),
            number=number,
        )


def _case_number_lead(text: str, num_start: int, courts: _CourtTable) -> tuple[int, list[str], str | None] | None:
    """Start offset, normalized parts before the number ('XII', 'ZB') and the court the register implies."""
    lo = max(0, num_start - 48)
    if d := _AZ_DASH_LEAD.search(text, lo, num_start):
        return d.start(), [d.group("chamber"), "-"], None
    # the leftmost reading may swallow a preceding word ("und VIII ZR"); try later starts until one is valid
    while (m := _AZ_LEAD.search(text, lo, num_start)) is not None:
        lead = _valid_case_number_lead(m, courts)
        if lead is not None:
            return lead
        lo = m.start() + 1
    return None


def _valid_case_number_lead(m: re.Match[str], courts: _CourtTable) -> tuple[int, list[str], str | None] | None:
    reg = re.sub(r"\s+", " ", re.sub(r"\s*\(", " (", m.group("reg"))).strip()
    for token in reg.split():
        if token.strip("()") in courts.az_not_registers or _LOWER_RUN.search(token):
            return None
    prefix, chamber = m.group("prefix"), m.group("chamber")
    start = m.start()
    if prefix and prefix not in courts.az_prefixes:
        prefix, start = None, m.start("pre2") if m.group("pre2") else m.start("chamber") if chamber else m.start("reg")
    if chamber is None and (prefix or m.group("pre2") or reg not in courts.az_chamberless):
        return None
    lead = ((m.group("pre2") + "-") if m.group("pre2") else "") + (chamber or "")
    parts = [p for p in (prefix, lead, reg) if p]
    return start, parts, _court_of_register(courts, prefix, chamber, reg)


def _court_of_register(courts: _CourtTable, prefix: str | None, chamber: str | None, reg: str) -> str | None:
    roman_chamber = bool(chamber and chamber[0] in "IVX")
    court = courts.az_register_courts.get(reg)
    if court == "BGH" and chamber and not roman_chamber:
        return None  # ZR/ZB senates of the BGH are Roman; "15 ZB 19.123" is a Bavarian VGH file
    if court is None and roman_chamber and reg in ("R", "B", "S", "E"):
        return "BFH"
    if court is None and prefix in ("B", "L", "S") and chamber and chamber[0].isdigit() and reg.isupper():
        return {"B": "BSG", "L": "LSG", "S": "SG"}[prefix]
    return court


# ---------------------------------------------------------------- courts and dates near an identifier

_MONTHS = {
    name: number
    for number, name in enumerate(
        "Januar Februar März April Mai Juni Juli August September Oktober November Dezember".split(), start=1
    )
}
_DATE = re.compile(
    r"(?P<d>\d{1,2})\.\s?(?:(?P<m>\d{1,2})\.\s?|(?P<mname>" + "|".join(_MONTHS) + r")\s)(?P<y>\d{4})"
    r"|(?P<iy>\d{4})-(?P<im>\d{2})-(?P<id>\d{2})"
)
# a town as courts are named: "Köln", "Berlin-Charlottenburg", "Frankfurt am Main", "Frankfurt (Oder)"
_PLACE = (
    r"(?:Bad\s)?[A-ZÄÖÜ][a-zäöüß][\wäöüß]*(?:-[A-ZÄÖÜ][\wäöüß]+)*"
    r"(?:\s(?:am|an der|im|in der|ob der)\s[A-ZÄÖÜ][\wäöüß]+|\s?\([A-ZÄÖÜ][\wäöüß]+\))?"
)


@cache
def _court_pattern() -> re.Pattern[str]:
    courts = court_table()
    types = _alternation([*courts.court_types, *courts.court_types.values()])
    adjectives = _alternation(courts.state_adjectives)
    regions = _alternation(courts.regions)
    federal = _alternation(courts.federal)
    return re.compile(
        rf"(?P<adj>{adjectives})\s+(?P<atype>{types})(?![\w])"
        rf"|(?P<rtype>{types})\s+(?P<region>{regions})(?![\w])"
        rf"|(?P<ptype>{types})\s+(?P<place>{_PLACE})"
        rf"|(?<![\w])(?P<federal>{federal})(?![\wäöü])"
    )


def _court_before(text: str, start: int) -> str | None:
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


def _date_before(text: str, start: int) -> str | None:
    last = None
    for last in _DATE.finditer(text, max(0, start - 90), start):
        pass
    if last is None:
        return None
    if last.group("iy"):
        return _iso_date(int(last.group("iy")), last.group("im"), last.group("id"))
    month = last.group("m") or str(_MONTHS[last.group("mname")])
    return _iso_date(int(last.group("y")), month, last.group("d"))


# ---------------------------------------------------------------- register numbers


@cache
def _register_patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    courts = court_table()
    types = _alternation([*courts.register_types, "HR A", "HR B"])
    suffixes = _alternation(courts.register_suffixes)
    number = re.compile(
        rf"(?P<type>{types})(?:\s*-?\s*Nr\.?)?\s*(?P<num>\d{{1,7}})(?![\w]|[./]\d)"
        rf"(?:\s(?P<suffix>{suffixes})(?![\w-]))?"
    )
    cue = re.compile(r"(?i:register|amtsgericht|eingetragen)|\bAG\b")
    court = re.compile(rf"(?:Amtsgerichts?|Registergericht:?\s*(?:Amtsgericht)?|AG)[\s\"',:]+(?P<place>{_PLACE})")
    return number, cue, court


def _scan_registers(text: str) -> Iterator[Identifier]:
    courts = court_table()
    number_re, cue_re, _ = _register_patterns()
    for m in number_re.finditer(text):
        if not _at_word_start(text, m.start(), "_-"):
            continue
        register = m.group("type").replace(" ", "")
        window = text[max(0, m.start() - 100) : m.end() + 60]
        if register in courts.register_types_needing_cue and not cue_re.search(window):
            continue
        normalized = f"{register} {m.group('num')}" + (f" {m.group('suffix')}" if m.group("suffix") else "")
        start = m.start("type")
        yield Identifier(
            kind="register_number",
            normalized=normalized,
            as_written=text[start : m.end()],
            start=start,
            end=m.end(),
            register_type=register,
            number=m.group("num"),
            court=_register_court(text, start, m.end()),
        )


def _register_court(text: str, start: int, end: int) -> str | None:
    """The Amtsgericht named nearest to a register number, before or after it."""
    _, _, court_re = _register_patterns()
    lo = max(0, start - 120)
    best: tuple[int, str] | None = None
    for m in court_re.finditer(text, lo, min(len(text), end + 80)):
        distance = start - m.end() if m.end() <= start else m.start() - end
        if distance >= 0 and (best is None or distance < best[0]):
            best = (distance, m.group("place"))
    if best is None:
        return None
    place = best[1]
    return f"AG {court_table().register_court_aliases.get(place, place)}"
