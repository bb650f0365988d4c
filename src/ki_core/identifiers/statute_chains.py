"""One statute citation chain read after its head: "§ 573 Abs. 2 Nr. 1, 3 und Abs. 4 Satz 2".

A chain is read by a fixed list of small steps (designators, ranges, "ff.",
Roman Absätze, list items); each leaf of the chain is one norm. Which law a
chain belongs to is decided outside, by `law_names` and `statutes`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from .spans import skip_ws

# levels of a citation; PART is "Art. 13 Teil B"
SEC, SUBSEC, PART, ABS, UABS, SATZ, HS, NR, BUCHST, DBUCHST, ALT = range(11)

SEC_NUM = re.compile(r"(\d{1,4})(?:([a-z])(?![a-zäöüß])|\s([a-z])(?![\w.]))?(?!\d|[./]\d)")
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
LIST_SEP = re.compile(
    r"\s*(?:,(?:\s*(?:und|oder|sowie|bzw\.)(?![\w]))?|(?:und|oder|sowie|bzw\.|u\.)(?![\w])"
    r"|i\.\s?V\.\s?(?:m\.|mit(?![\w]))|in Verbindung mit(?![\w])|iVm(?![\w]))\s*"
)
# a bare number followed by one of these is a quantity, not another norm ("§ 5 und 10 Jahre")
_QUANTITY_AFTER = re.compile(
    r"\s*(?:Jahre|Jahren|Monate|Monaten|Wochen|Tage|Tagen|Stunden|Prozent|Euro|EUR|DM|%)(?![\w])"
)
# "... und § 7c und 2. die Durchführung": "2." numbers the next item of an enumeration
_ENUMERATION_AFTER = re.compile(r"\.\s+[a-zäöüß]")


@dataclass(frozen=True)
class Part:
    level: int
    label: str  # "§", "Art.", "§" (nested), "Abs.", "Satz", ...; "(" marks "(1)" resolved at rendering
    value: str
    suffix: str = ""  # " ff." / " f."


@dataclass
class Chain:
    start: int
    end: int
    leaves: list[list[Part]]
    is_par: bool  # "§" rather than "Art."
    plural: bool  # "§§": a bare number after a sub-level may start the next section


@dataclass
class _ChainState:
    """A chain being read: the path of the current norm, the norms already complete, the read position."""

    text: str
    path: list[Part]
    pos: int
    is_par: bool
    plural: bool
    leaves: list[list[Part]] = field(default_factory=list)
    roman: bool = False  # Absätze written as Roman numerals: a bare number after one is a Satz

    def child(self, part: Part, end: int) -> bool:
        self.path.append(part)
        self.pos = end
        return True

    def amend(self, end: int, **changes: str) -> bool:
        self.path[-1] = replace(self.path[-1], **changes)
        self.pos = end
        return True


def parse_chain(text: str, start: int, pos: int, path: list[Part], is_par: bool, plural: bool) -> Chain:
    state = _ChainState(text, path, pos, is_par, plural)
    while _took_a_step(state):
        pass
    state.leaves.append(state.path)
    return Chain(start, state.pos, state.leaves, is_par, plural)


def _took_a_step(state: _ChainState) -> bool:
    """The first step that reads on from the position takes it; a loop, not any() over a generator,
    because this runs for every part of every chain."""
    for step in _CHAIN_STEPS:
        if step(state):
            return True
    return False


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
    return bool(m) and s.child(Part(SUBSEC, "§", m.group(1)), m.end())  # type: ignore[union-attr]


def _step_designator(s: _ChainState) -> bool:
    d = _designator_at(s.text, s.pos)
    if d is None:
        return False
    s.roman = False
    return s.child(Part(d[0], d[1], d[2]), d[3])


def _step_ordinal(s: _ChainState) -> bool:
    m = _ORDINAL_DESIGNATOR.match(s.text, s.pos)
    if m is None:
        return False
    value = _ORDINALS[m.group("word")] if m.group("word") else m.group("num")
    what = m.group("what")
    level, label = (HS, "Halbsatz") if what[0] == "H" else (ALT, "Var." if what[0] == "V" else "Alt.")
    return s.child(Part(level, label, value), m.end())


def _step_enumerated_letter(s: _ChainState) -> bool:
    m = _ENUM_LETTER.match(s.text, s.pos) if s.path[-1].level == NR else None
    return bool(m) and s.child(Part(BUCHST, "Buchst.", m.group("v")), m.end())  # type: ignore[union-attr]


def _step_parenthesized(s: _ChainState) -> bool:
    m = _PAREN_VALUE.match(s.text, s.pos)
    if m is None:
        return False
    part = Part(ABS, "(", m.group("num")) if m.group("num") else Part(BUCHST, "Buchst.", m.group("letter"))
    return s.child(part, m.end())


def _step_roman(s: _ChainState) -> bool:
    """'§ 10 II 1 BGB': a Roman Absatz right after the section, then an arabic Satz."""
    p = skip_ws(s.text, s.pos)
    if p == s.pos:
        return False
    if len(s.path) == 1 and (m := _ROMAN.match(s.text, p)) and m.group(1):
        s.roman = True
        return s.child(Part(ABS, "Abs.", str(_roman_to_int(m.group(1)))), m.end())
    if s.roman and s.path[-1].level == ABS and (m := _NUM_VALUE.match(s.text, p)):
        return s.child(Part(SATZ, "Satz", m.group(1)), m.end())
    return False


def _step_list_item(s: _ChainState) -> bool:
    sep = LIST_SEP.match(s.text, s.pos)
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
    text: str, pos: int, path: list[Part], roman: bool, plural: bool
) -> tuple[list[Part], int] | None:
    """The path that a list item after ',', 'und', ... starts, or None if the list ends here."""
    if d := _designator_at(text, pos):
        return _relevel(path, d[0]) + [Part(d[0], d[1], d[2])], d[3]
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
        return [Part(SEC, path[0].label, _sec_value_at(text, pos) or value)], end
    following = _designator_at(text, skip_ws(text, end))
    if following is not None:
        used = [i for i, part in enumerate(path) if part.level == following[0] and i > 0]
        if used and used[0] > 1 and (path[used[0] - 1].level in _LETTER_LEVELS) == (level in _LETTER_LEVELS):
            # "Abs. 1 Nr. 2, 3 Nr. 4": the number sits one level above the repeated designator
            parent = path[used[0] - 1]
            return path[: used[0] - 1] + [replace(parent, value=value, suffix="")], end
    if level == SEC:
        value = _sec_value_at(text, pos) or value
    return path[:-1] + [replace(cur, value=value, suffix="")], end


def _starts_next_section(text: str, pos: int, end: int, path: list[Part], level: int, plural: bool) -> bool:
    """Whether a bare number after ',' / 'und' below the section level is the next section.

    It is when a designator follows that this path already used ("§§ 92 Abs. 1, 97 Abs. 1") or that
    sits above the current level ("§§ 3 Nr. 40, 3c Abs. 2"); after '§§' also when it is followed by
    "ff." or is larger than the section ("§§ 823 Abs. 1, 249 ff.", "§§ 12 Abs. 1, 14").
    """
    if level in _LETTER_LEVELS and _LETTER_VALUE.match(text, pos):
        return False
    following = _designator_at(text, skip_ws(text, end))
    if following is not None:
        above = [part.level for part in path if part.level < following[0]]
        used_at_top = any(part.level == following[0] for part in path[1:2])
        return used_at_top or (following[0] < level and above == [SEC])
    if not plural:
        return False
    value = _sec_value_at(text, pos) or ""
    return bool(_FF.match(text, end)) or _leading_int(value) > _leading_int(path[0].value)


def _relevel(path: list[Part], level: int) -> list[Part]:
    for i, part in enumerate(path):
        if i > 0 and part.level == level:
            return path[:i]
    shallower = [i for i, part in enumerate(path) if part.level < level]
    return path[: shallower[-1] + 1]


def _designator_at(text: str, pos: int) -> tuple[int, str, str, int] | None:
    m = _DESIGNATOR.match(text, skip_ws(text, pos))
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
        m = SEC_NUM.match(text, pos)
        return (value, m.end()) if value and m else None
    m = _NUM_VALUE.match(text, pos)
    return (m.group(1), m.end()) if m else None


def _sec_value_at(text: str, pos: int) -> str | None:
    m = SEC_NUM.match(text, pos)
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
