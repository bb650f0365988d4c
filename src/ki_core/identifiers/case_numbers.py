"""Case numbers (Aktenzeichen): "VIII ZR 123/20", "1 BvR 12/19", "2 C 43.93", with court and date nearby.

Triggered by the number/year at the end, then read backwards for register,
chamber and prefix, which the court table says are valid. Criminal files often carry
two registers, the court's and the one that holds the number ("3 KLs 101 Js 47753/18",
"1 OLG 151 SsBs 72/20"), a senate in brackets before them and a count in brackets after
them ("(1 B) 53 Ss-OWi 675/19 (398/19)"): all of it is one case number. Berlin writes the
department before the prosecutor's file ("(318 OWi) 3034 Js-OWi 1021/20 (88/20)"), Dortmund
joins the registers and the count with dashes ("729 OWi-251 Js 287/22-27/22").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache

from .courts import CourtTable, alternation, court_before, court_table
from .dates import date_before
from .model import Identifier

# number/year ("12/19"; a prosecutor's up to six digits, "400 Js 123456/19"), BVerwG number.year
# ("43.93"), Bavarian year.number ("19.1234", kept as written)
_AZ_TRIGGER = re.compile(r"\d(?:\d{0,5}[/.]\d{2}|\d\.\d{3,5})(?!\.?\d|/|,\d)")
# "Az.5 U 12/21": the abbreviation's full stop may touch the file number, no other full stop may
_AZ_LEAD = re.compile(
    r"(?:(?<=[\s(\[\"'„“,;:–-])|(?<=Az\.)|(?<=AZ\.)|\A)"
    r"(?:(?P<prefix>[A-ZÄÖÜ][A-Za-z]{0,2})\s+(?=\d|[IVX]{1,4}-))?"
    r"(?:(?P<pre2>[IVX]{1,4}|\d{1,2})-)?"
    r"(?:(?P<chamber>\d{1,4}[a-z]?|[IVX]{1,5}[a-z]?)\s+)?"
    r"(?P<reg>(?:[A-ZÄÖÜ][A-Za-zÄÖÜäöü]{0,5}(?:-[A-Z][A-Za-z]{0,4})?|\([A-Za-zÄÖÜäöü]{1,5}\))"
    r"(?:\s*\([A-Za-zÄÖÜäöü]{1,5}\)|\s+[A-ZÄÖÜ][A-Za-zÄÖÜäöü]{0,5}(?:-[A-Z][A-Za-z]{0,4})?){0,2})"
    r"\s+\Z"
)
_AZ_DASH_LEAD = re.compile(r"(?:(?<=[\s(\"'])|\A)(?P<chamber>\d{1,3})\s-\s\Z")
_LOWER_RUN = re.compile(r"[a-zäöüß]{4}")
_SENATE_BEFORE = re.compile(
    r"(?:(?<=[\s\"'„“,;:–-])|\A)[(\[](?:(?P<senate>\d{1,2}(?:\s?[A-Z])?)|(?P<department>\d{1,3}\s(?:OWi|Ds|Cs|Ls)))[)\]]\s+\Z"
)
_COUNT_AFTER = re.compile(r"\s?[(\[](?P<count>\d{1,5}/\d{2}(?:\s(?:OWi|Js))?)[)\]]")
# Dortmund's count after a dash ("251 Js 287/22-27/22"), read only after a prosecutor's file
_DASH_COUNT_AFTER = re.compile(r"-(?P<count>\d{1,5}/\d{2})(?![\d/.])")
# only a prosecutor's department has four digits ("2010 Js 66317/16"); elsewhere that is a year
_FOUR_DIGIT_CHAMBER_REGISTERS = frozenset({"Js", "Js-OWi"})


@cache
def _az_suffix_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    courts = court_table()
    words = alternation(courts.az_suffixes)
    brackets = alternation(courts.az_bracket_suffixes)
    return (
        # "-B" marks the appeal against a ruling of that kind: "L 7 AS 1214/07 ER-B" (LSG Baden-Württemberg)
        re.compile(rf"(?:(?:\.[A-ZÄÖÜ]{{1,4}})+|\s(?:{words})(?:-B)?(?:,(?:{words}))*)(?![\wÄÖÜäöü-])"),
        # a known bracket suffix may follow a dash: "14 W 52/24 - (Wx)"
        re.compile(rf"(?:\s[-–]\s(?=\((?:{brackets})\)))?\s?\((?:{brackets}|[A-ZÄÖÜ][a-zäöü]{{1,4}})\)"),
    )


@cache
def _outer_register_pattern() -> re.Pattern[str]:
    outer = alternation(court_table().az_outer_registers)
    return re.compile(rf"(?:(?<=[\s(\[\"'„“,;:–-])|\A)(?P<chamber>\d{{1,3}}[a-z]?)\s+(?P<reg>{outer})(?P<sep>\s+|-)\Z")


def core_case_number(normalized: str) -> str | None:
    """The part that carries the number ("101 Js 47753/18" of "3 KLs 101 Js 47753/18"), or None if that is all.

    Documents and queries often cite only this part; the identifier leg asks for it too.
    """
    outer = alternation(court_table().az_outer_registers)
    m = re.fullmatch(
        rf"(?:\((?:\d{{1,2}}(?: [A-Z])?|\d{{1,3}} [A-Za-z]+)\) )?(?:\d{{1,3}}[a-z]? (?:{outer})[ -](?=\d))?(?P<core>.+?)"
        rf"(?: \(\d{{1,5}}/\d{{2}}(?: OWi| Js)?\)|-\d{{1,5}}/\d{{2}})?",
        normalized,
    )
    core = m.group("core") if m else normalized
    return core if core != normalized else None


def scan_case_numbers(text: str) -> Iterator[Identifier]:
    courts = court_table()
    word_suffix, bracket_suffix = _az_suffix_patterns()
    taken_until = 0  # the count in "675/19 (398/19)" is part of the case number before it
    for m in _AZ_TRIGGER.finditer(text):
        if m.start() < taken_until or (m.start() and text[m.start() - 1] in "0123456789/.,"):
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
        if s := _COUNT_AFTER.match(text, end):
            suffix, end = f"{suffix} ({s.group('count')})", s.end()
        elif "Js" in parts and (s := _DASH_COUNT_AFTER.match(text, end)):
            suffix, end = f"{suffix}-{s.group('count')}", s.end()
        taken_until = end
        num, year = re.split(r"[/.]", m.group(), maxsplit=1)
        number = f"{num}/{year}" if len(year) == 2 else m.group()  # Bavarian year.number stays as written
        suffix = re.sub(r"\s+", " ", re.sub(r"\s*[-–]\s*\(", " (", suffix))
        normalized = " ".join([*parts, number]) + suffix
        yield Identifier(
            kind="case_number",
            normalized=normalized,
            as_written=text[start:end],
            start=start,
            end=end,
            court=court_before(text, start) or court,
            date=date_before(text, start),
            number=number,
        )


def _case_number_lead(text: str, num_start: int, courts: CourtTable) -> tuple[int, list[str], str | None] | None:
    """Start offset, normalized parts before the number ('XII', 'ZB') and the court the register implies."""
    lo = max(0, num_start - 48)
    if d := _AZ_DASH_LEAD.search(text, lo, num_start):
        return d.start(), [d.group("chamber"), "-"], None
    # the leftmost reading may swallow a preceding word ("und VIII ZR"); try later starts until one is valid
    while (m := _AZ_LEAD.search(text, lo, num_start)) is not None:
        lead = _valid_case_number_lead(m, courts)
        if lead is not None:
            return _widened_lead(text, *lead, courts)
        lo = m.start() + 1
    return None


def _widened_lead(
    text: str, start: int, parts: list[str], court: str | None, courts: CourtTable
) -> tuple[int, list[str], str | None]:
    """The court's register before a second register ("3 KLs" + "101 Js"), then a senate in brackets ("(1 B)")."""
    lo = max(0, start - 24)
    if parts[-1] in courts.az_inner_registers and len(parts) == 2 and parts[0][0].isdigit():
        if m := _outer_register_pattern().search(text, lo, start):
            outer = [m.group("chamber"), m.group("reg")]
            # "729 OWi-251 Js": the dash stays, it joins the two registers as the court writes them
            joined = [outer[0], f"{outer[1]}-{parts[0]}", parts[1]] if m.group("sep") == "-" else [*outer, *parts]
            start, parts = m.start(), joined
    if m := _SENATE_BEFORE.search(text, max(0, start - 12), start):
        senate = m.group("senate")
        bracket = " ".join(re.findall(r"[0-9]+|[A-Z]", senate)) if senate else m.group("department")
        start, parts = m.start(), [f"({bracket})", *parts]
    return start, parts, court


def _valid_case_number_lead(m: re.Match[str], courts: CourtTable) -> tuple[int, list[str], str | None] | None:
    reg = re.sub(r"\s+", " ", re.sub(r"\s*\(", " (", m.group("reg"))).strip()
    for token in reg.split():
        if token.strip("()") in courts.az_not_registers or _LOWER_RUN.search(token):
            return None
    prefix, chamber = m.group("prefix"), m.group("chamber")
    if chamber and len(chamber) >= 4 and chamber[:4].isdigit() and reg not in _FOUR_DIGIT_CHAMBER_REGISTERS:
        return None
    start = m.start()
    if prefix and prefix not in courts.az_prefixes:
        prefix, start = None, m.start("pre2") if m.group("pre2") else m.start("chamber") if chamber else m.start("reg")
    if chamber is None and (prefix or m.group("pre2") or reg not in courts.az_chamberless):
        return None
    lead = ((m.group("pre2") + "-") if m.group("pre2") else "") + (chamber or "")
    parts = [p for p in (prefix, lead, reg) if p]
    return start, parts, _court_of_register(courts, prefix, chamber, reg)


def _court_of_register(courts: CourtTable, prefix: str | None, chamber: str | None, reg: str) -> str | None:
    roman_chamber = bool(chamber and chamber[0] in "IVX")
    court = courts.az_register_courts.get(reg)
    if court == "BGH" and chamber and not roman_chamber:
        return None  # ZR/ZB senates of the BGH are Roman; "15 ZB 19.123" is a Bavarian VGH file
    if court is None and roman_chamber and reg in ("R", "B", "S", "E"):
        return "BFH"
    if court is None and prefix in ("B", "L", "S") and chamber and chamber[0].isdigit() and reg.isupper():
        return {"B": "BSG", "L": "LSG", "S": "SG"}[prefix]
    return court
