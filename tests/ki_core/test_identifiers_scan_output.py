"""The scanner's speed work changes no output: frozen identifiers of real texts, and the literal guards.

`fixtures/identifiers/scan-output-excerpt.jsonl.gz` holds 6 decisions and 632 statute Absätze of
../shared/data (every 25th of the four core laws, every 200th of the 69 others) with every field of
every identifier the extractor found at 074160b, before the prefilters and the faster statute head
(without a context law, and for Absätze also with their own law as context). A change of the rules
that moves any of them must regenerate the file and say so; a speed change must not.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ki_core.identifiers import extract
from ki_core.identifiers import ecli as ecli_module
from ki_core.identifiers import eu as eu_module
from ki_core.identifiers import registers as registers_module
from ki_core.identifiers.spans import contains_any

EXCERPT = Path(__file__).resolve().parents[1] / "fixtures" / "identifiers" / "scan-output-excerpt.jsonl.gz"


def _excerpt() -> list[dict]:
    with gzip.open(EXCERPT, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


RECORDS = _excerpt()


def _as_frozen(text: str, **context: str | None) -> list[dict]:
    return [item.model_dump(exclude_none=True) for item in extract(text, **context)]


def test_the_excerpt_is_large_enough_to_show_a_changed_identifier() -> None:
    kinds = {item["kind"] for r in RECORDS for item in r["found"]}
    assert kinds == {"statute", "case_number", "eu_reference"}  # the decisions predate ECLIs
    assert sum(len(r["found"]) + len(r.get("found_with_law", [])) for r in RECORDS) > 1000
    assert sum(1 for r in RECORDS if r["source"].startswith("decisions/")) == 6


@pytest.mark.parametrize("record", RECORDS, ids=[r["source"] for r in RECORDS])
def test_every_identifier_of_a_real_text_keeps_its_kind_form_span_and_parts(record: dict) -> None:
    assert _as_frozen(record["text"]) == record["found"]
    if record.get("law"):
        assert _as_frozen(record["text"], context_law=record["law"]) == record["found_with_law"]


# Fragments the guarded triggers are made of, and their near misses ("ECLI ", "C–", "eli-").
_FRAGMENTS = [
    "ECLI", "ecli", "Ecli", "ECL", ":", " ", "DE", "BGH", "2020", "0512", ".", "C", "T", "-", "–",
    "12", "/", "19", "2009", "24", "EU", "EG", "EC", "EEC", "E", "CELEX", "celex", "Celex", "CELE",
    "%3A", "3", "2016", "R", "0679", "eli", "reg", "_impl", "_del", "dir", "eli-", "1",
    "Vereins", "Handels", "register", "Register", "-Nr.", "nummer", "unter", " der ", "Nr.", "Nummer", "im", "in das",
    "B", "Verordnung", "Verordnungen", "en", "(EU)", "Richtlinie", "Richtlinien", "Beschlüsse", "Regulations", "s",
]
_GUARDED = [
    ("ECLI", ecli_module._ECLI, ecli_module.ECLI_LITERALS),
    ("EuGH case", eu_module._EU_CASE, eu_module.EU_CASE_LITERALS),
    *[(f"EU act form {i}", pattern, literals) for i, (pattern, literals) in enumerate(eu_module._EU_ACT_PATTERNS) if literals],
    ("EU acts in a list", eu_module._PLURAL_TYPE, eu_module._PLURAL_LITERALS),
    ("register in words", registers_module._LONG_FORM, registers_module._LONG_FORM_LITERALS),
    ("number before the register", registers_module._NUMBER_FIRST, registers_module._LONG_FORM_LITERALS),
]


@pytest.mark.parametrize(("name", "pattern", "literals"), _GUARDED, ids=[g[0] for g in _GUARDED])
@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from(_FRAGMENTS), max_size=14))
def test_a_text_without_a_scanners_literals_holds_no_match_of_its_trigger(
    name: str, pattern: re.Pattern[str], literals: tuple[str, ...], parts: list[str]
) -> None:
    text = "".join(parts)
    if not contains_any(text, literals):
        assert pattern.search(text) is None, name


@pytest.mark.parametrize(
    "text",
    ["ECLI:DE:BGH:2020:120520UVIZR1.20.0", "EuGH C-311/18", "RL 2009/24/EC", "CELEX:32016R0679", "eli/reg_impl/2019/947/oj"],
)
def test_each_guarded_form_is_still_found(text: str) -> None:
    assert extract(text)
