"""What the identifier leg looks for: the identifiers a query holds, as whole normalized values.

amendments.md 1: the leg matches identifiers, not their tokens. A chunk carries its
document's identifiers as normalized whole values (the output of `extract`, a keyword
field in both backends); the query is run through the same extractor and the leg asks
for exactly those values. A law name alone ("Kündigung nach BGB") is no identifier, so
it matches nothing and the leg does not run. The index holds each value with its
ancestors, so "§ 573c BGB" finds a chunk citing "§ 573c Abs. 1 Satz 2 BGB"; a query below
a section ("§ 573c Abs. 1 BGB") does not ask for the section, which would admit every
other paragraph of it ("§ 573c Abs. 3 BGB"): the leg admits only chunks that carry what
was asked for (issue 44). A short query that is
one pasted string the extractor does not know (an internal file number given in a
manifest) is asked for as a whole value too, and so is each word outside the identifiers
found that looks like a file number ("MV-2024-003", "4711/23"): whole values only, so
"MV-2024" never finds "MV-2024-003" and two words never match across two identifiers.

Two spellings of one identifier are asked for together, so documents indexed before
and after a change of normal form still match: an EU act under its sibling
designations ("DVO (EU) 2019/947" also as "VO (EU) 2019/947", the form a CELEX number
alone or an older extractor gives), and a case number with two registers also as the
part that carries the number ("3 KLs 101 Js 47753/18" also as "101 Js 47753/18").

EXTRACTOR_VERSION names this behaviour in the index signature: when the extractor
changes what it finds, indexed values and query values could disagree, and a changed
signature means `ki reindex`, not silent misses.
"""

from __future__ import annotations

import re

from .case_numbers import core_case_number
from .eu import designation_variants
from .extraction import extract
from .model import Identifier

# 2: implementing and delegated EU acts keep their own designation (DVO, DelVO, DelRL, DurchfB,
# no longer 'VO (EU) ...'), two-register case numbers are one value ('3 KLs 101 Js 47753/18'),
# long register forms and further suffixes are found (issue 19, item 3).
# 3: Berlin's and Dortmund's two-register forms ("(318 OWi) 3034 Js-OWi 1021/20 (88/20)", "729 OWi-251
# Js 287/22-27/22"), six-digit prosecutor numbers, "Handelsregister B ... Nr. 701234" (issue 44).
# 4: a Handelsregister department named after its number ("... unter der Nummer 98765 in Abteilung B",
# "unter der Nummer 98765 in Abteilung B des Handelsregisters"); a court's town never runs on into
# "im Handelsregister", and a file number may touch the full stop of "Az." ("Az.5 U 12/21") (issue 44).
EXTRACTOR_VERSION = 4
EXACT_WEIGHT = 2.0
# The part of a two-register case number that carries the number, as older indexes hold it.
PART_WEIGHT = 1.0
# A pasted value, not a sentence: at most this long and at most this many words.
PASTED_MAX_CHARS = 80
PASTED_MAX_WORDS = 6
# A word that looks like a file number: a digit, and a letter or an inner separator beside it.
_FILE_NUMBER = re.compile(r"(?=.*\d)(?:.*[^\W\d_]|.*\w[/.\-]\w)", re.UNICODE)
_WORD_EDGES = "\"'„“”‚‘’»«()[]{}<>,;:!?."

IdentifierTerms = tuple[tuple[str, float], ...]


def query_identifier_terms(query: str) -> IdentifierTerms:
    """(value, weight) pairs for the identifier leg, strongest first; () when the query holds none."""
    terms: dict[str, float] = {}
    identifiers = extract(query)
    for found in identifiers:
        for value in (found.normalized, *same_identifier(found)):
            terms[value] = max(terms.get(value, 0.0), EXACT_WEIGHT)
        if found.kind == "case_number" and (core := core_case_number(found.normalized)):
            terms.setdefault(core, PART_WEIGHT)
    for value in pasted_values(query, identifiers):
        terms.setdefault(value, EXACT_WEIGHT)
    return tuple(sorted(terms.items(), key=lambda item: (-item[1], item[0])))


def same_identifier(found: Identifier) -> tuple[str, ...]:
    """The other normalized forms of the same identifier: an EU act's sibling designations."""
    if found.kind != "eu_reference" or not found.law:
        return ()
    return tuple(found.normalized.replace(found.law, variant) for variant in designation_variants(found.law))


def pasted_values(query: str, identifiers: list[Identifier]) -> tuple[str, ...]:
    """What the extractor does not know but a user may have pasted: the whole short query, and
    each word outside the identifiers found that looks like a file number, as whole values."""
    pasted = " ".join(query.split())
    values = [pasted] if _looks_pasted(pasted) else []
    for word in re.finditer(r"\S+", query):
        inside = any(i.start < word.end() and word.start() < i.end for i in identifiers)
        value = word.group().strip(_WORD_EDGES)
        if not inside and len(value) >= 3 and _FILE_NUMBER.match(value):
            values.append(value)
    return tuple(dict.fromkeys(values))


def _looks_pasted(text: str) -> bool:
    """One short value with a digit in it (a file number such as "KW-2024-017"), not a question."""
    return (
        0 < len(text) <= PASTED_MAX_CHARS
        and len(text.split()) <= PASTED_MAX_WORDS
        and any(ch.isdigit() for ch in text)
        and not text.endswith("?")
    )
