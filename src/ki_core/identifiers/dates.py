"""Dates written near an identifier ("vom 12. März 2021"), and the ISO form both dates and ECLIs use."""

from __future__ import annotations

import re

_MONTHS = {
    name: number
    for number, name in enumerate(
        "Januar Februar März April Mai Juni Juli August September Oktober November Dezember".split(), start=1
    )
}
_DATE = re.compile(
    r"(?P<d>\d{1,2})\.\s?(?:(?P<m>\d{1,2})\.\s?|(?P<mname>" + "|".join(_MONTHS) + r")\s)(?P<y>\d{4})"
    r"|(?P<iy>\d{4})-(?P<im>\d{2})-(?P<id>\d{2})"
)


def date_before(text: str, start: int) -> str | None:
    last = None
    for last in _DATE.finditer(text, max(0, start - 90), start):
        pass
    if last is None:
        return None
    if last.group("iy"):
        return iso_date(int(last.group("iy")), last.group("im"), last.group("id"))
    month = last.group("m") or str(_MONTHS[last.group("mname")])
    return iso_date(int(last.group("y")), month, last.group("d"))


def iso_date(year: int, month: str, day: str) -> str | None:
    if not (1 <= int(month) <= 12 and 1 <= int(day) <= 31):
        return None
    return f"{year:04d}-{int(month):02d}-{int(day):02d}"
