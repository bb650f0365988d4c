"""Commercial and association register numbers ("HRB 12345 B") and the Amtsgericht that keeps them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache

from .courts import PLACE, alternation, court_table
from .model import Identifier
from .spans import at_word_start


@cache
def _register_patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    courts = court_table()
    types = alternation([*courts.register_types, "HR A", "HR B"])
    suffixes = alternation(courts.register_suffixes)
    number = re.compile(
        rf"(?P<type>{types})(?:\s*-?\s*Nr\.?)?\s*(?P<num>\d{{1,7}})(?![\w]|[./]\d)"
        rf"(?:\s(?P<suffix>{suffixes})(?![\w-]))?"
    )
    cue = re.compile(r"(?i:register|amtsgericht|eingetragen)|\bAG\b")
    court = re.compile(rf"(?:Amtsgerichts?|Registergericht:?\s*(?:Amtsgericht)?|AG)[\s\"',:]+(?P<place>{PLACE})")
    return number, cue, court


def scan_registers(text: str) -> Iterator[Identifier]:
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
