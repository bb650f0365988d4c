"""Commercial and association register numbers ("HRB 12345 B") and the Amtsgericht that keeps them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache

from .courts import PLACE, alternation, court_table
from .model import Identifier
from .spans import at_word_start, contains_any


@cache
def _register_patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    courts = court_table()
    types = alternation([*courts.register_types, "HR A", "HR B"])
    suffixes = alternation(courts.register_suffixes)
    number = re.compile(
        rf"(?P<type>{types})(?:\s*-?\s*Nr\.?|\s*-)?\s*(?P<num>\d{{1,7}})(?![\w]|[./]\d)"  # "HRB - 44244"
        rf"(?:\s(?P<suffix>{suffixes})(?![\w-]))?"
    )
    cue = re.compile(r"(?i:register|amtsgericht|eingetragen)|\bAG\b")
    court = re.compile(rf"(?:Amtsgerichts?|Registergericht:?\s*(?:Amtsgericht)?|AG)[\s\"',:]+(?P<place>{PLACE})")
    return number, cue, court


# The register named in words and the number bare: "Handelsregister B des Amtsgerichts Nürnberg unter
# Nummer 39667", "im Vereinsregister des Amtsgerichts München Registernummer: 14188", "unter
# "Register-Nr. 79"", "Handelsregister B des Amtsgerichts Freiburg i. Br. Nr. 701234". Only the Handelsregister has departments (A or B), which must then be named.
_REGISTER_WORDS = {"Handels": None, "Vereins": "VR", "Partnerschafts": "PR", "Genossenschafts": "GnR"}
_REGISTER_WORD = r"(?P<register>Handels|Vereins|Partnerschafts|Genossenschafts)register"
_NUMBER_CUE = r"(?:(?:\bunter\s+(?:der\s+)?)?\b(?:Nummer|Nr\.?)|\bRegister(?:nummer|-Nr\.?))\s*:?\s*"
_LONG_FORM = re.compile(
    _REGISTER_WORD + r"s?\b(?P<between>[^\d\n]{0,80}?)" + _NUMBER_CUE + r"(?P<num>\d{1,7})(?![\w./])"
)
# The number first: "ist unter der derzeitigen Nr. 400266 in das Vereinsregister des Amtsgerichts
# Stuttgart eingetragen"; not for the Handelsregister, whose department would follow unread.
_NUMBER_FIRST = re.compile(
    r"unter\s+(?:der\s+)?(?:[a-zäöüß]+en\s+)?(?:Nummer|Nr\.?)\s*(?P<num>\d{1,7})\s+(?:in\s+das|im)\s+"
    r"(?P<register>Vereins|Partnerschafts|Genossenschafts)register\b"
)
# Both long forms name the register in words; a text without the word skips their scans (`in` finds
# a literal this long far faster than the alternation of the register words can be scanned for).
_LONG_FORM_LITERALS = ("register",)
_DEPARTMENT_WORD = r"(?:Abteilung\s+|Abt\.\s*)"
_DEPARTMENT = re.compile(r"(?:\A|\s)" + _DEPARTMENT_WORD + r"?(?P<abt>[AB])(?=[\s,])")
# The department named after the number: "Handelsregister des Amtsgerichts München unter der Nummer
# 98765 in Abteilung B"; here only with its word, since a bare letter after a number is a suffix ("HRB 123 B").
_DEPARTMENT_AFTER = re.compile(r",?\s*(?:in\s+(?:der\s+)?)?" + _DEPARTMENT_WORD + r"(?P<abt>[AB])(?![\w-])")
# The number first in a Handelsregister entry, with its department: "unter der Nummer 98765 in Abteilung B
# des Handelsregisters", "unter der Registernummer 12345 im Handelsregister Abteilung B".
_HR_NUMBER_FIRST = re.compile(
    r"unter\s+(?:der\s+)?(?:[a-zäöüß]+en\s+)?(?:Nummer|Nr\.?|Registernummer)\s*(?P<num>\d{1,7})\s+"
    r"(?:(?:in\s+(?:der\s+)?)?" + _DEPARTMENT_WORD + r"(?P<abt_before>[AB])\s+des\s+Handelsregisters"
    r"|(?:in\s+das|im)\s+Handelsregister,?\s*" + _DEPARTMENT_WORD + r"(?P<abt_after>[AB]))(?![\w-])"
)


def scan_registers(text: str) -> Iterator[Identifier]:
    yield from _short_forms(text)
    yield from _long_forms(text)


def _long_forms(text: str) -> Iterator[Identifier]:
    """A Handelsregister entry only with its department named: "Handelsregister des Amtsgerichts X unter
    Nummer 5" is either."""
    if not contains_any(text, _LONG_FORM_LITERALS):
        return
    number_first = (
        m for pattern in (_NUMBER_FIRST, _HR_NUMBER_FIRST) for m in pattern.finditer(text) if at_word_start(text, m.start())
    )
    for m in sorted([*_LONG_FORM.finditer(text), *number_first], key=lambda m: m.start()):
        found = _register_and_end(text, m)
        if found is None:
            continue
        register, end = found
        yield Identifier(
            kind="register_number",
            normalized=f"{register} {m.group('num')}",
            as_written=text[m.start() : end],
            start=m.start(),
            end=end,
            register_type=register,
            number=m.group("num"),
            court=_register_court(text, m.start("num"), m.end()),  # the court named inside the long form
        )


def _register_and_end(text: str, m: re.Match[str]) -> tuple[str, int] | None:
    """The register's abbreviation and where the entry ends; None for a Handelsregister whose department
    is named nowhere near its number (it is HRA or HRB, and a guess would be a wrong identifier)."""
    groups = m.groupdict()
    if "register" in groups:
        register = _REGISTER_WORDS[m.group("register")]
        if register is not None:
            return register, m.end()
        department = _DEPARTMENT.search(m.group("between")) if "between" in groups else None
        if department is not None:
            return "HR" + department.group("abt"), m.end()
        after = _DEPARTMENT_AFTER.match(text, m.end())
        return ("HR" + after.group("abt"), after.end()) if after is not None else None
    return "HR" + (m.group("abt_before") or m.group("abt_after")), m.end()


def _short_forms(text: str) -> Iterator[Identifier]:
    courts = court_table()
    number_re, cue_re, _ = _register_patterns()
    for m in number_re.finditer(text):
        if not at_word_start(text, m.start(), "_-"):
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
