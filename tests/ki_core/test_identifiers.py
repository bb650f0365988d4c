"""Legal identifiers: what is found in German legal text and how it is normalized.

The labelled dev file (a frozen copy of shared/data/identifiers) is checked
record by record; the hand-written cases for each kind pin the German citation
conventions the rules are written from (test_identifiers_<kind>.py). Here:
the dev file, the contract every identifier keeps, and robustness.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ki_core.identifiers import Identifier, extract, identifiers_text
from tests.ki_core.found_identifiers import found_kinds

DEV_FILE = Path(__file__).resolve().parent.parent / "fixtures" / "identifiers-dev.jsonl"


def _dev_records() -> list[dict]:
    return [json.loads(line) for line in DEV_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]


def _record_id(index: int, record: dict) -> str:
    words = re.sub(r"[^\w§./-]+", "_", record["text"]).strip("_")
    return f"{index:03d}-{record['group']}-{words[:48]}"


DEV = _dev_records()


# ---------------------------------------------------------------- the labelled dev file


@pytest.mark.parametrize("record", DEV, ids=[_record_id(i, r) for i, r in enumerate(DEV)])
def test_dev_record_yields_exactly_its_labelled_identifiers(record: dict) -> None:
    context = record.get("context") or {}
    got = found_kinds(record["text"], context_law=context.get("law"), context_section=context.get("section"))
    expected = Counter((e["kind"], e["normalized"]) for e in record["expected"])
    assert got == expected


def test_every_identifier_of_the_dev_file_slices_back_to_what_was_written() -> None:
    for record in DEV:
        context = record.get("context") or {}
        for item in extract(record["text"], context_law=context.get("law")):
            assert record["text"][item.start : item.end] == item.as_written


def test_the_dev_file_has_negatives_and_all_five_kinds() -> None:
    kinds = {e["kind"] for r in DEV for e in r["expected"]}
    assert kinds == {"statute", "case_number", "ecli", "register_number", "eu_reference"}
    assert any(not r["expected"] for r in DEV)


def test_offsets_slice_back_to_as_written_for_every_kind() -> None:
    text = (
        "Vgl. BGH, Urt. v. 15.05.2023 - VI ZR 175/22, ECLI:DE:BGH:2023:150523UVIZR175.22.0; "
        "§§ 346 bis 348 BGB; Art. 6 Abs. 1 lit. f DSGVO; AG München HRB 12345; Richtlinie 93/13/EWG."
    )
    items = extract(text)
    assert {i.kind for i in items} == {"case_number", "ecli", "statute", "eu_reference", "register_number"}
    for item in items:
        assert text[item.start : item.end] == item.as_written


# ---------------------------------------------------------------- API helpers and robustness


def test_identifiers_text_joins_the_normalized_forms() -> None:
    items = extract("§ 433 Abs. 1 BGB und VIII ZR 123/20")
    assert identifiers_text(items) == "§ 433 Abs. 1 BGB VIII ZR 123/20"
    assert identifiers_text([]) == ""


def test_identifiers_are_frozen() -> None:
    (item,) = extract("§ 433 BGB")
    with pytest.raises(Exception):
        item.normalized = "x"  # type: ignore[misc]
    assert isinstance(item, Identifier)


LEGAL_ALPHABET = st.sampled_from(
    ["§", "§§", " ", "\n", "\u00a0", "Abs.", "Satz", "Nr.", "bis", "und", ",", "-", "(", ")", "/", ".", "1", "23",
     "4a", "II", "BGB", "SGB", "V", "Art.", "ZR", "XII", "ECLI:DE:BGH:", "HRB", "VR", "C-", "des", "Gesetzes",
     "Richtlinie", "EG", "ff.", "i.V.m."]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(LEGAL_ALPHABET, max_size=40).map("".join))
def test_any_text_yields_consistent_offsets(text: str) -> None:
    for item in extract(text, context_law="BGB"):
        assert 0 <= item.start < item.end <= len(text)
        assert text[item.start : item.end] == item.as_written
        assert item.normalized


@pytest.mark.parametrize(
    "text",
    [
        "§ 1" + ", 2" * 20000 + " BGB",
        "§ 1 Abs. 1" + " und 2" * 20000,
        "ABC DEF GHI " * 10000 + "12/19",
        "§ 1 des des des " * 10000,
        "ECLI:DE:BGH:2020:" * 5000,
        "§" + " " * 100000 + "1",
    ],
    ids=["long-list", "long-und-chain", "capital-words-before-a-number", "articles", "ecli-prefixes", "spaces"],
)
def test_adversarial_input_stays_linear(text: str) -> None:
    started = time.process_time()  # CPU time: other work on the machine does not count
    extract(text)
    assert time.process_time() - started < 3.0
