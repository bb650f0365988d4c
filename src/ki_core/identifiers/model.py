"""What an extracted identifier is: the one type every scanner returns and every caller reads."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Kind = Literal["statute", "case_number", "ecli", "register_number", "eu_reference"]


class Identifier(BaseModel):
    """One identifier found in a text; `text[start:end] == as_written`.

    Kind-specific parts are None where they do not apply: statute and EU
    article references fill law/section/absatz/satz/nummer/buchstabe, case
    numbers and ECLIs court/date, register numbers register_type/number/court,
    EU references celex where it is determinable.
    """

    model_config = ConfigDict(frozen=True)

    kind: Kind
    normalized: str
    as_written: str
    start: int
    end: int
    law: str | None = None
    section: str | None = None
    absatz: str | None = None
    satz: str | None = None
    nummer: str | None = None
    buchstabe: str | None = None
    court: str | None = None
    date: str | None = None
    year: int | None = None
    number: str | None = None
    register_type: str | None = None
    case_number: str | None = None
    celex: str | None = None
