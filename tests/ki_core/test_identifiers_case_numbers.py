"""Case numbers (Aktenzeichen) of every court branch, with court and date; what only looks like one."""

from __future__ import annotations

from collections import Counter

import pytest

from ki_core.identifiers import extract
from tests.ki_core.found_identifiers import found, found_kinds


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("VIII ZR 123/20", "VIII ZR 123/20"),
        ("XII ZB 5/19", "XII ZB 5/19"),
        ("I-24 U 1/18", "I-24 U 1/18"),
        ("2 U 12/19", "2 U 12/19"),
        ("1 BvR 123/20", "1 BvR 123/20"),
        ("2 BvL 1/19", "2 BvL 1/19"),
        ("5 AZR 123/19", "5 AZR 123/19"),
        ("B 1 KR 2/20 R", "B 1 KR 2/20 R"),
        ("L 5 KR 222/14 B ER", "L 5 KR 222/14 B ER"),
        ("IX R 1/20", "IX R 1/20"),
        ("VIII B 10/19", "VIII B 10/19"),
        ("BVerwG 4 C 1.19", "4 C 1/19"),
        ("4 NB 43.93", "4 NB 43/93"),
        ("10 W (pat) 5/19", "10 W (pat) 5/19"),
        ("6 K 123/20.F", "6 K 123/20.F"),
        ("1 StR 123/20", "1 StR 123/20"),
        ("2 Ss 12/19", "2 Ss 12/19"),
        ("NotSt(Brfg) 1/18", "NotSt (Brfg) 1/18"),
        ("1 Ss (OWi) 129/16", "1 Ss (OWi) 129/16"),
        ("60 XIV (L) 28/20 U", "60 XIV (L) 28/20 U"),
        ("OVG 12 B 7/16", "OVG 12 B 7/16"),
        ("VG 14 L 123.20", "VG 14 L 123/20"),
        ("EnVR 45/18", "EnVR 45/18"),
        ("M 1 K 19.1234", "M 1 K 19.1234"),
    ],
)
def test_case_numbers_of_all_court_branches(text: str, normalized: str) -> None:
    assert found_kinds(f"Az. {text}, juris") == Counter({("case_number", normalized): 1})


def test_case_number_takes_court_and_date_from_the_citation() -> None:
    (item,) = extract("(BGH, Beschluss vom 29. April 2015 - XII ZB 214/14, NJW 2015, 1827)")
    assert (item.normalized, item.court, item.date) == ("XII ZB 214/14", "BGH", "2015-04-29")
    (item,) = extract("Hessisches FG, Beschluss vom 24. Januar 2002 3 K 2803/01, EFG 2002, 867")
    assert (item.court, item.date) == ("FG Hessen", "2002-01-24")


@pytest.mark.parametrize(
    "text",
    [
        "NJW 2015, 1827",
        "BGHZ 12, 34",
        "BVerfGE 23, 12",
        "GRUR 1964, 274, 275",
        "Rechnung Nr. 2023/0815 vom 12.03.2023",
        "Tel. 030 / 1234-5678, Fax +49 (0)30 12345-0",
        "Steuernummer 12/345/67890",
        "am 12.03.19 um 12.30 Uhr",
        "Umsatzsteuer ID: DE345783002",
        "IBAN DE05 1234 5600 0004 4556 60",
        "von 12.500 Euro und 1.500 qm",
        "(ABl. L 119 vom 4.5.2016, S. 1)",
        "Die Kündigung ist spätestens am dritten Werktag zulässig.",
    ],
)
def test_reporter_citations_phone_numbers_and_dates_are_not_identifiers(text: str) -> None:
    assert extract(text) == []


def test_an_appeal_mark_after_a_suffix_word_is_part_of_the_suffix() -> None:
    assert found("Landessozialgericht Baden-Württemberg Beschluss, 28. März 2007 - L 7 AS 1214/07 ER-B") == [
        "L 7 AS 1214/07 ER-B"
    ]
    assert found("LSG Sachsen-Anhalt Aktenzeichen L 8 SO 54/17 B ER") == ["L 8 SO 54/17 B ER"]
    assert found("im Bebauungsplan 12/20 B-Plan") == []


def test_a_file_number_may_touch_the_full_stop_of_az() -> None:
    assert found("OLG Köln, Urteil vom 1.2.2021, Az.5 U 12/21") == ["5 U 12/21"]
    assert found("AZ.VIII ZR 123/20") == ["VIII ZR 123/20"]
    # no other abbreviation's full stop starts a file number
    assert found("Rn.5 U 12/21") == []
    assert found("S.5 U 12/21") == []
