"""Which law a statute citation names: written after it ("BGB", "des Aktiengesetzes"), before it
("GG Art 80", "Palandt/Grüneberg, BGB, § 280"), as an EU act, or only as some other instrument."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .courts import court_table
from .eu import EU_ACT_AFTER, EU_ACT_BEFORE, eu_act_from_match
from .laws import Law, law_table, name_key
from .spans import skip_ws

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
class LawHit:
    law: Law | None
    start: int
    end: int
    blocked: bool = False  # another instrument is named ("des Vertrages"): no fallback to the context law
    context: bool = False  # "dieses Gesetzes": the context law, named


def law_after(text: str, pos: int) -> LawHit | None:
    """The law named right after a chain: 'BGB', 'des Aktiengesetzes', 'der Verordnung (EU) 2016/679'."""
    p = skip_ws(text, pos)
    if p >= len(text) or not text[p].isalpha():
        return None
    if m := _THIS_LAW.match(text, pos):
        return LawHit(None, p, m.end(), context=True)
    if m := EU_ACT_AFTER.match(text, p):
        act = eu_act_from_match(m)
        if act is not None:
            return LawHit(act, p, m.end())
    words = _words(text, p, 2)
    first = 1 if words[0][0] in _ARTICLE_WORDS else 0
    if len(words) > first:
        longest = law_table().lengths.get(name_key([words[first][0].rstrip(_TRAILING)]), (1,))[0]
        words = _words(text, p, first + max(longest, 3))
    hit = _lookup_law(words, first)
    if hit is not None:
        law, end = hit
        return LawHit(law, p, _extend_law(text, end, law))
    first = 1 if words[0][0] in _DETERMINERS else 0
    if _names_instrument(words[first : first + 3] if first else words[:1]):
        if (m := _PAREN_ABBR_AFTER_NAME.match(text, words[first][1])) is not None:
            abbr = m.group("a") or m.group("b")
            return LawHit(law_table().by_abbr.get(abbr) or Law(abbr=abbr), p, m.end())
        return LawHit(None, p, p, blocked=True)
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
    for n in table.lengths.get(name_key([word]), ()):
        span = words[first : first + n]
        if len(span) < n:
            continue
        last = span[-1][0].rstrip(_TRAILING)
        raw = [w for w, _, _ in span[:-1]] + [last]
        law = table.by_abbr.get(" ".join(raw))
        if law is None and not any(w.endswith((".", ";", ":", ")")) for w in raw[:-1]):
            law = table.by_name.get(name_key(raw))
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


def law_before(text: str, head_start: int) -> LawHit | None:
    """Law written first: juris style 'GG Art 80 Abs 1', 'HGB §§ 74 ff', 'GmbHG 1892 § 13', 'DORA Art. 19',
    or a commentary 'Palandt/Grüneberg, BGB, 79. Aufl., § 280 Rn. 12'."""
    lo = max(0, head_start - 48)
    if m := EU_ACT_BEFORE.search(text, lo, head_start):
        act = eu_act_from_match(m)
        if act is not None:
            return LawHit(act, m.start(), m.end())
    m = _LAW_BEFORE.search(text, lo, head_start) or _COMMENTARY_LAW_BEFORE.search(text, lo, head_start)
    if m is None:
        return None
    words = [(w, m.start("law") + i, 0) for w, i in _split_with_offsets(m.group("law"))]
    for first in range(len(words)):
        hit = _lookup_law(words[first:], 0)
        if hit is not None and hit[1] == m.end("law"):
            return LawHit(hit[0], words[first][1], m.end("law"))
    return None


def _split_with_offsets(s: str) -> list[tuple[str, int]]:
    return [(m.group(), m.start()) for m in re.finditer(r"\S+", s)]
