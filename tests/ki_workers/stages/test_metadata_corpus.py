"""The rule-based extractor on the labelled firm-documents corpus, scored as bench/metadata.py scores it.

An honest threshold over 30 documents (tests/fixtures/firm-documents/README.md
says what each label means); a rule change that costs more than a few of them
fails here, and `bench/metadata.py --misses` names the documents.
"""

from __future__ import annotations

import pytest

from bench.metadata import score_corpus

# Share of the corpus each field must get right.
THRESHOLDS = {"title": 0.90, "doc_date": 0.90, "language": 0.95}


@pytest.fixture(scope="module")
def scores():
    return score_corpus()


@pytest.mark.parametrize("field", sorted(THRESHOLDS))
def test_the_corpus_is_mostly_right(scores, field: str) -> None:
    score = scores[field]

    assert score.share >= THRESHOLDS[field], [(m.file, m.expected, m.got) for m in score.misses]


def test_the_corpus_has_at_least_twenty_documents(scores) -> None:
    assert scores["title"].total >= 20
