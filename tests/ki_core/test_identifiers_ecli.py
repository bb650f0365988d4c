"""ECLIs: upper-cased, parsed, and for federal courts carrying their case number."""

from __future__ import annotations

from ki_core.identifiers import extract


def test_ecli_is_upper_cased_and_parsed() -> None:
    (item,) = extract("ECLI:DE:BVerfG:1958:rs19580115.1bvr040051")
    assert item.normalized == "ECLI:DE:BVERFG:1958:RS19580115.1BVR040051"
    assert (item.court, item.date, item.case_number) == ("BVerfG", "1958-01-15", "1 BvR 400/51")


def test_ecli_of_a_federal_court_carries_its_case_number() -> None:
    (item,) = extract("ECLI:DE:BGH:2020:040220B3STR313.19.1")
    assert (item.court, item.date, item.case_number) == ("BGH", "2020-02-04", "3 StR 313/19")


def test_a_truncated_ecli_is_not_an_ecli() -> None:
    assert extract("ECLI:DE:BGH:2020:...") == []
    assert extract("siehe ECLI:DE:BGH:2020:040220B3STR… für Details") == []
