"""Case numbers (Aktenzeichen): "VIII ZR 123/20", "1 BvR 12/19", "2 C 43.93", with court and date nearby.

Triggered by the number/year at the end, then read backwards for register,
chamber and prefix, which the court table says are valid.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache

from .courts import CourtTable, alternation, court_before, court_table
from .dates import date_before
from .model import Identifier

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
    words = alternation(courts.az_suffixes)
    brackets = alternation(courts.az_bracket_suffixes)
    return (
        re.compile(rf"(?:(?:\.[A-ZÄÖÜ]{{1,4}})+|\s(?:{words})(?:,(?:{words}))*)(?![\wÄÖÜäöü-])"),
        re.compile(rf"\s?\((?:{brackets}|[A-ZÄÖÜ][a-zäöü]{{1,4}})\)"),
    )


def scan_case_numbers(text: str) -> Iterator[Identifier]:
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
            return lead
        lo = m.start() + 1
    return None


def _valid_case_number_lead(m: re.Match[str], courts: CourtTable) -> tuple[int, list[str], str | None] | None:
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
