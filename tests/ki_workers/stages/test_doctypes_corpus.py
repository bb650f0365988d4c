"""The type decision on the demo (every file right) and on the labelled set that is not the demo.

tests/fixtures/doctypes/README.md says where the 60 labelled files come from;
`bench/doctypes.py --misses` names the documents a rule change costs.
"""

from __future__ import annotations

import pytest

from bench.doctypes import accuracy, demo_cases, labelled_cases, score


@pytest.mark.parametrize("declared", [True, False], ids=["declared-types-applied", "rules-alone"])
def test_every_demo_file_gets_its_type(declared: bool) -> None:
    scores = score(demo_cases(), declared=declared)

    assert accuracy(scores) == 1.0, {node: s.misses for node, s in scores.items() if s.misses}


def test_the_demo_decisions_are_typed_urteil_and_beschluss() -> None:
    kinds = {case.expected for case in demo_cases() if "rechtsprechung" in case.name}

    assert kinds == {"doc_type:decision.judgment", "doc_type:decision.order"}


def test_the_labelled_set_is_at_least_ninety_percent_right() -> None:
    scores = score(labelled_cases())

    assert sum(s.total for s in scores.values()) >= 50
    assert accuracy(scores) >= 0.90, {node: s.misses for node, s in scores.items() if s.misses}


def test_every_labelled_type_is_mostly_right() -> None:
    """No type is carried by the others: each is right at least two times in three."""
    for node, entry in score(labelled_cases()).items():
        assert entry.correct / entry.total >= 2 / 3, (node, entry.misses)
