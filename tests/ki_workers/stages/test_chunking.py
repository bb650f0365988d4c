"""Body chunking, ids and the profile/context strings, as the spec describes them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ki_workers.stages.chunking import (
    chunk_id,
    context_header,
    embedding_input,
    profile_text,
    split_body,
)

PARAGRAPH = (
    "Der Mieter kann das Mietverhältnis spätestens am dritten Werktag eines Kalendermonats "
    "zum Ablauf des übernächsten Monats kündigen."
)


def test_short_text_is_one_chunk() -> None:
    spans = split_body(PARAGRAPH, 1200, 120)
    assert [s.text for s in spans] == [PARAGRAPH]


def test_windows_prefer_newline_boundaries() -> None:
    text = "\n".join([PARAGRAPH] * 20)
    spans = split_body(text, 500, 50)
    assert len(spans) > 1
    for span in spans[:-1]:
        assert text[span.end - 1] == "\n"
        assert len(text[span.start : span.end]) <= 500


def test_consecutive_windows_overlap() -> None:
    text = " ".join(["Wort"] * 1000)
    spans = split_body(text, 300, 60)
    for first, second in zip(spans, spans[1:], strict=False):
        assert second.start < first.end
        assert first.end - second.start <= 60


def test_no_word_is_split_without_newlines() -> None:
    text = " ".join(f"wort{i}" for i in range(800))
    for span in split_body(text, 250, 40):
        assert text[span.start : span.end].strip() == span.text
        assert span.start == 0 or text[span.start - 1].isspace()


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("ab c\n.ä"), min_size=0, max_size=3000),
    window=st.integers(min_value=20, max_value=400),
    overlap_ratio=st.floats(min_value=0, max_value=0.5),
)
def test_every_non_space_character_is_covered(text: str, window: int, overlap_ratio: float) -> None:
    overlap = int(window * overlap_ratio)
    spans = split_body(text, window, overlap)
    covered = set()
    for span in spans:
        assert span.end - span.start <= window
        covered.update(range(span.start, span.end))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())


def test_chunk_ids_are_stable_positive_and_distinct() -> None:
    assert chunk_id("v1", 0) == chunk_id("v1", 0)
    ids = {chunk_id("v1", n) for n in range(-1, 2000)}
    assert len(ids) == 2001
    assert all(0 <= i < 2**63 for i in ids)


def test_profile_has_labeled_lines_then_the_first_400_characters() -> None:
    body = "x" * 1000
    text = profile_text([("Titel", "Mietvertrag"), ("Aktenzeichen", None), ("Datum", "2020-03-01")], body)
    lines = text.split("\n")
    assert lines[:2] == ["Titel: Mietvertrag", "Datum: 2020-03-01"]
    assert lines[2] == "x" * 400


def test_context_header_is_prefixed_only_when_enabled() -> None:
    header = context_header("Mietvertrag Müller", "Mietvertrag", "Müller ./. Schmidt")
    assert header == "Mietvertrag Müller | Mietvertrag | Müller ./. Schmidt"
    assert embedding_input("Absatz", header, True) == f"{header}\nAbsatz"
    assert embedding_input("Absatz", header, False) == "Absatz"
