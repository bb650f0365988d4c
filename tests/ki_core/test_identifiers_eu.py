"""EU references: articles of EU acts, the acts themselves and EuGH cases, with their CELEX numbers."""

from __future__ import annotations

from collections import Counter

import pytest

from ki_core.identifiers import extract
from tests.ki_core.found_identifiers import found, found_kinds


@pytest.mark.parametrize(
    ("text", "normalized", "celex"),
    [
        ("Art. 6 Abs. 1 lit. f DSGVO", "Art. 6 Abs. 1 lit. f DSGVO", "32016R0679"),
        ("Artikel 5 Absatz 1 Buchstabe c der Verordnung (EU) 2016/679", "Art. 5 Abs. 1 lit. c DSGVO", "32016R0679"),
        ("Art. 267 AEUV", "Art. 267 AEUV", "12012E267"),
        ("Verordnung (EU) Nr. 1215/2012", "VO (EU) Nr. 1215/2012", "32012R1215"),
        ("Verordnung (EWG) Nr. 1408/71", "VO (EWG) Nr. 1408/71", "31971R1408"),
        ("Richtlinie 2013/34/EU", "RL 2013/34/EU", "32013L0034"),
        ("Directive 2009/24/EC", "RL 2009/24/EG", "32009L0024"),
        ("Richtlinie (EU) 2019/790", "RL (EU) 2019/790", "32019L0790"),
        ("CELEX:31993L0013", "RL 93/13/EWG", "31993L0013"),
        ("Article 6(1)(f) GDPR", "Art. 6 Abs. 1 lit. f DSGVO", "32016R0679"),
        ("Article 4(1) GDPR", "Art. 4 Nr. 1 DSGVO", "32016R0679"),
    ],
)
def test_eu_references_are_normalized_with_celex(text: str, normalized: str, celex: str) -> None:
    (item,) = extract(text)
    assert (item.kind, item.normalized, item.celex) == ("eu_reference", normalized, celex)


def test_an_act_is_reported_once_and_not_beside_its_own_articles() -> None:
    text = "Art. 19 DORA, siehe https://eur-lex.europa.eu/?uri=CELEX:32022R2554 und CELEX%3A32022R2554"
    assert found(text) == ["Art. 19 VO (EU) 2022/2554"]


def test_eugh_case_is_a_case_number_and_an_eu_reference() -> None:
    assert found_kinds("EuGH, Urteil vom 16.07.2020 - C-311/18") == Counter(
        {("case_number", "C-311/18"): 1, ("eu_reference", "EuGH C-311/18"): 1}
    )
    (ref,) = [i for i in extract("Rs. C-284/03") if i.kind == "eu_reference"]
    assert ref.celex == "62003CJ0284"


def test_a_plural_type_word_names_every_act_of_its_list() -> None:
    text = "zur Änderung der Verordnungen (EU) Nr. 228/2013, (EU) Nr. 652/2014 und (EU) Nr. 1143/2014 des Rates"
    items = extract(text)
    assert [i.normalized for i in items] == ["VO (EU) Nr. 228/2013", "VO (EU) Nr. 652/2014", "VO (EU) Nr. 1143/2014"]
    assert [i.as_written for i in items] == ["Verordnungen (EU) Nr. 228/2013", "(EU) Nr. 652/2014", "(EU) Nr. 1143/2014"]
    assert [i.celex for i in items] == ["32013R0228", "32014R0652", "32014R1143"]


def test_a_plural_implementing_act_and_a_directive_list_keep_their_designation_once_each() -> None:
    assert found("der Durchführungsverordnungen (EU) Nr. 1014/2010 und (EU) 2017/1152") == [
        "DVO (EU) Nr. 1014/2010", "DVO (EU) 2017/1152"
    ]
    assert found("Aufgrund der Richtlinien 2003/58/EG, 68/151/EWG sowie 2001/34/EG") == [
        "RL 2003/58/EG", "RL 68/151/EWG", "RL 2001/34/EG"
    ]


def test_plural_decisions_of_a_court_are_no_eu_acts() -> None:
    assert extract("die Beschlüsse 1/19 und 2/19 des Senats") == []
