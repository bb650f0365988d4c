"""The search box's language: what is an operator, what stays text, and what is refused (issue 39)."""

from __future__ import annotations

import re
from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ki_core.search.constraint import AllOf, AnyOf, KeywordMatch, KeywordPattern, KeywordPrefix, TextMatch
from ki_query.query_language.parser import parse_query
from ki_query.query_language.plan import plan_query, surely_plain
from ki_query.query_language.syntax import All, Any, DateSpan, Field, Not, Phrase, QuerySyntaxError, Wildcard, Word

PLAIN = [
    "Haftung: Folgeschäden",
    "Kündigung - fristlos",
    "Wann verjährt der Anspruch?",
    "ECLI:DE:BGH:2020:120320UVIIZR123.19.0",
    "Abs. 2 [neu]",
    "~Kosten",
    "Müller/Schmidt",
    "§§ 280, 281 BGB",
    "Kündigung fristlos",
    "a && b || c",
    "Preis^2 {netto} /regex/",
    "Kosten*Nutzen",
    "und oder nicht or and",
    "Verordnung (EU) 2016/679 Art. 6",
    "Richtlinie (EU) 2019/771 Gewährleistung",
]


@pytest.mark.parametrize("query", PLAIN)
def test_text_without_operators_stays_a_plain_ranked_query(query: str) -> None:
    plan = plan_query(query, None)
    assert plan.parsed.plain
    assert plan.constraint is None
    assert plan.text == query  # the legs read exactly what was typed, as before the query language


ECLI = "ECLI:DE:BGH:2020:120320UVIIZR123.19.0"


def test_identifiers_are_found_before_parsing_and_stay_the_words_they_were() -> None:
    """An ECLI's colons make no field, an EU act's "(EU)" no group, in a boolean query as in a plain one."""
    assert parse_query(f"{ECLI} -Kündigung").tree == All(
        children=(Word(ECLI, 0), Not(Word("Kündigung", 39), 38)), position=-1
    )
    assert parse_query(f"{ECLI} OR Kündigung").tree == Any(
        children=(Word(ECLI, 0), Word("Kündigung", 41)), position=0
    )
    # Inside parentheses an identifier opening an operand is a citation, read whole (see below).
    assert parse_query(f"({ECLI} OR Kündigung)").tree == All(
        children=(Any(children=(Field("docket", ECLI, 1), Word("Kündigung", 42)), position=1),), position=0
    )
    tree = parse_query("Verordnung (EU) 2016/679 -Einwilligung").tree
    assert tree == All(children=(Word("Verordnung", 0), Word("(EU)", 11), Word("2016/679", 16),
                                 Not(Word("Einwilligung", 26), 25)), position=-1)  # fmt: skip


def test_a_parenthesis_the_identifier_does_not_close_stays_the_users() -> None:
    tree = parse_query("(Art. 6 DSGVO OR Einwilligung) Newsletter").tree
    assert isinstance(tree, All) and isinstance(tree.children[0], All)
    assert isinstance(tree.children[0].children[0], Any)


def test_a_norm_without_a_law_is_a_prefix_on_every_law() -> None:
    assert parse_query("norm:§573c Mietsache").tree == All(
        children=(Field("statute", "§573c", 0), Word("Mietsache", 11)), position=0
    )
    constraint = plan_query("norm:§573c Abs. 1", None).constraint
    assert constraint == KeywordPrefix(field="identifier_values", prefix="§ 573c Abs. 1 ")
    assert plan_query("norm:§ 573c BGB", None).constraint == KeywordMatch(
        field="identifier_values", values=("§ 573c BGB",)
    )


@pytest.mark.parametrize(
    ("query", "excluded"),
    [
        ("Kündigung -§ 573c BGB", Field("statute", "§ 573c BGB", 11)),
        ("Kündigung NOT § 573c BGB", Field("statute", "§ 573c BGB", 14)),
        ("Kündigung -§573c Abs. 1 BGB", Field("statute", "§573c Abs. 1 BGB", 11)),
        ("Kündigung -§§ 573, 574 BGB", Field("statute", "§§ 573, 574 BGB", 11)),
        ("Kündigung -§ 573 Abs. 1, § 574 BGB", Field("statute", "§ 573 Abs. 1, § 574 BGB", 11)),
        ("Kündigung -Art. 6 DSGVO", Field("statute", "Art. 6 DSGVO", 11)),
        ("Kündigung -Az. 5 U 12/21", Field("docket", "5 U 12/21", 11)),
        ("Kündigung NOT Aktenzeichen VII ZR 123/19", Field("docket", "VII ZR 123/19", 14)),
        ("Kündigung -VII ZR 123/19", Field("docket", "VII ZR 123/19", 11)),
        (f"Kündigung -{ECLI}", Field("docket", ECLI, 11)),
        ("Kündigung -§ 573c", Field("statute", "§ 573c", 11)),
        ("Kündigung NOT §§ 573, 574", Field("statute", "§§ 573, 574", 14)),
    ],
)
def test_an_identifier_after_an_exclusion_is_excluded_whole(query: str, excluded: Field) -> None:
    """`-§ 573c BGB` means "not citing § 573c BGB", as `-norm:§ 573c BGB` does: the minus takes the
    whole citation (the old reading excluded "§" and required "573c" and "BGB")."""
    tree = parse_query(query).tree
    assert tree == All(children=(Word("Kündigung", 0), Not(excluded, query.index(" ") + 1)), position=-1)
    plan = plan_query(query, None)
    assert plan.text == "Kündigung" and plan.identifier_terms == ()  # an excluded citation neither embeds nor ranks


def test_an_excluded_citation_is_a_keyword_exclusion_on_the_identifier_values() -> None:
    words = TextMatch(text="Kündigung", tokens=((0, "kundig"),))
    assert plan_query("Kündigung -§ 573c BGB Wohnraum", None).constraint == AllOf(
        must=(words, TextMatch(text="Wohnraum", tokens=((0, "wohnraum"),))),
        must_not=(KeywordMatch(field="identifier_values", values=("§ 573c BGB",)),),
    )
    assert plan_query("Kündigung -§§ 573, 574 BGB", None).constraint == AllOf(
        must=(words,), must_not=(KeywordMatch(field="identifier_values", values=("§ 573 BGB", "§ 574 BGB")),)
    )
    assert plan_query("Kündigung -§ 573c", None).constraint == AllOf(
        must=(words,), must_not=(KeywordPrefix(field="identifier_values", prefix="§ 573c "),)
    )


@pytest.mark.parametrize("query", ["Kündigung - § 573c BGB", "Kündigung-§ 573c BGB", "Kündigung -Artenschutz"])
def test_only_a_minus_right_before_the_citation_excludes_it(query: str) -> None:
    assert not any(isinstance(node, Field) for node in _nodes(parse_query(query).tree))


def test_a_quoted_citation_stays_a_phrase_of_text() -> None:
    """Quotes mean the words as written, here as everywhere: `-"§ 573c BGB"` excludes documents whose
    text has "573c BGB" in a row, not those citing "§ 573c Abs. 1 BGB" (that is `-§ 573c BGB`)."""
    tree = parse_query('Kündigung -"§ 573c BGB"').tree
    assert tree == All(children=(Word("Kündigung", 0), Not(Phrase("§ 573c BGB", 11), 10)), position=-1)


def test_several_sections_without_a_law_are_any_of_them_in_every_law() -> None:
    assert plan_query("norm:§§ 573, 574", None).constraint == AnyOf(any=(
        KeywordPrefix(field="identifier_values", prefix="§ 573 "),
        KeywordPrefix(field="identifier_values", prefix="§ 574 "),
    ))  # fmt: skip
    tree = parse_query("norm:§§ 573, 574 Mietsache").tree
    assert tree == All(children=(Field("statute", "§§ 573, 574", 0), Word("Mietsache", 17)), position=0)


@pytest.mark.parametrize(
    ("query", "values"),
    [
        ("norm:§§ 573, 574 BGB", ("§ 573 BGB", "§ 574 BGB")),  # the old cut kept only § 573 BGB
        ("norm:§ 573 Abs. 1, § 574 BGB", ("§ 573 Abs. 1 BGB", "§ 574 BGB")),
        ("az:VII ZR 123/19, VIII ZR 123/20", ("VII ZR 123/19", "VIII ZR 123/20")),
    ],
)
def test_several_identifiers_in_one_field_are_any_of_them(query: str, values: tuple[str, ...]) -> None:
    plan = plan_query(query, None)
    assert plan.constraint == KeywordMatch(field="identifier_values", values=values)
    assert {value for value, _ in plan.identifier_terms} >= set(values)


@pytest.mark.parametrize(
    ("query", "citation"),
    [
        ("Kündigung -(§ 573c BGB)", Not(All(children=(Field("statute", "§ 573c BGB", 12),), position=11), 10)),
        ("Kündigung NOT (§ 573c BGB)", Not(All(children=(Field("statute", "§ 573c BGB", 15),), position=14), 10)),
        ("Kündigung -(§ 573c)", Not(All(children=(Field("statute", "§ 573c", 12),), position=11), 10)),
        ("Kündigung -(Az. 5 U 12/21)", Not(All(children=(Field("docket", "5 U 12/21", 12),), position=11), 10)),
        (
            "Kündigung (§ 573c BGB OR § 574 BGB)",
            All(children=(Any(children=(Field("statute", "§ 573c BGB", 11), Field("statute", "§ 574 BGB", 25)),
                              position=11),), position=10),
        ),
        (
            "Kündigung (Wohnraum OR §§ 573, 574)",
            All(children=(Any(children=(Word("Wohnraum", 11), Field("statute", "§§ 573, 574", 23)), position=11),),
                position=10),
        ),
        (
            "Kündigung -(Verordnung (EU) 2016/679)",
            Not(All(children=(Field("statute", "Verordnung (EU) 2016/679", 12),), position=11), 10),
        ),
    ],
)  # fmt: skip
def test_a_citation_opening_an_operand_in_parentheses_is_the_citation(query: str, citation) -> None:
    """Inside parentheses, a citation after the opening one, OR or AND is read whole, as after a minus (the
    old parser read `-(§ 573c BGB)` as "not all of 573c and BGB" and the group's citations as words)."""
    assert parse_query(query).tree == All(children=(Word("Kündigung", 0), citation), position=-1)


@pytest.mark.parametrize(
    "query", ["§ 573c BGB OR § 574 BGB", "(Kündigung § 573c BGB)", "Kündigung § 573c BGB -Wohnraum"]
)
def test_a_citation_that_opens_no_operand_stays_words(query: str) -> None:
    """Only an operator or a group's opening makes a citation a citation; elsewhere it is the words it is."""
    fields = [node for node in _nodes(parse_query(query).tree) if isinstance(node, Field)]
    assert fields == []


@pytest.mark.parametrize(
    ("query", "value", "position"),
    [
        ("Kündigung -Az.5 U 12/21", "5 U 12/21", 11),
        ("Kündigung -Az.5U12/21", "5 U 12/21", 11),
        ("Kündigung NOT Az.VIIZR123/19", "VII ZR 123/19", 14),
        ("Kündigung -Aktenzeichen:5U12/21", "5 U 12/21", 11),
    ],
)
def test_a_labelled_file_number_without_spaces_is_excluded_whole(query: str, value: str, position: int) -> None:
    tree = parse_query(query).tree
    assert tree == All(children=(Word("Kündigung", 0), Not(Field("docket", value, position), 10)), position=-1)
    assert plan_query(query, None).constraint == AllOf(
        must=(TextMatch(text="Kündigung", tokens=((0, "kundig"),)),),
        must_not=(KeywordMatch(field="identifier_values", values=(value,)),),
    )


def test_a_file_number_without_spaces_is_read_only_when_the_extractor_knows_its_register() -> None:
    assert parse_query("az:5U12/21 Miete").tree == All(
        children=(Field("docket", "5 U 12/21", 0), Word("Miete", 11)), position=0
    )
    assert parse_query("Kündigung -Az.Xyz12/21").tree == All(
        children=(Word("Kündigung", 0), Not(Word("Az.Xyz12/21", 11), 10)), position=-1
    )


def _matches(query: str, value: str) -> bool:
    constraint = plan_query(query, None).constraint
    leaves = constraint.any if isinstance(constraint, AnyOf) else (constraint,)  # type: ignore[union-attr]
    return any(
        (isinstance(leaf, KeywordMatch) and value in leaf.values)
        or (isinstance(leaf, KeywordPrefix) and value.startswith(leaf.prefix))
        or (isinstance(leaf, KeywordPattern) and re.fullmatch(leaf.pattern, value) is not None)
        for leaf in leaves
    )


@pytest.mark.parametrize(
    ("query", "inside", "outside"),
    [
        ("norm:§§ 573-575 BGB",
         ["§ 573 BGB", "§ 573a BGB", "§ 573d BGB", "§ 574c BGB", "§ 575 BGB", "§§ 573-575 BGB"],
         ["§ 572 BGB", "§ 575a BGB", "§ 576 BGB", "§ 5730 BGB", "§ 573 ZPO", "§ 57 BGB"]),
        ("norm:§§ 573–575 BGB", ["§ 574 BGB"], ["§ 574 ZPO"]),
        ("norm:§§ 573 bis 575 BGB", ["§ 574 BGB"], ["§ 576 BGB"]),
        ("norm:§§ 573c-575a BGB",
         ["§ 573c BGB", "§ 574 BGB", "§ 575a BGB"], ["§ 573 BGB", "§ 573b BGB", "§ 575b BGB"]),
        ("norm:§§ 573a-573d BGB", ["§ 573a BGB", "§ 573d BGB"], ["§ 573 BGB", "§ 573e BGB", "§ 574 BGB"]),
        ("norm:§§ 573-575",
         ["§ 573 ZPO", "§ 573c Abs. 1 BGB", "§ 575 Abs. 2 InsO"], ["§ 575a BGB", "§ 5730 BGB"]),
        ("norm:Art. 5-7 DSGVO", ["Art. 5 DSGVO", "Art. 6 DSGVO", "Art. 7 DSGVO"], ["Art. 8 DSGVO", "Art. 6 BayEUG"]),
    ],
)  # fmt: skip
def test_a_range_is_every_section_from_its_first_to_its_last(query: str, inside: list[str], outside: list[str]) -> None:
    """Letter sections between the ends are inside (§ 573c in §§ 573-575), those after the last are not
    (§ 575a follows § 575). With a law the range matches the sections' own values, which every part of
    them carries as its ancestor; without one, each section in every law."""
    assert [value for value in inside if not _matches(query, value)] == []
    assert [value for value in outside if _matches(query, value)] == []


@pytest.mark.parametrize(
    "query", ["norm:DSGVO", "norm:DS-GVO", "norm:Datenschutz-Grundverordnung", "norm:Verordnung (EU) 2016/679"]
)
def test_an_eu_act_named_alone_is_the_act_and_every_article_of_it(query: str) -> None:
    inside = ["DSGVO", "Art. 6 DSGVO", "Art. 6 Abs. 1 DSGVO", "Art. 4 Nr. 11 DSGVO"]
    outside = ["Art. 6 BDSG", "§ 26 BDSG", "Art. 6 EU-DSGVO-Anpassungsgesetz", "RL 95/46/EG"]
    assert [value for value in inside if not _matches(query, value)] == []
    assert [value for value in outside if _matches(query, value)] == []


def test_a_german_law_named_alone_is_every_citation_of_it() -> None:
    assert _matches("norm:BGB", "§ 573c Abs. 1 BGB") and _matches("norm:BGB", "§ 573c BGB")
    assert not any(_matches("norm:BGB", value) for value in ("Art. 229 EGBGB", "§ 5 SGB V", "§ 1 BGBEG"))


def _nodes(node):
    yield node
    for child in getattr(node, "children", ()) or ((node.child,) if isinstance(node, Not) else ()):
        yield from _nodes(child)


def test_a_phrase_and_an_exclusion_make_a_boolean_set() -> None:
    tree = parse_query('"fristlose Kündigung" -Wohnraum').tree
    assert tree == All(children=(Phrase("fristlose Kündigung", 0), Not(Word("Wohnraum", 23), 22)), position=-1)


def test_or_binds_weaker_than_the_implicit_and() -> None:
    tree = parse_query("Miete Kündigung OR Pacht").tree
    assert isinstance(tree, Any)
    assert tree.children[1] == Word("Pacht", 19)
    assert tree.children[0] == All(children=(Word("Miete", 0), Word("Kündigung", 6)), position=-1)


def test_parentheses_and_not() -> None:
    tree = parse_query("NOT (Wohnraum OR Gewerbe) Kündigung").tree
    assert isinstance(tree, All) and isinstance(tree.children[0], Not)
    assert tree.children[1] == Word("Kündigung", 26)


def test_a_trailing_star_is_a_wildcard_anywhere_else_text() -> None:
    assert parse_query("Kündig*").tree == Wildcard("Kündig", 0)
    assert parse_query("*Kündigung").plain
    assert plan_query("Kündig*", None).constraint.prefix == "kundig"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("query", "field", "value"),
    [
        ("Az: VII ZR 123/19", "docket", "VII ZR 123/19"),
        ("az:VII ZR 123/19", "docket", "VII ZR 123/19"),
        ("docket:KW-2024-017", "docket", "KW-2024-017"),
        ("norm:§ 573c Abs. 1 BGB", "statute", "§ 573c Abs. 1 BGB"),
        ('gericht:"OLG München"', "court", "OLG München"),
        ("gericht:OLG München", "court", "OLG München"),
        ("court:BGH", "court", "BGH"),
        ("typ:Urteil", "type", "Urteil"),
        ("Projekt:nordbau", "project", "nordbau"),
        ("mandat:Vogt", "matter", "Vogt"),
    ],
)
def test_field_values(query: str, field: str, value: str) -> None:
    assert parse_query(query).tree == Field(field, value, 0)  # type: ignore[arg-type]


def test_an_identifier_value_ends_where_the_identifier_ends_the_rest_is_text() -> None:
    tree = parse_query("az:VII ZR 123/19 Mietminderung").tree
    assert isinstance(tree, All)
    assert tree.children == (Field("docket", "VII ZR 123/19", 0), Word("Mietminderung", 17))


def test_a_field_value_runs_to_the_next_operator() -> None:
    tree = parse_query("az:VII ZR 123/19 OR norm:§ 573c BGB").tree
    assert tree == Any(children=(Field("docket", "VII ZR 123/19", 0), Field("statute", "§ 573c BGB", 20)), position=0)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("datum:2020-01-01..2020-12-31", date(2020, 1, 1), date(2020, 12, 31)),
        ("datum:2020-01-01..", date(2020, 1, 1), None),
        ("date:..2020-12-31", None, date(2020, 12, 31)),
        ("datum:2021-03-04", date(2021, 3, 4), date(2021, 3, 4)),
    ],
)
def test_date_ranges_with_open_ends(query: str, start: date | None, end: date | None) -> None:
    assert parse_query(query).tree == DateSpan(start, end, 0)


@pytest.mark.parametrize(
    ("query", "position", "words"),
    [
        ('"fristlose Kündigung', 0, "Anführungszeichen"),
        ('Kündigung "fristlos', 10, "Anführungszeichen"),
        ("(Miete OR Pacht", 0, "Klammer"),
        ("Miete OR Pacht)", 14, "Klammer"),
        ("datum:2020-13-01..", 0, "Datum"),
        ("datum:2021-01-01..2020-01-01", 0, "Anfang liegt nach dem Ende"),
        ("datum:gestern", 0, "kein Zeitraum"),
        ("-Wohnraum", 0, "nur aus"),
        ("NOT Wohnraum -Gewerbe", 0, "nur aus"),
        ("Miete OR", 8, "fehlt"),
        ("typ:Blumenkohl", 0, "Dokumenttyp"),
        ("norm:§§", 0, "nennt keine Vorschrift"),
        ("Miete norm:§ OR Pacht", 6, "nennt keine Vorschrift"),
        ("Miete norm:Art. Mietsache", 6, "nennt keine Vorschrift"),
        ("Miete norm:§§ 1-100 BGB", 6, "umfasst 100 Vorschriften; ein Bereich darf höchstens 50"),
        ("Miete norm:§§ 500-551", 6, "umfasst 52 Vorschriften"),
        ("Miete -§§ 1-2385 BGB", 7, "umfasst 2385 Vorschriften"),
        ("Miete (§§ 575-573 BGB OR Pacht)", 7, "endet vor seinem Anfang"),
        ("Miete norm:§§ 573c-573a BGB", 6, "endet vor seinem Anfang"),
    ],
)
def test_bad_input_is_refused_with_position_and_a_german_message(query: str, position: int, words: str) -> None:
    with pytest.raises(QuerySyntaxError) as refused:
        plan_query(query, None)
    assert refused.value.position == position
    assert words in refused.value.message
    assert refused.value.hint.startswith("Hinweis:")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('ab -"()*:ORANDT§~?/')), max_size=14))
def test_the_parser_skipped_for_plain_text_reads_it_as_plain_too(query: str) -> None:
    """plan_query skips the grammar for text without operator signs: the grammar agrees it is plain."""
    if surely_plain(query) and query.strip():
        assert parse_query(query).plain
