"""Metadata extraction: German rules on realistic documents, and the LLM extractor over real HTTP."""

from __future__ import annotations

import json
from datetime import date

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ki_core.config import load_settings
from ki_core.identifiers import EXTRACTOR_VERSION
from ki_core.llm import ChatGateway, GatewayError
from ki_workers.stages.metadata import (
    RULES_VERSION,
    DocumentMetadata,
    LLMExtractor,
    NotableClause,
    Party,
    RuleBasedExtractor,
    classify_clause_heading,
    classify_doc_type,
    detect_language,
    extractor_from_settings,
    find_clauses,
    find_doc_date,
)
from tests.fake_chat_gateway import FakeChatGateway, chat_completion, fake_gateway  # noqa: F401 - fixture
from tests.ki_workers.stages.metadata_texts import ENGLISH_NDA, JUDGMENT, LEASE, LETTER, MEMO

rules = RuleBasedExtractor()


# ------------------------------------------------------------ whole documents


def test_lease_contract() -> None:
    meta = rules.extract(LEASE)

    assert meta.title == "Mietvertrag über Gewerberäume"
    assert meta.doc_type == "doc_type:contract.lease.commercial"
    assert meta.parties == [
        Party(name="Hanse Immobilien GmbH", role="Vermieter"),
        Party(name="Nordbau Projektgesellschaft mbH", role="Mieter"),
    ]
    assert meta.reference_numbers == ["MV-2020-0417"]
    assert meta.doc_date == date(2020, 3, 15)
    assert meta.language == "de"
    assert meta.identifiers == ["§ 556 BGB", "§ 543 BGB"]


def test_lease_contract_clauses_carry_locus_type_and_their_text() -> None:
    clauses = rules.extract(LEASE).notable_clauses

    assert [(c.locus, c.clause_type) for c in clauses] == [
        ("§ 1", "clause_type:subject_matter"),
        ("§ 2", "clause_type:term"),
        ("§ 3", "clause_type:payment.rent"),
        ("§ 4", "clause_type:security_deposit"),
        ("§ 5", "clause_type:termination"),
        ("§ 6", "clause_type:maintenance"),
        ("§ 7", "clause_type:liability"),
        ("§ 8", "clause_type:jurisdiction"),
        ("§ 9", "clause_type:written_form"),
        ("§ 10", "clause_type:severability"),
    ]
    termination = clauses[4]
    assert termination.text.startswith("§ 5 Kündigung\n(1) Die ordentliche Kündigung ist während der festen Laufzeit")
    assert termination.text.endswith("nach § 543 BGB bleibt unberührt.")
    assert clauses[-1].text.endswith("bleibt die Wirksamkeit der übrigen Bestimmungen unberührt.")


def test_inline_contract_parties() -> None:
    text = "Dienstvertrag\n\nZwischen der Alpha GmbH, Berlin, und der Beta AG wird folgender Vertrag geschlossen:\n§ 1 Leistungsumfang"

    assert rules.extract(text).parties == [
        Party(name="Alpha GmbH", role="Auftraggeber"),
        Party(name="Beta AG", role="Auftragnehmer"),
    ]


def test_bgh_judgment_with_rubrum() -> None:
    meta = rules.extract(JUDGMENT)

    assert meta.doc_type == "doc_type:decision.judgment"
    assert meta.title == "BGH, Urteil vom 12.03.2020 – VIII ZR 12/19"
    assert meta.doc_date == date(2020, 3, 12)
    assert meta.reference_numbers[0] == "VIII ZR 12/19"
    assert "316 S 45/18" in meta.reference_numbers
    assert meta.parties == [
        Party(name="Gerda Lindemann", role="Klägerin"),
        Party(name="Hanse Immobilien GmbH", role="Beklagte"),
    ]
    assert "§ 573 Abs. 2 Nr. 2 BGB" in meta.identifiers
    assert meta.notable_clauses == []


def test_letter() -> None:
    meta = rules.extract(LETTER)

    assert meta.doc_type == "doc_type:correspondence.letter"
    assert meta.title == "Ihre Mietminderung wegen Baulärms"
    assert meta.matter == "Lindemann ./. Hanse Immobilien GmbH"
    assert meta.reference_numbers == ["117/20 BR", "L-2020-03"]
    assert meta.doc_date == date(2020, 3, 24)
    assert meta.identifiers == ["§ 536 BGB"]


def test_a_reference_label_in_running_text_is_not_a_reference() -> None:
    text = "Vermerk\n\nDas Aktenzeichen des Verfahrens ist noch nicht bekannt. Geschäftszeichen: 4 C 17/21"

    assert rules.extract(text).reference_numbers == ["4 C 17/21"]


def test_memo() -> None:
    meta = rules.extract(MEMO)

    assert meta.doc_type == "doc_type:memo.file_note"
    assert meta.matter == "Nordbau Projektgesellschaft mbH – Bauvorhaben Hafencity"
    assert meta.reference_numbers == ["204/19 NB"]
    assert meta.doc_date == date(2020, 4, 2)
    assert meta.notable_clauses == []


def test_converter_title_is_used_unless_generic() -> None:
    text = "Sehr geehrte Damen und Herren,\nanbei die Unterlagen.\nMit freundlichen Grüßen"

    assert rules.extract(text, title="Übersendung der Mietunterlagen").title == "Übersendung der Mietunterlagen"


def test_generic_converter_title_falls_back_to_the_first_heading_line() -> None:
    text = "Vorlage zur Partnerbesprechung\n\nDie Zahlen des ersten Quartals liegen vor."

    assert rules.extract(text, title="Microsoft Word - Dokument1.docx").title == "Vorlage zur Partnerbesprechung"


# ------------------------------------------------------------------ doc types


@pytest.mark.parametrize(
    ("text", "title", "doc_type"),
    [
        ("OBERLANDESGERICHT MÜNCHEN\nBESCHLUSS\n7 U 1234/19\nIn dem Rechtsstreit", None, "doc_type:decision.order"),
        ("Landgericht Hamburg\nIm Namen des Volkes\nUrteil\nIn dem Rechtsstreit", None, "doc_type:decision.judgment"),
        ("Anlage K 3\nMietvertrag vom 15.03.2020", None, "doc_type:annex"),
        ("Anlage 2 zum Arbeitsvertrag\nStellenbeschreibung", None, "doc_type:annex"),
        (
            "From: a@kanzlei.example\nTo: b@mandant.example\nSubject: Kündigung des Mietvertrags\n\nHallo",
            "Kündigung des Mietvertrags",
            "doc_type:correspondence.email",
        ),
        ("An das Landgericht Hamburg\n\nKlage\n\nder Gerda Lindemann", None, "doc_type:pleading.statement_of_claim"),
        ("An das Landgericht Hamburg\n\nKlageerwiderung\n\nIn dem Rechtsstreit", None, "doc_type:pleading.statement_of_defence"),
        ("An das Amtsgericht\nIn dem Rechtsstreit X ./. Y\nwerden wir beantragen, die Klage abzuweisen.", None, "doc_type:pleading"),
        ("Vermerk\n\nZur Frage der Verjährung", None, "doc_type:memo"),
        ("Gesprächsnotiz vom 3.4.2020", None, "doc_type:memo.file_note"),
        ("Rechtsgutachten zur Wirksamkeit der Klausel", None, "doc_type:memo.legal_opinion"),
        ("Arbeitsvertrag\n\nzwischen der Alpha GmbH und Herrn Weiß", None, "doc_type:contract.employment"),
        ("Geschäftsführeranstellungsvertrag\n\nzwischen", None, "doc_type:contract.managing_director"),
        ("Mietvertrag für Wohnraum\nzwischen", None, "doc_type:contract.lease"),
        ("Vereinbarung zur Auftragsverarbeitung gemäß Art. 28 DSGVO", None, "doc_type:contract.data_processing"),
        ("Kostennote Nr. 2020-117", None, "doc_type:invoice"),
        ("Prozessvollmacht\n\nHiermit wird Rechtsanwalt Brandt", None, "doc_type:power_of_attorney"),
        ("Protokoll der Gesellschafterversammlung", None, "doc_type:minutes"),
        ("Sehr geehrter Herr Petersen,\nanbei erhalten Sie", None, "doc_type:correspondence.letter"),
        ("Zwischen der Alpha GmbH und der Beta AG wird folgende Vereinbarung getroffen:", None, "doc_type:contract"),
        ("Quartalszahlen 2020\nUmsatz 1.200.000", None, None),
    ],
)
def test_doc_type_rules(text: str, title: str | None, doc_type: str | None) -> None:
    assert classify_doc_type(text, title) == doc_type


def test_every_rule_doc_type_is_in_the_ontology() -> None:
    from ki_core.ontology import load_ontology
    from ki_workers.stages import metadata

    nodes = {node for _, node in metadata._HEADING_TYPES + metadata._CLAUSE_TYPES}
    nodes |= {node for _, node in metadata._MEMO_TYPES + metadata._PLEADING_TYPES}
    assert nodes <= set(load_ontology().nodes)


# ---------------------------------------------------------------------- dates


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Beschluss vom 7. Juli 2021\nIn dem Verfahren", date(2021, 7, 7)),
        ("Mietvertrag\nMietbeginn 01.04.2020\n\nMünchen, den 12.03.2020", date(2020, 3, 12)),
        ("Stand: 2021-11-30\nEntwurf", date(2021, 11, 30)),
        ("Datum: 3.4.21", date(2021, 4, 3)),
        ("Date: Thu, 12 Mar 2020 10:15:00 +0100\nSubject: x", date(2020, 3, 12)),
        ("Protokoll\nSitzung am 31.02.2020 und am 2. Mai 2020", date(2020, 5, 2)),
        ("Keine Daten, nur Text.", None),
    ],
)
def test_doc_date(text: str, expected: date | None) -> None:
    assert find_doc_date(text) == expected


BRIEF_CITING_2007 = """Arbeitsgericht Berlin
Magdeburger Platz 1
10785 Berlin
                                        Berlin, den 12. März 2024

Klage

wegen: Kündigungsschutz

Die Kündigung ist unwirksam (BGH, Urteil vom 8. Mai 2007 – VI ZR 186/06; BAG, Beschluss vom 3.4.2008 – 2 AZR 12/07).
"""


def test_a_brief_citing_a_2007_decision_is_dated_by_its_own_date_line() -> None:
    assert find_doc_date(BRIEF_CITING_2007) == date(2024, 3, 12)


def test_a_brief_dated_only_below_its_text_is_dated_there() -> None:
    text = BRIEF_CITING_2007.replace("Berlin, den 12. März 2024", "") + "\nBerlin, 2024-03-14\nDr. Kessler\nRechtsanwältin"

    assert find_doc_date(text) == date(2024, 3, 14)


def test_a_document_citing_only_decisions_and_laws_has_no_date() -> None:
    text = (
        "Vermerk zur Rechtsprechung\n\n"
        "BGH, Urteil vom 18. März 2015 – VIII ZR 185/14\n"
        "BGH, 08.05.2007 – VI ZR 186/06\n"
        "Maßgeblich ist § 307 BGB in der Fassung vom 2. Januar 2002; das BGB vom 18. August 1896 kannte die Regel nicht.\n"
    )

    assert find_doc_date(text) is None


def test_a_contract_is_dated_by_its_last_signature_and_not_by_its_terms() -> None:
    text = (
        "Arbeitsvertrag\n\n§ 1 Beginn\nDas Arbeitsverhältnis beginnt am 1. April 2023.\n\n"
        "München, 3.2.2023 ____________ Unterschrift      Ort, Datum: Augsburg, 06.02.2023 ____________\n"
    )

    assert find_doc_date(text) == date(2023, 2, 6)


def test_a_contract_whose_date_lines_are_blank_has_no_date() -> None:
    text = "Mietvertrag\n\n§ 2 Mietzeit\nDas Mietverhältnis beginnt am 01.11.2022.\n\n__________, den __________\n"

    assert find_doc_date(text) is None


def test_a_date_alone_above_the_salutation_dates_a_letter_and_one_below_it_is_a_deadline() -> None:
    text = (
        "Fotostudio Lux\nBilker Allee 77\n40219 Düsseldorf\n                    03.02.2023\n\n"
        "Sehr geehrter Herr Lux,\n\nwir fordern Sie auf, bis zum\n\n        17. Februar 2023\n\nzu zahlen.\n"
    )

    assert find_doc_date(text) == date(2023, 2, 3)
    assert find_doc_date(text.replace("03.02.2023", "")) is None


def test_an_email_is_dated_by_its_own_header_not_by_the_quoted_one() -> None:
    text = (
        "Von: Nadine Kurz\nGesendet: Dienstag, 12. März 2024 10:15\nAn: Dr. Kessler\nBetreff: AW: Entwurf\n\n"
        "Danke.\n\nVon: Dr. Kessler\nGesendet: Montag, 11. März 2024 17:02\nBetreff: Entwurf\n"
    )

    assert find_doc_date(text) == date(2024, 3, 12)


def test_a_decision_is_dated_by_its_own_pronouncement_not_by_the_decisions_it_cites() -> None:
    text = (
        "Amtsgericht Charlottenburg\n\nBeschluss\n\nIn dem Rechtsstreit\nLorenz ./. Westend Wohnen GmbH\n"
        "hat das Amtsgericht am 14.05.2024 beschlossen:\n"
        "Nach BGH, Urteil vom 5. Dezember 2018 – VIII ZR 271/17 liegt ein Mangel vor.\n"
    )

    assert find_doc_date(text) == date(2024, 5, 14)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Dear Ms Whitfield,", None),
        ("London, 12 March 2024\n\nDear Ms Whitfield,", date(2024, 3, 12)),
        ("Sent: Tuesday, March 19, 2024 4:12 PM\nTo: Jan Brandt\n", date(2024, 3, 19)),
        ("SHARE PURCHASE AGREEMENT\ndated 28 June 2024\nbetween", date(2024, 6, 28)),
    ],
)
def test_english_dates(text: str, expected: date | None) -> None:
    assert find_doc_date(text) == expected


# --------------------------------------------------------------------- titles


def test_a_phone_note_without_a_subject_is_named_after_the_call() -> None:
    text = (
        "Telefonnotiz\n\nDatum: 4.3.2024          Uhrzeit: 10:40 Uhr\n"
        "Anrufer: Herr Meier (Meier Haustechnik GmbH)\nRückruf unter: 030 447 12 90\n\nHerr Meier bittet um Rückruf.\n"
    )

    assert rules.extract(text).title == "Telefonnotiz: Anruf Herr Meier, 4.3.2024"


def test_a_note_heading_naming_only_its_kind_takes_the_subject() -> None:
    text = "Telefonnotiz vom 19.01.2024\n\nGesprächspartner: Frau Dr. Albers\nBetreff: Deckungszusage Schadenfall 2023-114\n"

    assert rules.extract(text).title == "Telefonnotiz: Deckungszusage Schadenfall 2023-114"


def test_a_note_heading_that_names_its_subject_is_the_title() -> None:
    text = "Aktennotiz über die Besprechung mit der Geschäftsführung\n\nBetreff: Standort Bremen\n"

    assert rules.extract(text).title == "Aktennotiz über die Besprechung mit der Geschäftsführung"


def test_a_reply_is_titled_by_its_subject_without_the_reply_prefix() -> None:
    text = "Von: Nadine Kurz\nAn: Dr. Kessler\nBetreff: AW: WG: Entwurf Aufhebungsvertrag Frau Kraus\n\nDanke."

    assert rules.extract(text).title == "Entwurf Aufhebungsvertrag Frau Kraus"


def test_a_letter_without_a_subject_label_is_titled_by_the_line_above_the_salutation() -> None:
    text = (
        "Rechtsanwältin Claudia Sommer\nKarl-Liebknecht-Straße 9 · 04107 Leipzig\n\n"
        "Frau\nRenate Lorenz\nGohliser Straße 33\n04155 Leipzig\n\n"
        "Unser Zeichen: 112/24 CS                Leipzig, 18. April 2024\n\n"
        "Ihre Mietminderung wegen Schimmelbildung\n\nSehr geehrte Frau Lorenz,\n\nvielen Dank.\n"
    )

    assert rules.extract(text).title == "Ihre Mietminderung wegen Schimmelbildung"


def test_a_letter_without_any_subject_takes_no_title_from_its_body() -> None:
    text = "Sehr geehrte Damen und Herren,\n\nanbei übersenden wir die unterzeichnete Vollmacht.\n\nMit freundlichen Grüßen"

    assert rules.extract(text).title is None


def test_a_pleading_is_titled_by_its_heading_below_the_letterhead_with_its_subject() -> None:
    assert rules.extract(BRIEF_CITING_2007).title == "Klage wegen Kündigungsschutz"


def test_markings_are_no_title_and_a_heading_keeps_its_continuation_line() -> None:
    text = (
        "ENTWURF – vertraulich\nStand: 16. Oktober 2023\n\nRechtsgutachten\n"
        "zur Wirksamkeit der Preisanpassungsklausel\n\nA. Auftrag\n"
    )

    assert rules.extract(text).title == "Rechtsgutachten zur Wirksamkeit der Preisanpassungsklausel"


# -------------------------------------------------------------------- clauses


def test_numbered_headings_become_ziffer_clauses_and_list_items_do_not() -> None:
    text = (
        "Dienstleistungsvertrag\n\n"
        "1. Vertragsgegenstand\nDer Auftragnehmer berät den Auftraggeber.\n"
        "2. Vergütung\nDie Vergütung beträgt 200 € je Stunde. Es gilt:\n"
        "1. Die Rechnung wird monatlich gestellt und ist binnen 14 Tagen zahlbar.\n"
        "3. Vertraulichkeit\nBeide Parteien wahren Stillschweigen.\n"
        "4. Sonstiges\nNichts weiter.\n"
    )

    clauses = find_clauses(text)

    assert [(c.locus, c.clause_type) for c in clauses] == [
        ("Ziffer 1", "clause_type:subject_matter"),
        ("Ziffer 2", "clause_type:payment"),
        ("Ziffer 3", "clause_type:confidentiality"),
    ]
    assert "binnen 14 Tagen" in clauses[1].text


def test_paragraph_headings_win_over_numbered_paragraphs_inside_them() -> None:
    text = "§ 12 Haftungsbeschränkung\n1. Haftung für leichte Fahrlässigkeit\nist ausgeschlossen.\n§ 13 Datenschutz\nDSGVO."

    assert [(c.locus, c.clause_type) for c in find_clauses(text)] == [
        ("§ 12", "clause_type:liability.limitation"),
        ("§ 13", "clause_type:data_protection"),
    ]


def test_long_clause_text_is_cut_at_a_word() -> None:
    text = "§ 5 Wettbewerbsverbot\n" + "Der Arbeitnehmer unterlässt jede Konkurrenztätigkeit. " * 60

    clause = find_clauses(text)[0]

    assert clause.clause_type == "clause_type:non_compete"
    assert len(clause.text) <= 1202
    assert clause.text.endswith(" …")


@pytest.mark.parametrize(
    ("heading", "clause_type"),
    [
        ("Außerordentliche Kündigung", "clause_type:termination.extraordinary"),
        ("Laufzeit und Kündigung", "clause_type:termination"),
        ("Gewährleistung", "clause_type:warranty"),
        ("Gerichtsstand, anwendbares Recht", "clause_type:jurisdiction"),
        ("Anwendbares Recht", "clause_type:governing_law"),
        ("Schlussbestimmungen", None),
    ],
)
def test_clause_heading_keywords(heading: str, clause_type: str | None) -> None:
    assert classify_clause_heading(heading) == clause_type


def test_a_statute_text_gets_no_clauses() -> None:
    statute = "Bürgerliches Gesetzbuch\n\n§ 573 Ordentliche Kündigung des Vermieters\nDer Vermieter kann nur kündigen, wenn er ein berechtigtes Interesse hat."

    meta = rules.extract(statute)

    assert meta.doc_type == "doc_type:statute"
    assert meta.notable_clauses == []


# ------------------------------------------------------------------- language


@pytest.mark.parametrize(
    ("text", "language"),
    [
        (LEASE, "de"),
        (JUDGMENT, "de"),
        (ENGLISH_NDA, "en"),
        ("4711 0815 1234 5678", None),
        ("Müller Meier Schulze Schmidt Hoffmann Becker Wagner", None),
    ],
)
def test_language_by_stopword_ratio(text: str, language: str | None) -> None:
    assert detect_language(text) == language


# ------------------------------------------------------------------ factories


def test_rules_are_the_default_extractor() -> None:
    extractor = extractor_from_settings(load_settings())

    assert isinstance(extractor, RuleBasedExtractor)
    assert extractor.producer == f"rules:{RULES_VERSION}:ids{EXTRACTOR_VERSION}"


# ----------------------------------------------------------- the LLM extractor


def llm_answer(**overrides) -> dict:
    answer = {
        "title": "Mietvertrag über Gewerberäume",
        "doc_type": "doc_type:contract.lease.commercial",
        "matter": None,
        "reference_numbers": ["MV-2020-0417"],
        "parties": [{"name": "Hanse Immobilien GmbH", "role": "Vermieter"}],
        "identifiers": ["BGB 556"],
        "doc_date": "2020-03-15",
        "language": "de",
        "notable_clauses": [{"locus": "§ 5", "clause_type": "clause_type:termination", "text": "§ 5 Kündigung ..."}],
    }
    return answer | overrides


def llm_extractor(fake: FakeChatGateway, **options) -> LLMExtractor:
    return LLMExtractor(ChatGateway(base_url=fake.base_url, model="meta-model", backoff_seconds=0.01, **options))


def test_llm_extractor_returns_the_validated_answer_with_our_identifiers(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer_json(llm_answer())

    meta = llm_extractor(fake_gateway).extract(LEASE, title="Mietvertrag")

    assert meta == DocumentMetadata(
        title="Mietvertrag über Gewerberäume",
        doc_type="doc_type:contract.lease.commercial",
        reference_numbers=["MV-2020-0417"],
        parties=[Party(name="Hanse Immobilien GmbH", role="Vermieter")],
        identifiers=["§ 556 BGB", "§ 543 BGB"],
        doc_date=date(2020, 3, 15),
        language="de",
        notable_clauses=[NotableClause(locus="§ 5", clause_type="clause_type:termination", text="§ 5 Kündigung ...")],
    )


def test_llm_request_carries_the_schema_and_the_ontology(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer_json(llm_answer())

    llm_extractor(fake_gateway).extract(LEASE, title="Mietvertrag")

    body = fake_gateway.requests[0]["body"]
    assert body["model"] == "meta-model"
    schema = body["response_format"]["json_schema"]
    assert schema["name"] == "DocumentMetadata"
    assert set(schema["schema"]["required"]) == set(DocumentMetadata.model_fields)
    system, user = body["messages"]
    assert "doc_type:contract.lease.commercial: Gewerbemietvertrag" in system["content"]
    assert "clause_type:severability: Salvatorische Klausel" in system["content"]
    assert user["content"].startswith("Dateititel: Mietvertrag\n\nMietvertrag über Gewerberäume")


def test_llm_sees_head_and_tail_of_a_long_document(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer_json(llm_answer())
    text = "ANFANG " + "Fülltext. " * 5000 + " ENDE"

    llm_extractor(fake_gateway).extract(text)

    user = fake_gateway.requests[0]["body"]["messages"][1]["content"]
    assert user.startswith("ANFANG") and user.endswith("ENDE")
    assert "\n\n[…]\n\n" in user
    assert len(user) < len(text)


def test_llm_unknown_types_are_mapped_to_the_nearest_known_node_or_dropped(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer_json(
        llm_answer(
            doc_type="doc_type:contract.franchise",
            notable_clauses=[
                {"locus": "§ 5", "clause_type": "clause_type:termination.notice_period", "text": "a"},
                {"locus": "§ 6", "clause_type": "clause_type:horoscope", "text": "b"},
                {"locus": "§ 7", "clause_type": "Gerichtsstand", "text": "c"},
            ],
        )
    )
    fake_gateway.answer_json(llm_answer(doc_type="doc_type:podcast"))
    extractor = llm_extractor(fake_gateway)

    first = extractor.extract(LEASE)
    second = extractor.extract(LEASE)

    assert first.doc_type == "doc_type:contract"
    assert [c.clause_type for c in first.notable_clauses] == [
        "clause_type:termination",
        None,
        "clause_type:jurisdiction",
    ]
    assert second.doc_type is None


def test_llm_invalid_json_is_a_gateway_error(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer(200, chat_completion('{"title": "Mietvertrag", "doc_type": '))

    with pytest.raises(GatewayError, match=r"^model output is not JSON"):
        llm_extractor(fake_gateway).extract(LEASE)


def test_llm_answer_that_breaks_the_schema_is_a_gateway_error(fake_gateway: FakeChatGateway) -> None:
    fake_gateway.answer_json(llm_answer(doc_date="15.03.2020"))

    with pytest.raises(GatewayError, match=r"does not validate against DocumentMetadata: doc_date"):
        llm_extractor(fake_gateway).extract(LEASE)


def test_llm_503_then_success_through_the_settings(fake_gateway: FakeChatGateway) -> None:
    settings = load_settings(llm={"base_url": fake_gateway.base_url, "model": "meta-model", "metadata_extractor": "llm"})
    fake_gateway.answer(503, json.dumps({"error": {"message": "busy"}}), headers={"Retry-After": "0"})
    fake_gateway.answer_json(llm_answer(language=None))

    extractor = extractor_from_settings(settings)
    meta = extractor.extract(LEASE)

    assert extractor.producer == f"llm:meta-model:ids{EXTRACTOR_VERSION}"
    assert meta.doc_type == "doc_type:contract.lease.commercial"
    assert meta.language == "de"  # the model left it open; the stopword rule fills it
    assert len(fake_gateway.requests) == 2


_VERSUS_PIECES = st.sampled_from(
    ["Müller", "Schmidt GmbH", " ", "  ", " ./. ", "./.", ",", ";", ":", "\n", " wegen ", " – ", "-", "x"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_VERSUS_PIECES, max_size=30).map("".join))
@example("\n./. ./. Müller")  # overlapping signs: once missed by a non-overlapping scan
def test_the_matter_search_finds_what_a_plain_regex_search_finds(text):
    from ki_workers.stages.metadata import _MATTER_VERSUS, _first_versus

    expected = _MATTER_VERSUS.search(text)
    found = _first_versus(text)
    assert (found and found.span()) == (expected and expected.span())

