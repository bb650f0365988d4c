"""The compound splitter: a court's compounds searched as the words the statute text uses (issue 44)."""

from __future__ import annotations

from ki_query.compounds import CompoundSplitter

# Each word of the parts below occurs at least three times; the compounds themselves never.
TEXTS = [
    "Die Räumung der Wohnung kann das Gericht anordnen. Eine Klage auf Räumung ist zulässig.",
    "Die Klage ist zu begründen. Die Räumung erfolgt nach Ablauf der Frist.",
    "Die Miete ist monatlich zu zahlen. Ein Rückstand der Miete berechtigt zur Klage.",
    "Bleibt ein Rückstand, so kann gekündigt werden; der Rückstand ist zu verzinsen. Die Miete mindert sich.",
    "Jedenfalls gilt: jedenfalls nicht, jedenfalls später, jedenfalls nie, jedenfalls zuletzt.",
]


def splitter() -> CompoundSplitter:
    return CompoundSplitter.learn(TEXTS)


def test_a_compound_splits_into_two_words_of_the_corpus_without_its_linking_s() -> None:
    assert splitter().parts("Räumungsklage") == ("räumung", "klage")


def test_a_first_part_that_lost_its_e_gets_it_back() -> None:
    assert splitter().parts("Mietrückstand") == ("miete", "rückstand")


def test_words_the_corpus_uses_short_words_and_unknown_parts_stay_whole() -> None:
    assert splitter().parts("Jedenfalls") is None  # known: occurs five times
    assert splitter().parts("Mietklage") is None  # below ten letters
    assert splitter().parts("Räumungsfiktion") is None  # "fiktion" is not a word of the corpus


def test_the_question_is_followed_by_each_part_once_and_unchanged_without_compounds() -> None:
    expanded = splitter().expanded("Räumungsklage wegen Mietrückstand und Räumungsklage")
    assert expanded == "Räumungsklage wegen Mietrückstand und Räumungsklage räumung klage miete rückstand"
    assert splitter().expanded("Die Miete ist fällig") == "Die Miete ist fällig"
