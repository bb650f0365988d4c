"""Legal identifiers: what is found in German legal text and how it is normalized.

The labelled dev file (a frozen copy of shared/data/identifiers) is checked
record by record; the hand-written cases below pin the German citation
conventions the rules are written from.
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

from ki_core.identifiers import Identifier, extract, identifiers_text, normalize_law

DEV_FILE = Path(__file__).resolve().parent.parent / "fixtures" / "identifiers-dev.jsonl"


def _dev_records() -> list[dict]:
    return [json.loads(line) for line in DEV_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]


def _record_id(index: int, record: dict) -> str:
    words = re.sub(r"[^\w§./-]+", "_", record["text"]).strip("_")
    return f"{index:03d}-{record['group']}-{words[:48]}"


DEV = _dev_records()


def found(text: str, **context: str) -> list[str]:
    return [i.normalized for i in extract(text, **context)]


def found_kinds(text: str, **context: str) -> Counter[tuple[str, str]]:
    return Counter((i.kind, i.normalized) for i in extract(text, **context))


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


# ---------------------------------------------------------------- statutes: ranges and enumerations


def test_a_range_of_sections_written_with_bis_stays_one_range() -> None:
    assert found("Die §§ 11 bis 14 gelten entsprechend.", context_law="BGB") == ["§§ 11-14 BGB"]


def test_a_range_of_absaetze_stays_one_range_in_the_section() -> None:
    assert found("§ 275 Abs. 1 bis 3 BGB") == ["§ 275 Abs. 1-3 BGB"]
    assert found("§ 275 Abs. 1-3 BGB") == ["§ 275 Abs. 1-3 BGB"]


def test_an_enumeration_of_sections_gives_one_entry_per_section() -> None:
    assert found("§§ 1, 3 und 5 BGB") == ["§ 1 BGB", "§ 3 BGB", "§ 5 BGB"]


def test_an_enumeration_of_satz_and_a_later_absatz_climb_back_to_the_right_level() -> None:
    assert found("§ 281 Abs. 1 Satz 2 und 3 und Abs. 5 BGB") == [
        "§ 281 Abs. 1 Satz 2 BGB",
        "§ 281 Abs. 1 Satz 3 BGB",
        "§ 281 Abs. 5 BGB",
    ]


def test_a_section_list_with_sub_levels_starts_a_new_section_where_the_designator_repeats() -> None:
    assert found("§§ 92 Abs. 1, 97 Abs. 1, 269 Abs. 3 ZPO") == ["§ 92 Abs. 1 ZPO", "§ 97 Abs. 1 ZPO", "§ 269 Abs. 3 ZPO"]
    assert found("§§ 431 Abs. 1, 2 und 4 HGB") == ["§ 431 Abs. 1 HGB", "§ 431 Abs. 2 HGB", "§ 431 Abs. 4 HGB"]


def test_a_section_list_goes_back_to_section_level_where_a_higher_designator_or_ff_follows() -> None:
    assert found("§§ 3 Nr. 40, 3c Abs. 2 EStG") == ["§ 3 Nr. 40 EStG", "§ 3c Abs. 2 EStG"]
    assert found("gem. §§ 823 Abs. 1, 249 ff. BGB") == ["§ 823 Abs. 1 BGB", "§§ 249 ff. BGB"]
    assert found("§§ 12 Abs. 1, 14 GKG") == ["§ 12 Abs. 1 GKG", "§ 14 GKG"]


def test_a_section_list_where_each_section_names_its_own_law() -> None:
    assert found("§§ 823 Abs. 2 BGB, 263 StGB") == ["§ 823 Abs. 2 BGB", "§ 263 StGB"]


def test_ff_and_f_after_a_section_make_a_plural_reference() -> None:
    assert found("HGB §§ 74 ff") == ["§§ 74 ff. HGB"]
    assert found("§ 305 ff. BGB") == ["§§ 305 ff. BGB"]


def test_a_quantity_after_und_is_not_another_section() -> None:
    assert found("nach § 5 und 10 Jahre später", context_law="BGB") == ["§ 5 BGB"]


# ---------------------------------------------------------------- statutes: chains with i.V.m.


def test_i_v_m_chain_with_two_laws_keeps_each_law() -> None:
    assert found("(§ 26 Abs. 1 SGB X i.V.m. § 187 Abs. 1 BGB)") == ["§ 26 Abs. 1 SGB X", "§ 187 Abs. 1 BGB"]


def test_i_v_m_chain_without_a_first_law_takes_the_law_at_its_end() -> None:
    assert found("§ 1908i Abs.1 Satz 1 i.V.m. § 1846 BGB") == ["§ 1908i Abs. 1 Satz 1 BGB", "§ 1846 BGB"]
    assert found("Art. 2 Abs. 1 in Verbindung mit Art. 1 Abs. 1 GG") == ["Art. 2 Abs. 1 GG", "Art. 1 Abs. 1 GG"]


def test_comma_separated_citations_share_the_closing_law() -> None:
    assert found("§ 25, § 13 Abs. 1, § 14 Abs. 3 GKG") == ["§ 25 GKG", "§ 13 Abs. 1 GKG", "§ 14 Abs. 3 GKG"]


# ---------------------------------------------------------------- statutes: parts of a norm


def test_article_with_a_nested_section_of_the_egbgb() -> None:
    assert found("Art. 246a § 1 EGBGB") == ["Art. 246a § 1 EGBGB"]
    assert found("nach Artikel 229 § 6 Absatz 1 des Einführungsgesetzes zum Bürgerlichen Gesetzbuche") == [
        "Art. 229 § 6 Abs. 1 EGBGB"
    ]


def test_nummer_and_buchstabe_in_citation_order() -> None:
    assert found("§ 341 Abs. 2 Nr. 1 Buchst. c SGB V") == ["§ 341 Abs. 2 Nr. 1 Buchst. c SGB V"]
    assert found("§ 341 Absatz 2 Nummer 1 Buchstabe c", context_law="SGB 5") == ["§ 341 Abs. 2 Nr. 1 Buchst. c SGB V"]


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("§ 13 Abs. 3 S. 1 Alt. 2 SGB V", "§ 13 Abs. 3 Satz 1 Alt. 2 SGB V"),
        ("§ 13 Abs 3a S 6 SGB 5", "§ 13 Abs. 3a Satz 6 SGB V"),
        ("§ 7 Abs. 1 Satz 1 Halbs. 2 BGB", "§ 7 Abs. 1 Satz 1 Halbsatz 2 BGB"),
        ("§ 7 Absatz 1 Satz 1 zweiter Halbsatz BGB", "§ 7 Abs. 1 Satz 1 Halbsatz 2 BGB"),
        ("§ 823 Abs. 1 2. Alt. BGB", "§ 823 Abs. 1 Alt. 2 BGB"),
        ("§ 4 Abs. 5 Satz 1 Nr. 6b EStG", "§ 4 Abs. 5 Satz 1 Nr. 6b EStG"),
        ("§ 1 Abs. 1 Nr. 2 lit. a UStG", "§ 1 Abs. 1 Nr. 2 Buchst. a UStG"),
        ("§ 10 Abs. 1 Nr. 2 Buchst. b Doppelbuchst. aa EStG", "§ 10 Abs. 1 Nr. 2 Buchst. b Doppelbuchst. aa EStG"),
        ("§ 543 Abs. 2 Satz 1 Nr. 3 a) BGB", "§ 543 Abs. 2 Satz 1 Nr. 3 Buchst. a BGB"),
        ("Art. 6 Abs. 1 UAbs. 1 lit. f DSGVO", "Art. 6 Abs. 1 UAbs. 1 lit. f DSGVO"),
        ("§ 74 a Abs. 1 Satz 1 HGB", "§ 74a Abs. 1 Satz 1 HGB"),
        ("Artikel 20a GG", "Art. 20a GG"),
    ],
)
def test_designators_are_written_in_the_normalized_form(text: str, normalized: str) -> None:
    assert found(text) == [normalized]


def test_roman_numeral_absatz_and_arabic_satz() -> None:
    assert found("§ 10 II 1 BGB") == ["§ 10 Abs. 2 Satz 1 BGB"]
    assert found("§ 823 I BGB") == ["§ 823 Abs. 1 BGB"]
    assert found("Art. 2 I GG") == ["Art. 2 Abs. 1 GG"]
    assert found("§ 280 I, III BGB") == ["§ 280 Abs. 1 BGB", "§ 280 Abs. 3 BGB"]


def test_juris_style_with_the_law_first() -> None:
    assert found("GG Art 80 Abs 1 S 2") == ["Art. 80 Abs. 1 Satz 2 GG"]
    assert found("GmbHG 1892 § 13 Abs 3") == ["§ 13 Abs. 3 GmbHG"]
    assert found("SGB 5 § 13 Abs 3a") == ["§ 13 Abs. 3a SGB V"]


# ---------------------------------------------------------------- statutes: which law


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("§ 1 des Aktiengesetzes", "§ 1 AktG"),
        ("§ 71 der Grundbuchordnung", "§ 71 GBO"),
        ("§ 242 des Handelsgesetzbuchs", "§ 242 HGB"),
        ("§ 823 des Bürgerlichen Gesetzbuches", "§ 823 BGB"),
        ("§ 20 Absatz 2a Satz 1 des Vierten Buches Sozialgesetzbuch", "§ 20 Abs. 2a Satz 1 SGB IV"),
        ("§ 236 Abs 1 Fünftes Buch Sozialgesetzbuch (SGB V)", "§ 236 Abs. 1 SGB V"),
        ("§ 184 des Sozialgerichtsgesetzes (SGG)", "§ 184 SGG"),
        ("§ 126 Abs. 3 der Finanzgerichtsordnung --FGO--", "§ 126 Abs. 3 FGO"),
        ("§ 1 des Gesetzes gegen den unlauteren Wettbewerb", "§ 1 UWG"),
        ("§ 10 des Wohnungseigentumsgesetzes", "§ 10 WEG"),
        ("§§ 12 bis 14 des Teilzeit- und Befristungsgesetzes", "§§ 12-14 TzBfG"),
        ("§ 35a Absatz 1 des Achten Buches Sozialgesetzbuch", "§ 35a Abs. 1 SGB VIII"),
        ("§ 5 UWG 2004", "§ 5 UWG"),
        ("§ 613a BGB a.F.", "§ 613a BGB"),
        ("§ 12 Abs. 1 HeizkostenV", "§ 12 Abs. 1 HeizkostenV"),
        ("§ 10 Abs. 1 WobindG", "§ 10 Abs. 1 WoBindG"),
        ("§ 3 Abs. 2 BayBO", "§ 3 Abs. 2 BayBO"),
    ],
)
def test_law_names_map_to_their_abbreviation(text: str, normalized: str) -> None:
    assert found(text) == [normalized]


def test_a_reference_without_a_law_takes_the_context_law() -> None:
    assert found("(§ 794 Abs. 1 Nr. 1)", context_law="ZPO") == ["§ 794 Abs. 1 Nr. 1 ZPO"]
    assert found("Artikel 87 Abs. 3 Satz 2 bleibt unberührt.", context_law="GG") == ["Art. 87 Abs. 3 Satz 2 GG"]


def test_a_reference_without_a_law_and_without_context_is_not_reported() -> None:
    assert found("(§ 794 Abs. 1 Nr. 1)") == []


def test_sgb_5_and_sgb_v_are_one_law() -> None:
    assert found("§ 13 SGB 5") == found("§ 13 SGB V") == ["§ 13 SGB V"]
    assert found("§ 13", context_law="SGB 5") == ["§ 13 SGB V"]
    assert normalize_law("SGB 5") == "SGB V"
    assert normalize_law("AO 1977") == "AO"


def test_a_contract_or_statute_named_after_the_norm_blocks_the_context_law() -> None:
    assert found("§ 4 Nr. 1 des Vertrages", context_law="BGB") == []
    assert found("§ 10 Abs 2 der geänderten Satzung", context_law="SGB V") == []
    assert found("§ 1 Abs. 2 des Gesetzes über die Rechtsverhältnisse der Steuerberater", context_law="HGB") == []


def test_dieses_gesetzes_is_the_context_law() -> None:
    assert found("nach § 5 dieses Gesetzes", context_law="KSchG") == ["§ 5 KSchG"]


def test_relative_absatz_resolves_only_with_a_context_section() -> None:
    text = "nach Absatz 1 Nr. 6a und 9"
    assert found(text, context_law="BGB") == []
    assert found(text, context_law="BGB", context_section="§ 204") == ["§ 204 Abs. 1 Nr. 6a BGB", "§ 204 Abs. 1 Nr. 9 BGB"]


def test_reporter_collection_numbering_is_not_a_statute() -> None:
    assert found("BSG vom 8.3.2016 - B 1 KR 25/15 R = SozR 4-2500 § 13 Nr 33") == ["B 1 KR 25/15 R"]
    assert found("BVerwG 4 NB 43.93 - Buchholz 406.11 § 9 BauGB Nr. 74") == ["4 NB 43/93"]


def test_the_noun_art_before_a_paragraph_number_is_not_an_article() -> None:
    assert found("einen hohen Leidensdruck psychischer Art.\n8\nDas SG hat", context_law="GG") == []
    assert found("gegen Art. 3 Abs. 1 GG verstoßen") == ["Art. 3 Abs. 1 GG"]


# ---------------------------------------------------------------- whitespace inside a citation


@pytest.mark.parametrize("space", ["\n", "\u00a0", "\u202f", "\r\n", "  "])
def test_line_breaks_and_non_breaking_spaces_inside_a_citation(space: str) -> None:
    text = f"gemäß §{space}573c Abs.{space}1 Satz{space}2{space}BGB gilt"
    (item,) = extract(text)
    assert item.normalized == "§ 573c Abs. 1 Satz 2 BGB"
    assert text[item.start : item.end] == item.as_written
    assert item.as_written.startswith("§") and item.as_written.endswith("BGB")


def test_offsets_slice_back_to_as_written_for_every_kind() -> None:
    text = (
        "Vgl. BGH, Urt. v. 15.05.2023 - VI ZR 175/22, ECLI:DE:BGH:2023:150523UVIZR175.22.0; "
        "§§ 346 bis 348 BGB; Art. 6 Abs. 1 lit. f DSGVO; AG München HRB 12345; Richtlinie 93/13/EWG."
    )
    items = extract(text)
    assert {i.kind for i in items} == {"case_number", "ecli", "statute", "eu_reference", "register_number"}
    for item in items:
        assert text[item.start : item.end] == item.as_written


def test_statute_parts_are_filled() -> None:
    (item,) = extract("§ 573c Abs. 1 Satz 2 BGB")
    assert (item.kind, item.law, item.section, item.absatz, item.satz) == ("statute", "BGB", "§ 573c", "1", "2")
    (item,) = extract("§ 341 Abs. 2 Nr. 1 Buchst. c SGB V")
    assert (item.nummer, item.buchstabe) == ("1", "c")
    (item,) = extract("§§ 434 bis 442 BGB")
    assert item.section == "§§ 434-442"


# ---------------------------------------------------------------- case numbers


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


def test_eugh_case_is_a_case_number_and_an_eu_reference() -> None:
    assert found_kinds("EuGH, Urteil vom 16.07.2020 - C-311/18") == Counter(
        {("case_number", "C-311/18"): 1, ("eu_reference", "EuGH C-311/18"): 1}
    )
    (ref,) = [i for i in extract("Rs. C-284/03") if i.kind == "eu_reference"]
    assert ref.celex == "62003CJ0284"


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


# ---------------------------------------------------------------- ECLI


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


# ---------------------------------------------------------------- register numbers


def test_register_number_with_suffix_and_court() -> None:
    (item,) = extract("Registergericht: Amtsgericht Berlin-Charlottenburg, Registernummer: HRB 123456 B")
    assert (item.normalized, item.register_type, item.court) == ("HRB 123456 B", "HRB", "AG Charlottenburg")


def test_register_number_court_may_follow_it() -> None:
    (item,) = extract("Vereinsregister VR 4217 beim Amtsgericht Frankfurt (Oder)")
    assert (item.normalized, item.court) == ("VR 4217", "AG Frankfurt (Oder)")


def test_vr_and_pr_need_a_register_context() -> None:
    assert extract("Die VR 2000 Brille") == []
    assert found("Partnerschaftsregister PR 1234, AG Essen") == ["PR 1234"]


# ---------------------------------------------------------------- EU references


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


MANIFEST_LAWS = (
    "BGB ZPO GG StGB StPO HGB AktG GmbHG InsO VwVfG VwGO EStG GewO BetrVG KSchG ArbGG GVG GWB UrhG MarkenG PatG "
    "WoEigG ZVG FamFG RVG BRAO StVG SGG FGO BImSchG WpHG BeamtStG TzBfG AGG BUrlG EntgFG ArbZG MiLoG AÜG NachwG "
    "PartGG GenG KAGB WpÜG"
).split() + [
    "SGB 5", "SGB 1", "SGB 2", "SGB 3", "SGB 4", "SGB 6", "SGB 7", "SGB 8", "SGB 10", "SGB 11", "SGB 12",
    "AO 1977", "AufenthG 2004", "BBG 2009", "BDSG 2018", "BörsG 2007", "EnWG 2005", "ErbStG 1974", "GKG 2004",
    "KStG 1977", "MuSchG 2018", "SGB 9 2018", "StVO 2013", "TKG 2021", "UStG 1980", "UWG 2004", "UmwG 1995",
    "VAG 2016", "VVG 2008",
]


@pytest.mark.parametrize("gii_key", MANIFEST_LAWS)
def test_every_law_of_the_statute_corpus_is_in_the_law_table(gii_key: str) -> None:
    assert normalize_law(gii_key) != gii_key or " " not in gii_key
    assert found("§ 1", context_law=gii_key) == [f"§ 1 {normalize_law(gii_key)}"]
    assert found(f"§ 1 {normalize_law(gii_key)}") == [f"§ 1 {normalize_law(gii_key)}"]


@pytest.mark.parametrize("text", ["Gilt § 573c Abs. 1 BGB?", "Gilt § 573c Abs. 1 BGB!", "(§ 573c Abs. 1 BGB)"])
def test_a_citation_before_a_question_or_exclamation_mark_names_its_law(text: str) -> None:
    assert [i.normalized for i in extract(text)] == ["§ 573c Abs. 1 BGB"]
