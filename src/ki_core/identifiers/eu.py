"""EU references: acts ("Verordnung (EU) 2016/679", "RL 95/46/EG", CELEX, ELI) and EuGH/EuG cases.

The act patterns are also used by `law_names`, where an EU act closes a chain
of articles ("Art. 6 Abs. 1 der Verordnung (EU) 2016/679").
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .dates import date_before
from .laws import Law, law_table
from .model import Identifier
from .spans import SpanIndex, at_word_start

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
EU_ACT_AFTER = re.compile(
    r"(?:(?:des|der|dem|den|einer|of(?:\s+the)?)\s+)?(?:(?:[A-ZÄÖÜ][a-zäöü]*ten|\d{1,2}\.)\s+)?" + _EU_ACT_CORE
)
EU_ACT_BEFORE = re.compile(_EU_ACT_CORE + r"\s*,?\s*\Z")
_EU_CASE = re.compile(r"(?P<court>[CT])-(?P<num>\d{1,4})/(?P<yy>\d{2})(?![\d/])(?:\s?(?P<appeal>P)(?![\w]))?")
_CELEX_TYPES = {"VO": "R", "RL": "L", "Beschluss": "D"}
_DIRECTIVE_WORDS = frozenset({"Richtlinie", "RL", "Directive"})
_DECISION_WORDS = frozenset({"Beschluss", "Decision", "Rahmenbeschluss"})
_CELEX = re.compile(r"(?P<sector>3)(?P<year>\d{4})(?P<type>[RLD])(?P<num>\d{1,4})")


def scan_eu_acts(text: str) -> list[Identifier]:
    found = [m for pattern in _EU_ACT_PATTERNS for m in pattern.finditer(text)]
    return sorted(_eu_act_identifiers(text, found), key=lambda i: i.start)


def _eu_act_identifiers(text: str, matches: list[re.Match[str]]) -> Iterator[Identifier]:
    for m in matches:
        groups = m.groupdict()
        if not (groups.get("celex") or groups.get("eli") or at_word_start(text, m.start(), "/_")):
            continue
        act = eu_act_from_match(m)
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


def eu_act_from_match(m: re.Match[str]) -> Law | None:
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
