"""The offline reranker's model: what it learns from pairs, how it is stored, and that it only reorders."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ki_query.rerank.features import (
    CANDIDATE_FEATURES,
    FEATURE_NAMES,
    QUERY_CROSSED,
    RerankInput,
    candidate_matrix,
    feature_matrix,
)
from ki_query.rerank.model import LinearRanker, RerankModelError, reordered


def _lists(rng: np.random.Generator, informative: int, queries: int = 40) -> list[tuple[np.ndarray, np.ndarray]]:
    """Queries whose relevant candidates are high on one feature and random on the rest."""
    lists = []
    for _ in range(queries):
        matrix = rng.normal(size=(30, len(FEATURE_NAMES)))
        grades = np.zeros(30, dtype=int)
        best = np.argsort(-matrix[:, informative])[:3]
        grades[best] = [2, 1, 1]
        lists.append((matrix, grades))
    return lists


def test_fit_learns_the_feature_that_orders_the_relevant_first():
    rng = np.random.default_rng(19)
    model = LinearRanker.fit(_lists(rng, informative=4))
    assert int(np.argmax(model.weights)) == 4
    assert model.weights[4] > 3 * np.abs(np.delete(model.weights, 4)).max()


def test_a_heavier_query_weight_decides_between_conflicting_queries():
    """Queries of two kinds want different features first; the kind weighing more wins."""
    rng = np.random.default_rng(7)
    lists = _lists(rng, informative=2, queries=20) + _lists(rng, informative=5, queries=20)
    for heavy, light in ((2, 5), (5, 2)):
        weights = [4.0 if n < 20 and heavy == 2 or n >= 20 and heavy == 5 else 1.0 for n in range(40)]
        model = LinearRanker.fit(lists, query_weights=weights)
        assert model.weights[heavy] > model.weights[light] > 0


def test_fit_refuses_lists_without_a_relevance_difference():
    flat = [(np.ones((5, len(FEATURE_NAMES))), np.zeros(5, dtype=int))]
    with pytest.raises(RerankModelError, match="nothing to learn"):
        LinearRanker.fit(flat)


def test_a_saved_model_loads_with_the_same_scores(tmp_path):
    rng = np.random.default_rng(3)
    model = LinearRanker.fit(_lists(rng, informative=1, queries=10), prefix=30, trained_on="synthetic")
    path = tmp_path / "model.json"
    model.save(path)
    loaded = LinearRanker.load(path)
    matrix = rng.normal(size=(7, len(FEATURE_NAMES)))
    assert np.allclose(loaded.scores(matrix), model.scores(matrix), atol=1e-6)
    assert (loaded.prefix, loaded.trained_on) == (30, "synthetic")


def test_the_shipped_model_reads_the_features_of_this_version():
    model = LinearRanker.load()
    assert model.features == FEATURE_NAMES
    assert "statutes-extra" in model.trained_on
    for never in ("BGB", "ZPO", "SGB V", "GG ", "KSchG", "HGB"):
        assert never not in model.trained_on


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format=99), "format 99"),
        (lambda d: d.update(features=d["features"][:-1]), "trained on features"),
        (lambda d: d.update(scale=[0.0] * len(FEATURE_NAMES)), "scale > 0"),
    ],
)
def test_a_model_file_that_does_not_fit_is_refused_by_name(tmp_path, change, message):
    data = LinearRanker.load().as_dict()
    change(data)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RerankModelError, match=message) as error:
        LinearRanker.load(path)
    assert str(path) in str(error.value)


def test_an_unreadable_model_file_names_itself(tmp_path):
    path = tmp_path / "absent.json"
    with pytest.raises(RerankModelError, match="absent.json"):
        LinearRanker.load(path)


def test_reordered_sorts_only_the_prefix_and_drops_nothing():
    items = list("abcdefgh")
    scores = np.array([0.1, 0.9, 0.5, 0.5, 2.0])
    result = reordered(items, scores, prefix=5)
    assert result == ["e", "b", "c", "d", "a", "f", "g", "h"]  # c before d: equal scores keep their order
    assert sorted(result) == items


def test_features_are_relative_to_the_list():
    """Doubling every BM25 score or shifting every cosine changes no feature: one model fits any index."""
    def inputs(scale: float, shift: float) -> list[RerankInput]:
        return [
            RerankInput(position=0, legs={"lexical": (0, 12.0 * scale), "semantic": (1, 0.80 + shift)}),
            RerankInput(position=1, legs={"lexical": (1, 6.0 * scale), "semantic": (0, 0.85 + shift)}),
            RerankInput(position=2, legs={"lexical": (2, 3.0 * scale)}),
        ]
    base = feature_matrix(inputs(1.0, 0.0), "Rücktritt vom Kaufvertrag")
    assert np.allclose(base, feature_matrix(inputs(2.0, -0.1), "Rücktritt vom Kaufvertrag"))
    column = {name: i for i, name in enumerate(FEATURE_NAMES)}
    assert base[:, column["lexical_ratio"]].tolist() == [1.0, 0.5, 0.25]
    # A candidate the semantic leg missed lies below the list's worst cosine.
    assert base[2, column["cosine_gap"]] < base[0, column["cosine_gap"]] < base[1, column["cosine_gap"]] == 0.0


SHORT = "Haftung des Grundstücksbesitzers"
LONG = ("Der Besitzer eines Grundstücks ist verpflichtet, den Schaden zu ersetzen, der durch die Ablösung "
        "von Teilen eines Gebäudes verursacht wird, wenn die Ablösung die Folge fehlerhafter Errichtung ist.")
ONE_LEG_EACH = [
    RerankInput(position=0, legs={"lexical": (0, 11.0)}, group_ranks={"lexical": 0}),
    RerankInput(position=1, legs={"semantic": (0, 0.88)}, group_ranks={"semantic": 0}),
    RerankInput(position=2, legs={"lexical": (3, 7.0), "semantic": (4, 0.85)}, group_ranks={"lexical": 2, "semantic": 3}),
]


def test_the_query_enters_only_as_a_factor_of_candidate_features():
    """The candidate columns do not depend on the query; each crossed column is a candidate column
    times log(1 + words), then times 1 for a query of at most 8 words and 0 for a longer one."""
    short, long = feature_matrix(ONE_LEG_EACH, SHORT), feature_matrix(ONE_LEG_EACH, LONG)
    n = len(CANDIDATE_FEATURES)
    assert np.array_equal(short[:, :n], candidate_matrix(ONE_LEG_EACH))
    assert np.array_equal(short[:, :n], long[:, :n])
    crossed = candidate_matrix(ONE_LEG_EACH)[:, [CANDIDATE_FEATURES.index(name) for name in QUERY_CROSSED]]
    k = len(QUERY_CROSSED)
    assert np.allclose(short[:, n : n + k], crossed * np.log1p(3))
    assert np.allclose(long[:, n : n + k], crossed * np.log1p(len(LONG.split())))
    assert np.array_equal(short[:, n + k :], crossed)
    assert not long[:, n + k :].any()
    assert feature_matrix([], SHORT).shape == (0, len(FEATURE_NAMES))


def test_the_shipped_model_trusts_meaning_more_on_a_short_query():
    """A heading-like query is matched by meaning more often than by its words (its words are rarely
    in a § that has no indexed heading); a quoted sentence of statute text by its words. The shipped
    model moves the semantic leg's first hit up against the lexical leg's first hit when the query is short."""
    model = LinearRanker.load()
    short, long = model.scores(feature_matrix(ONE_LEG_EACH, SHORT)), model.scores(feature_matrix(ONE_LEG_EACH, LONG))
    assert short[1] - short[0] > long[1] - long[0] + 1.0


def test_the_offline_ranker_is_the_default_and_the_gateway_an_option():
    """amendments.md 3: the embedded default reranks offline; production names the gateway."""
    from ki_core.config import RetrievalSettings
    from ki_query.rerank.model import offline_ranker

    defaults = RetrievalSettings()
    assert (defaults.rerank_enabled, defaults.rerank_provider, defaults.rerank_model_path) == (True, "offline", None)
    assert isinstance(offline_ranker(defaults), LinearRanker)
    assert offline_ranker(RetrievalSettings(rerank_provider="gateway")) is None
    assert offline_ranker(RetrievalSettings(rerank_enabled=False)) is None
