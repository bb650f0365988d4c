"""Statute references: ranges, enumerations, i.V.m. chains, the parts of a norm and which law is meant."""

from __future__ import annotations

import pytest

from ki_core.identifiers import extract, normalize_law
from tests.ki_core.found_identifiers import found

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


def test_statute_parts_are_filled() -> None:
    (item,) = extract("§ 573c Abs. 1 Satz 2 BGB")
    assert (item.kind, item.law, item.section, item.absatz, item.satz) == ("statute", "BGB", "§ 573c", "1", "2")
    (item,) = extract("§ 341 Abs. 2 Nr. 1 Buchst. c SGB V")
    assert (item.nummer, item.buchstabe) == ("1", "c")
    (item,) = extract("§§ 434 bis 442 BGB")
    assert item.section == "§§ 434-442"


# ---------------------------------------------------------------- statutes: the law table

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


def test_a_collection_filed_under_law_and_section_is_no_citation_of_the_norm() -> None:
    text = "OLG Bamberg, Beschluss vom 17.07.2012 - 3 Ss OWi 944/12 = DAR 2012, 528 = OLGSt StVG § 25 Nr. 52"
    assert [i.kind for i in extract(text)] == ["case_number"]
    assert found("BGH, Beschl. v. 13.06.1991 – 4 StR 105/91 = BGHR StGB § 64 Ablehnung 4") == ["4 StR 105/91"]
    assert found("Der Fahrverbot nach § 25 StVG") == ["§ 25 StVG"]
