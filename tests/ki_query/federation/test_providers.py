"""The shipped providers: law-mention router and named corpora, anchor register, Verweise."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest

from ki_query.federation.errors import ProviderConfigError
from ki_query.federation.retriever import Address, FederatedRetriever
from ki_query.federation.providers import AnchorRegister, CorpusMentions, MentionRouter, StatuteVerweise, expand_sections
from tests.ki_query.memory_corpora import MemoryRegistry, MemoryRetriever, fixture_records, record_hit

CORPORA = {
    "statutes": ("BGB", "ZPO"),
    "sozialrecht": ("SGB V",),
    "am-rl": ("Arzneimittel-Richtlinie", "Anlage 11"),
    "firm": (),
}
TITLES = {"am-rl": "Arzneimittel-Richtlinie des G-BA", "firm": "Kanzlei-Wissensindex"}
IDS = list(CORPORA)
EXAMPLE_ANCHORS = Path(str(files("ki_core.data").joinpath("anchors.example.json")))


@pytest.fixture
def mentions() -> CorpusMentions:
    return CorpusMentions(CORPORA, TITLES)


# ------------------------------------------------------------------ named corpora and router


@pytest.mark.parametrize(
    ("question", "named"),
    [
        ("Kündigungsfrist nach § 573c BGB?", ["statutes"]),
        ("Was gilt nach dem Bürgerlichen Gesetzbuch für die Miete?", ["statutes"]),
        ("Anspruch auf Krankenbehandlung nach § 27 SGB V", ["sozialrecht"]),
        ("Leistungen nach dem SGB 5", ["sozialrecht"]),
        ("Was steht im Fünften Buch Sozialgesetzbuch zu Hilfsmitteln?", ["sozialrecht"]),
        ("Was regelt die Arzneimittel-Richtlinie zu Lifestyle-Präparaten?", ["am-rl"]),
        ("Klagefrist nach der ZPO und Zuzahlung nach SGB V", ["statutes", "sozialrecht"]),
        ("Fundstelle BGBl. I S. 2477", []),
        ("Wie hoch ist die Zuzahlung für Arzneimittel?", []),
    ],
)
def test_corpora_are_named_by_the_laws_they_hold_or_their_own_name(mentions, question, named) -> None:
    assert mentions(question, IDS) == named


def test_named_corpora_are_restricted_to_the_ids_asked_about(mentions) -> None:
    assert mentions("§ 573c BGB und § 27 SGB V", ["sozialrecht"]) == ["sozialrecht"]


def test_the_router_sends_a_question_naming_laws_to_their_corpora_plus_the_always_asked_ones(mentions) -> None:
    router = MentionRouter(mentions, always=["firm"])
    assert router("Kündigungsfrist nach § 573c BGB?", IDS) == ["statutes", "firm"]
    assert router("Wie hoch ist die Zuzahlung für Arzneimittel?", IDS) == IDS


def test_mentions_from_a_registry_read_containers_and_titles() -> None:
    registry = MemoryRegistry(
        {"statutes": MemoryRetriever([]), "sozialrecht": MemoryRetriever([])},
        containers={"statutes": ("BGB",), "sozialrecht": ("SGB V",)},
    )
    assert CorpusMentions.from_registry(registry)("Krankengeld nach SGB V", ["statutes", "sozialrecht"]) == ["sozialrecht"]


# ------------------------------------------------------------------ anchors


def test_the_example_anchor_file_loads_and_maps_questions_to_addresses() -> None:
    register = AnchorRegister.from_file(EXAMPLE_ANCHORS)
    assert register("Welche Kündigungsfrist gilt für Wohnraum?") == [Address("statutes", "§ 573c", "BGB")]
    assert register("Habe ich Anspruch auf Arzneimittel?") == [
        Address("statutes", "§ 31", "SGB V", "1"),
        Address("statutes", "§ 12", "SGB V", "1", max_chunks=1),
    ]
    assert register("Wer zahlt die Reparatur der Heizung?") == []


@pytest.mark.parametrize(
    ("question", "anchored"),
    [
        ("Kündigungsfrist Mietvertrag", True),
        ("Mit welcher Frist kann der Vermieter kündigen?", True),
        ("Wohnraummiete kündigen", True),
        ("Welche Kündigungsfrist gilt nach dem Kündigungsschutzgesetz?", False),
        ("Kann der Arbeitgeber wegen Weitergabe vertraulicher Daten fristlos kündigen?", False),
        ("Kündigungsfrist für Arbeitnehmer nach KSchG", False),
    ],
)
def test_the_example_lease_anchor_needs_a_lease_in_the_question_not_just_a_notice_period(question, anchored) -> None:
    residential_lease = Address("statutes", "§ 573c", "BGB")
    assert (residential_lease in AnchorRegister.from_file(EXAMPLE_ANCHORS)(question)) is anchored


def test_an_anchor_file_address_is_read_like_a_providers_dict(tmp_path) -> None:
    path = tmp_path / "anchors.json"
    path.write_text(json.dumps({"anchors": [{"pattern": "miete", "addresses": [
        {"corpus_id": "statutes", "container_id": "BGB", "section_id": "§ 573c", "subsection": 2, "max_chunks": 1},
        {"corpus_id": "statutes", "section_id": "§ 1", "subsection": ""}]}]}))
    assert AnchorRegister.from_file(path)("Miete") == [
        Address("statutes", "§ 573c", "BGB", "2", max_chunks=1), Address("statutes", "§ 1")]
    path.write_text(json.dumps({"anchors": [{"pattern": "x", "addresses": [{"corpus_id": "s", "section_id": "§ 1",
                                                                           "max_chunks": 0}]}]}))
    with pytest.raises(ProviderConfigError, match=r"anchors\[0\]: addresses entry 0 .*max_chunks"):
        AnchorRegister.from_file(path)


def test_anchor_addresses_matched_by_two_patterns_appear_once(tmp_path) -> None:
    path = tmp_path / "anchors.json"
    address = {"corpus_id": "statutes", "container_id": "BGB", "section_id": "§ 573c"}
    path.write_text(json.dumps({"anchors": [{"pattern": "miete", "addresses": [address]},
                                            {"pattern": "kündig", "addresses": [address]}]}))
    assert AnchorRegister.from_file(path)("Kündigung der Miete") == [Address("statutes", "§ 573c", "BGB")]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"anchors": [{"pattern": "(unclosed", "addresses": []}]}', "anchors[0]"),
        ('{"anchors": [{"pattern": "x", "addresses": [{"corpus_id": "s"}]}]}', "section_id"),
        ("not json", "anchors file"),
    ],
)
def test_a_broken_anchor_file_is_a_config_error_naming_the_file_and_entry(tmp_path, content, message) -> None:
    path = tmp_path / "anchors.json"
    path.write_text(content)
    with pytest.raises(ProviderConfigError, match="anchors file") as raised:
        AnchorRegister.from_file(path)
    assert message in str(raised.value) and str(path) in str(raised.value)


def test_the_anchor_register_drives_mandatory_fetches_in_the_federation(tmp_path) -> None:
    path = tmp_path / "anchors.json"
    path.write_text(json.dumps({"anchors": [{"pattern": "wirtschaftlich", "addresses": [
        {"corpus_id": "sozialrecht", "container_id": "SGB V", "section_id": "§ 12", "subsection": "1"}]}]}))
    federation = FederatedRetriever(
        MemoryRegistry({"sozialrecht": MemoryRetriever(fixture_records("SGB V"))}),
        anchors=AnchorRegister.from_file(path),
    )
    top = federation.query("Muss die Versorgung wirtschaftlich sein?")[0]
    assert top["metadata"]["section_id"] == "§ 12" and "norm_anchor" in top["retrieval_kinds"]


# ------------------------------------------------------------------ Verweise


def sgb(section: str, subsection: str | None) -> dict:
    [record] = [r for r in fixture_records("SGB V") if r["section"] == section and r["subsection"] == subsection]
    return {**record_hit(record, score=0.8, kinds=["semantic"]), "corpus_id": "sozialrecht"}


def test_references_in_a_hit_resolve_in_the_hits_own_law() -> None:
    verweise = StatuteVerweise({"sozialrecht": ("SGB V",), "statutes": ("BGB",)})
    # SGB V § 2 Abs. 1: "... unter Beachtung des Wirtschaftlichkeitsgebots (§ 12) zur Verfügung"
    assert verweise([sgb("§ 2", "1")], ["sozialrecht", "statutes"]) == [Address("sozialrecht", "§ 12", "SGB V")]


def test_a_reference_to_an_absatz_addresses_that_subsection() -> None:
    verweise = StatuteVerweise({"sozialrecht": ("SGB V",)})
    # SGB V § 13 Abs. 1: "anstelle der Sach- oder Dienstleistung (§ 2 Abs. 2) Kosten erstatten"
    assert Address("sozialrecht", "§ 2", "SGB V", "2") in verweise([sgb("§ 13", "1")], ["sozialrecht"])


def test_self_references_and_laws_no_selected_corpus_holds_are_skipped() -> None:
    verweise = StatuteVerweise({"sozialrecht": ("SGB V",)})
    # § 13 Abs. 5: "Abweichend von Absatz 4 ... Krankenhausleistungen nach § 39": only § 39 is fetched.
    assert verweise([sgb("§ 13", "5")], ["sozialrecht"]) == [Address("sozialrecht", "§ 39", "SGB V")]
    assert verweise([sgb("§ 2", "1")], ["elsewhere"]) == []


def test_a_bare_section_in_a_contract_resolves_to_the_contract() -> None:
    verweise = StatuteVerweise({"vertrag": ("Rahmenvertrag", "Anlage 11"), "statutes": ("BGB",)})
    contract_hit = {
        "text": "Die Vergütung richtet sich nach § 10; die Kündigung nach § 12 Abs. 2.",
        "metadata": {"container_id": "Rahmenvertrag", "section_id": "§ 4"},
        "corpus_id": "vertrag",
    }
    assert verweise([contract_hit], ["vertrag", "statutes"]) == [
        Address("vertrag", "§ 10", "Rahmenvertrag"),
        Address("vertrag", "§ 12", "Rahmenvertrag", "2"),
    ]


def test_short_ranges_expand_to_their_sections() -> None:
    assert expand_sections("§§ 11-14") == ["§ 11", "§ 12", "§ 13", "§ 14"]
    assert expand_sections("§§ 1-40") == ["§ 1"]
    assert expand_sections("§ 573c") == ["§ 573c"]
    assert expand_sections("Art. 1-3") == ["Art. 1", "Art. 2", "Art. 3"]


def test_verweise_drive_reference_following_in_the_federation() -> None:
    records = fixture_records("SGB V")
    registry = MemoryRegistry({"sozialrecht": MemoryRetriever(records)}, containers={"sozialrecht": ("SGB V",)})
    federation = FederatedRetriever(registry, verweise=StatuteVerweise.from_registry(registry))
    hits = federation.query("im Dritten Kapitel genannten Leistungen unter Beachtung des Wirtschaftlichkeitsgebots", top_k=3)
    assert hits[0]["metadata"]["record_id"] == "SGB 5|§ 2|1"
    cited = [h for h in hits if h["retrieval_kinds"] == ["verweis"]]
    assert ("§ 12", 0.5) in [(h["metadata"]["section_id"], h["score"]) for h in cited]
