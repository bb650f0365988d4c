"""Highlighting marks what the lexical leg matched: analysed tokens equal, phrases as a whole."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ki_core.search.highlight import match_spans
from ki_core.search.text_index import german_analyzer
from ki_query.web.render import highlight

TEXT = "Der Vertrag ist unverträglich; die Verträge regeln Vertragsstrafen und die fristlose Kündigung."


def marked(text: str, terms=(), phrases=()) -> list[str]:
    return [text[start:end] for start, end in match_spans(text, terms, phrases)]


def test_a_word_is_marked_when_its_stem_is_the_query_stem_not_when_it_contains_it() -> None:
    assert marked(TEXT, ["Vertrag"]) == ["Vertrag", "Verträge"]


def test_no_decompounding_a_compound_is_not_its_parts() -> None:
    assert marked(TEXT, ["Strafe"]) == []
    assert marked(TEXT, ["Vertragsstrafe"]) == ["Vertragsstrafen"]


def test_stop_words_of_the_query_mark_nothing() -> None:
    assert marked(TEXT, ["der die und ist"]) == []


def test_a_phrase_is_marked_as_one_span_and_its_words_alone_are_not() -> None:
    text = "Eine Kündigung ist fristlos möglich; die fristlose Kündigung wirkt sofort."

    assert marked(text, phrases=["fristlose Kündigung"]) == ["fristlose Kündigung"]


def test_a_stop_word_inside_a_phrase_takes_any_word_in_its_place() -> None:
    text = "Kündigung aus wichtigem Grund; Kündigung wegen wichtigem Grund; Kündigung wichtigem Grund"

    assert marked(text, phrases=["Kündigung aus wichtigem Grund"]) == [
        "Kündigung aus wichtigem Grund",
        "Kündigung wegen wichtigem Grund",
    ]


def test_terms_and_phrases_together_merge_where_they_overlap() -> None:
    text = "die fristlose Kündigung und eine Kündigung"

    assert marked(text, ["Kündigung"], ["fristlose Kündigung"]) == ["fristlose Kündigung", "Kündigung"]


def test_the_page_filter_escapes_the_text_and_marks_the_words() -> None:
    html = str(highlight("<b>Verträge</b> & unverträglich", "Vertrag"))

    assert html == "&lt;b&gt;<mark>Verträge</mark>&lt;/b&gt; &amp; unverträglich"


@given(st.text(alphabet="abcäöüß ÄVvertagsK.,-", max_size=60), st.sampled_from(["Vertrag", "Kündigung", "Haftung"]))
def test_every_marked_word_analyses_to_a_query_token(text: str, term: str) -> None:
    analyzer = german_analyzer()
    wanted = set(analyzer.analyze(term))
    for start, end in match_spans(text, [term]):
        assert analyzer.analyze(text[start:end]) and set(analyzer.analyze(text[start:end])) <= wanted


# Words a highlight must read as both backends do: inflections the stemmer joins, a compound, stop words.
AGREEMENT_WORDS = "Vertrag Verträge Vertrages unverträglich Vertragsstrafe Kündigung Kündigungen gekündigt der und aus Haftung"


def test_the_opensearch_analyzer_reads_these_words_as_the_highlight_does() -> None:
    """The index's ki_german analyzer, defined inline from index_settings, on the live node."""
    import httpx

    from ki_core.config import OpenSearchSettings
    from ki_core.search.highlight import words
    from ki_core.search.opensearch import TEXT_ANALYZER, index_settings
    from tests.conftest import service_unavailable
    from tests.ki_core.search.backends import OPENSEARCH_URL

    if not OPENSEARCH_URL:
        service_unavailable("opensearch", "KI_TEST_OPENSEARCH_URL is not set")
    analysis = index_settings(OpenSearchSettings(hosts=[OPENSEARCH_URL]))["analysis"]
    filters = [analysis["filter"].get(name, name) for name in analysis["analyzer"][TEXT_ANALYZER]["filter"]]
    body = {"tokenizer": analysis["tokenizer"][TEXT_ANALYZER], "filter": filters, "text": AGREEMENT_WORDS}
    response = httpx.post(f"{OPENSEARCH_URL}/_analyze", json=body, timeout=30)
    response.raise_for_status()

    assert [t["token"] for t in response.json()["tokens"]] == [w.token for w in words(AGREEMENT_WORDS) if w.token]
