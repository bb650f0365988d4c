"""EU references: acts ("Verordnung (EU) 2016/679", "RL 95/46/EG", CELEX, ELI) and EuGH/EuG cases.

The act patterns are also used by `law_names`, where an EU act closes a chain
of articles ("Art. 6 Abs. 1 der Verordnung (EU) 2016/679").

Implementing and delegated acts keep their own designation: "Durchführungsverordnung
(EU) 2019/947" is "DVO (EU) 2019/947", "Delegierte Verordnung (EU) 2019/945" is
"DelVO (EU) 2019/945", likewise DelRL and DurchfB (Durchführungsbeschluss). They share
the CELEX number of the plain form, so `designation_variants` names the other forms of
the same act for a query (an act cited as "Verordnung (EU) 2019/947" is the same act).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .dates import date_before
from .laws import Law, law_table
from .model import Identifier
from .spans import SpanIndex, at_word_start, contains_any

# Titles are also printed in capitals ("DELEGIERTE VERORDNUNG (EU) 2019/945"), so those spellings are listed.
# A lower-case or English qualifier ("die delegierte Verordnung", "Implementing Regulation") is read before the
# match (_QUALIFIER): in the alternation, a first letter as common as "d" makes this scan ten times slower.
_EU_TYPE = (
    r"(?P<type>Durchführungsverordnung|DURCHFÜHRUNGSVERORDNUNG|Delegierten?\s+Verordnung|DELEGIERTEN?\s+VERORDNUNG|"
    r"Verordnung|VERORDNUNG|Delegierten?\s+Richtlinie|DELEGIERTEN?\s+RICHTLINIE|Richtlinie|RICHTLINIE|"
    r"Rahmenbeschluss|Durchführungsbeschluss|DURCHFÜHRUNGSBESCHLUSS|Beschluss|BESCHLUSS|"
    r"Regulation|Directive|Decision|DurchführungsVO|DelVO|DVO|VO|RL)"
)
_QUALIFIER = re.compile(r"(?:(?P<delegated>delegierten?|Delegated)|(?P<implementing>Implementing))\s+\Z")
_QUALIFIED = {("delegated", "VO"): "DelVO", ("delegated", "RL"): "DelRL", ("implementing", "VO"): "DVO",
              ("implementing", "Beschluss"): "DurchfB"}
# the number after the type word: "(EU) 2016/679", "(EG) Nr. 1393/2007", "2006/112/EG"
_ACT_NUMBER = (
    r"(?:\((?P<org>EU|EG|EWG|EC|EEC|Euratom|EGKS)\)\s*)?(?:(?P<nr>Nr\.?|No\.?)\s*)?"
    r"(?P<a>\d{1,4})/(?P<b>\d{1,4})(?:/(?P<suffix>EU|EG|EWG|EC|EEC|EGKS|Euratom))?(?![\d/])"
)
_EU_ACT_CORE = _EU_TYPE + r"\s*" + _ACT_NUMBER
# One plural type word for a list of acts: "der Verordnungen (EU) Nr. 228/2013, (EU) Nr. 652/2014 und
# (EU) Nr. 1143/2014"; each number is read as after the singular.
_PLURAL_TYPE = re.compile(
    r"(?P<type>Durchführungsverordnungen|Delegierten\s+Verordnungen|Verordnungen|Delegierten\s+Richtlinien|"
    r"Richtlinien|Durchführungsbeschlüsse|Beschlüsse|Regulations|Directives|Decisions)\s*(?=[(\d]|N[ro])"
)
_PLURAL_TYPE_WORDS = {
    "verordnungen": "verordnung", "durchführungsverordnungen": "durchführungsverordnung",
    "delegierten verordnungen": "delegierte verordnung", "richtlinien": "richtlinie",
    "delegierten richtlinien": "delegierte richtlinie", "beschlüsse": "beschluss",
    "durchführungsbeschlüsse": "durchführungsbeschluss", "regulations": "regulation", "directives": "directive",
    "decisions": "decision",
}
# in every plural type word; long literals, so `in` beats scanning for the alternation's capitals
_PLURAL_LITERALS = ("erordnungen", "ichtlinien", "eschlüsse", "Regulations", "Directives", "Decisions")
_ACT_NUMBER_AT = re.compile(_ACT_NUMBER)
_LIST_JOIN = re.compile(r"\s*(?:,\s*(?:und|sowie|oder|and|or)?|und|sowie|oder|and|or)\s*")
# One pass per form: a single alternation of all four is several times slower in `re`. A form
# whose regex cannot skip ahead fast (it starts with a digit, or a literal common in any text)
# comes with the literals every match of it holds, and a text without them skips its pass:
# `in` is 2-5x faster than those scans. The type words need none: their scan skips ahead already,
# and testing eleven literals costs more than it saves.
_EU_ACT_PATTERNS: tuple[tuple[re.Pattern[str], tuple[str, ...] | None], ...] = (
    (re.compile(_EU_ACT_CORE), None),
    (re.compile(r"(?P<ba>\d\d(?:\d\d)?)/(?P<bb>\d{1,4})/(?P<bsuffix>EU|EG|EWG|EC|EEC)(?![\w])"), ("/E",)),  # "2009/24/EC"
    (
        re.compile(r"(?:CELEX|celex|Celex)(?:-?Nr\.?)?(?::|%3A|\s)\s?(?P<celex>[1-9]\d{4}[A-Z]{1,2}\d{1,4})"),
        ("CELEX", "celex", "Celex"),
    ),
    (re.compile(r"eli/(?P<eli>(?:reg|dir|dec)(?:_impl|_del)?)/(?P<eli_year>\d{4})/(?P<eli_num>\d{1,4})(?!\d)"), ("eli/",)),
)
# an ordinal word before the act ("der Achten Richtlinie"), but "Delegierten" belongs to the act's type
EU_ACT_AFTER = re.compile(
    r"(?:(?:des|der|dem|den|einer|of(?:\s+the)?)\s+)?(?:(?:(?!Delegierten\s)[A-ZÄÖÜ][a-zäöü]*ten|\d{1,2}\.)\s+)?"
    r"(?:(?:Commission\s+)?(?:delegierten?|Delegated|Implementing)\s+)?" + _EU_ACT_CORE
)
EU_ACT_BEFORE = re.compile(_EU_ACT_CORE + r"\s*,?\s*\Z")
_EU_CASE = re.compile(r"(?P<court>[CT])-(?P<num>\d{1,4})/(?P<yy>\d{2})(?![\d/])(?:\s?(?P<appeal>P)(?![\w]))?")
EU_CASE_LITERALS = ("C-", "T-")
# designation -> CELEX type letter; the first designation of a letter is the plain form a CELEX number alone gets
_CELEX_TYPES = {"VO": "R", "DVO": "R", "DelVO": "R", "RL": "L", "DelRL": "L", "Beschluss": "D", "DurchfB": "D"}
_PLAIN = {"R": "VO", "L": "RL", "D": "Beschluss"}
_ELI_KINDS = {"reg": "VO", "reg_impl": "DVO", "reg_del": "DelVO", "dir": "RL", "dir_del": "DelRL",
              "dec": "Beschluss", "dec_impl": "DurchfB"}
_TYPE_WORDS = {
    "verordnung": "VO", "vo": "VO", "regulation": "VO",
    "durchführungsverordnung": "DVO", "durchführungsvo": "DVO", "dvo": "DVO", "implementing regulation": "DVO",
    "delegierte verordnung": "DelVO", "delegierten verordnung": "DelVO", "delegated regulation": "DelVO",
    "delvo": "DelVO",
    "richtlinie": "RL", "rl": "RL", "directive": "RL",
    "delegierte richtlinie": "DelRL", "delegierten richtlinie": "DelRL", "delegated directive": "DelRL",
    "beschluss": "Beschluss", "decision": "Beschluss", "rahmenbeschluss": "Beschluss",
    "durchführungsbeschluss": "DurchfB", "implementing decision": "DurchfB",
}
_DESIGNATION = re.compile(r"(?P<kind>" + "|".join(sorted(_CELEX_TYPES, key=len, reverse=True)) + r")(?= )")
_CELEX = re.compile(r"(?P<sector>3)(?P<year>\d{4})(?P<type>[RLD])(?P<num>\d{1,4})")


def scan_eu_acts(text: str) -> list[Identifier]:
    found = [
        m
        for pattern, literals in _EU_ACT_PATTERNS
        if literals is None or contains_any(text, literals)
        for m in pattern.finditer(text)
    ]
    return sorted([*_eu_act_identifiers(text, found), *_listed_acts(text)], key=lambda i: i.start)


def _listed_acts(text: str) -> Iterator[Identifier]:
    """The acts of a list after a plural type word, the first one's span from that word."""
    if not contains_any(text, _PLURAL_LITERALS):
        return
    for m in _PLURAL_TYPE.finditer(text):
        if not at_word_start(text, m.start()):
            continue
        kind = _qualified(m, _TYPE_WORDS[_PLURAL_TYPE_WORDS[" ".join(m.group("type").split()).casefold()]])
        start, pos = m.start(), m.end()
        while (item := _ACT_NUMBER_AT.match(text, pos)) is not None:
            act = _act_of_number(kind, item.groupdict())
            if act is not None:
                yield Identifier(kind="eu_reference", normalized=act.citation, as_written=text[start : item.end()],
                                 start=start, end=item.end(), law=act.citation, celex=act.celex)
            join = _LIST_JOIN.match(text, item.end())
            if join is None or join.end() == item.end():
                break
            start = pos = join.end()


def _eu_act_identifiers(text: str, matches: list[re.Match[str]]) -> Iterator[Identifier]:
    for m in matches:
        groups = m.groupdict()
        if not (groups.get("celex") or groups.get("eli") or at_word_start(text, m.start(), "/_")):
            continue
        act = eu_act_from_match(m)
        if act is not None:
            q = qualifier_before(m) if groups.get("type") else None
            start = q.start() if q else m.start()
            yield Identifier(
                kind="eu_reference",
                normalized=act.citation,
                as_written=text[start : m.end()],
                start=start,
                end=m.end(),
                law=act.citation,
                celex=act.celex,
            )


def eu_act_from_match(m: re.Match[str]) -> Law | None:
    groups = m.groupdict()
    if groups.get("celex"):
        c = _CELEX.fullmatch(groups["celex"])
        if c is None:
            return None
        return _eu_act(_PLAIN[c.group("type")], int(c.group("year")), int(c.group("num")), None)
    if groups.get("eli"):
        return _eu_act(_ELI_KINDS[groups["eli"]], int(groups["eli_year"]), int(groups["eli_num"]), None)
    if groups.get("ba"):
        return _eu_act("RL", _year4(groups["ba"]), int(groups["bb"]), groups["bsuffix"])
    return _act_of_number(_qualified(m, _TYPE_WORDS[" ".join(groups["type"].split()).casefold()]), groups)


def _act_of_number(kind: str, groups: dict[str, str | None]) -> Law | None:
    """The act a type (VO, RL, ...) and the groups of _ACT_NUMBER name, or None if they name none."""
    org, a, b = groups["org"], groups["a"] or "", groups["b"] or ""
    if _CELEX_TYPES[kind] == "D" and not (org or groups["suffix"]):
        return None  # "Beschluss 1/19" is a court's decision, not the EU's
    if _CELEX_TYPES[kind] != "R":
        return _eu_act(kind, _year4(a), int(b), groups["suffix"] or org)  # directives and decisions: year/number
    # regulations: number/year until 2014 ("Nr. 1215/2012"), year/number since 2015 ("2016/679")
    if not groups["nr"] and len(a) == 4 and 2015 <= int(a) <= 2099 and org in (None, "EU"):
        return _eu_act(kind, int(a), int(b), org)
    if len(b) not in (2, 4):
        return None
    return _eu_act(kind, _year4(b), int(a), org)


def _qualified(m: re.Match[str], kind: str) -> str:
    """ "die delegierte Verordnung", "Commission Implementing Regulation": the word before the type decides."""
    q = qualifier_before(m)
    if q is None:
        return kind
    return _QUALIFIED.get(("delegated" if q.group("delegated") else "implementing", kind), kind)


def qualifier_before(m: re.Match[str]) -> re.Match[str] | None:
    type_start = m.start("type")
    return _QUALIFIER.search(m.string, max(0, type_start - 14), type_start)


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
    if _CELEX_TYPES[kind] == "R":
        if year >= 2015:
            designation = f"{kind} (EU) {year}/{number}"
        else:
            designation = f"{kind} ({_eu_org(org, year)}) Nr. {number}/{short_year}"
    elif year >= 2015:
        designation = f"{kind} (EU) {year}/{number}"
    else:
        designation = f"{kind} {short_year}/{number}/{_eu_org(org, year)}"
    return Law(abbr=designation, celex=celex, cite_as=designation)


def designation_variants(citation: str) -> tuple[str, ...]:
    """The same act under its sibling designations: "DVO (EU) 2019/947" -> VO and DelVO forms.

    Since 2015 one number series per year covers every regulation (directive, decision), and
    before that the number series was per CELEX type as well, so the variants name one act.
    """
    m = _DESIGNATION.match(citation)
    if m is None:
        return ()
    letter = _CELEX_TYPES[m.group("kind")]
    rest = citation[m.end() :]
    return tuple(k + rest for k, t in _CELEX_TYPES.items() if t == letter and k != m.group("kind"))


def dedupe_eu_acts(acts: list[Identifier], statutes: list[Identifier]) -> list[Identifier]:
    """An act is reported once per text, and not at all when one of its articles is cited."""
    seen = {i.celex for i in statutes if i.kind == "eu_reference" and i.celex}
    spans = SpanIndex((i.start, i.end) for i in statutes)
    out = []
    for act in acts:
        if act.celex in seen or spans.overlaps(act.start, act.end):
            continue
        seen.add(act.celex)
        out.append(act)
    return out


def scan_eu_cases(text: str) -> Iterator[Identifier]:
    if not contains_any(text, EU_CASE_LITERALS):
        return
    for m in _EU_CASE.finditer(text):
        if not at_word_start(text, m.start(), "_-"):
            continue
        court = "EuGH" if m.group("court") == "C" else "EuG"
        number = f"{m.group('court')}-{m.group('num')}/{m.group('yy')}" + (" P" if m.group("appeal") else "")
        year = _year4(m.group("yy"))
        celex = f"6{year}{m.group('court')}J{int(m.group('num')):04d}"
        date = date_before(text, m.start())
        common = {"as_written": m.group(), "start": m.start(), "end": m.end(), "court": court}
        yield Identifier(kind="case_number", normalized=number, date=date, number=number, **common)
        yield Identifier(kind="eu_reference", normalized=f"{court} {number}", celex=celex, **common)
