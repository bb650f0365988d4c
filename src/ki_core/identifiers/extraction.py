"""The public entry points: every kind scanned, overlaps resolved, one list ordered by position."""

from __future__ import annotations

import re
from collections.abc import Iterable

from .case_numbers import scan_case_numbers
from .ecli import scan_eclis
from .eu import dedupe_eu_acts, scan_eu_acts, scan_eu_cases
from .model import Identifier
from .registers import scan_registers
from .spans import outside
from .statutes import scan_statutes

# Every kind carries a digit (a section, a year, a file or register number); each scanner's
# trigger requires one, so a text without a digit holds no identifier.
_DIGIT = re.compile(r"\d")


def extract(
    text: str, *, context_law: str | None = None, context_section: str | None = None
) -> list[Identifier]:
    """All identifiers in `text`, ordered by position.

    `context_law` is the law a bare "§ 5" refers to (the law being read);
    `context_section` (e.g. "§ 204") additionally resolves relative references
    such as "Absatz 1 Nr. 6a", which are skipped without it.
    """
    if _DIGIT.search(text) is None:
        return []
    # An ECLI hides what its ordinal looks like; statutes and EU references come next;
    # a case number or register number inside an earlier span is part of that span.
    found = list(scan_eclis(text))
    statutes = outside(scan_statutes(text, context_law, context_section), found)
    acts = outside(scan_eu_acts(text), found)
    found += statutes + dedupe_eu_acts(acts, statutes) + outside(scan_eu_cases(text), found)
    found += outside(scan_case_numbers(text), found)
    found += outside(scan_registers(text), found)
    return sorted(found, key=lambda i: (i.start, i.end, i.kind))


def identifiers_text(ids: Iterable[Identifier]) -> str:
    """The normalized forms, space-joined: the text of the search index's identifier leg."""
    return " ".join(i.normalized for i in ids)
