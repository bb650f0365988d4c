"""The offline reranker's model: a standardized linear score, learned from pairs, stored as JSON.

Linear because the features are already ranks and ratios of one list (features.py), because
it scores 50 candidates in microseconds on any CPU, and because its weights can be read: a
firm's IT team can see what it prefers. Trained pairwise (a logistic loss on score differences
of a more and a less relevant candidate of the same query, L2-regularized), so only the order
within a query is learned, never an absolute level.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ki_query.rerank.features import FEATURE_NAMES

MODEL_FILE = "offline-ranker.json"
FORMAT = 1


class RerankModelError(ValueError):
    """A model file that cannot be read or does not match the features of this version."""


@dataclass(frozen=True)
class LinearRanker:
    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    # How many leading candidates the model reorders; the rest keep their order below them.
    prefix: int = 50
    trained_on: str = ""

    def scores(self, matrix: np.ndarray) -> np.ndarray:
        return ((matrix - self.mean) / self.scale) @ self.weights

    # ------------------------------------------------------------ training

    @classmethod
    def fit(
        cls,
        lists: Sequence[tuple[np.ndarray, np.ndarray]],
        *,
        l2: float = 1e-3,
        steps: int = 600,
        learning_rate: float = 0.05,
        prefix: int = 50,
        trained_on: str = "",
        query_weights: Sequence[float] | None = None,
    ) -> LinearRanker:
        """Weights from (feature matrix, relevance grades) per query: every pair of candidates with
        different grades, weighted by the grade difference, each query weighing the same, or as
        `query_weights` (one per list) says.

        (LambdaRank's weighting of a pair by the nDCG its swap would change scored lower on the
        training queries, cross-validated: 0.518 against 0.528.)"""
        stacked = np.vstack([m for m, _ in lists])
        mean = stacked.mean(axis=0)
        scale = stacked.std(axis=0)
        scale[scale < 1e-9] = 1.0
        diffs, pair_weights = [], []
        for (matrix, grades), weight in zip(lists, query_weights or [1.0] * len(lists), strict=True):
            z = (matrix - mean) / scale
            better, worse = np.nonzero(grades[:, None] > grades[None, :])
            if not len(better):
                continue
            diffs.append(z[better] - z[worse])
            gap = (grades[better] - grades[worse]).astype(np.float64)
            pair_weights.append(weight * gap / gap.sum())
        if not diffs:
            raise RerankModelError("no query has candidates of different relevance: nothing to learn")
        x = np.vstack(diffs)
        w_pair = np.concatenate(pair_weights)
        w_pair /= sum(w.sum() for w in pair_weights)
        weights = np.zeros(x.shape[1])
        first, second = np.zeros_like(weights), np.zeros_like(weights)
        for step in range(1, steps + 1):  # Adam on the pairwise logistic loss
            margin = x @ weights
            gradient = -(x * (w_pair / (1.0 + np.exp(margin)))[:, None]).sum(axis=0) + l2 * weights
            first = 0.9 * first + 0.1 * gradient
            second = 0.999 * second + 0.001 * gradient**2
            weights -= learning_rate * (first / (1 - 0.9**step)) / (np.sqrt(second / (1 - 0.999**step)) + 1e-8)
        return cls(FEATURE_NAMES, mean, scale, weights, prefix=prefix, trained_on=trained_on)

    # ------------------------------------------------------------- storage

    def as_dict(self) -> dict:
        return {
            "format": FORMAT,
            "features": list(self.features),
            "mean": self.mean.round(8).tolist(),
            "scale": self.scale.round(8).tolist(),
            "weights": self.weights.round(8).tolist(),
            "prefix": self.prefix,
            "trained_on": self.trained_on,
        }

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.as_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    @classmethod
    def from_dict(cls, data: dict, where: str) -> LinearRanker:
        if data.get("format") != FORMAT:
            raise RerankModelError(f"{where}: model format {data.get('format')!r}, this version reads {FORMAT}")
        if tuple(data.get("features", ())) != FEATURE_NAMES:
            raise RerankModelError(f"{where}: trained on features {data.get('features')}, this version has {list(FEATURE_NAMES)}")
        arrays = [np.asarray(data[key], dtype=np.float64) for key in ("mean", "scale", "weights")]
        if any(a.shape != (len(FEATURE_NAMES),) for a in arrays) or np.any(arrays[1] <= 0):
            raise RerankModelError(f"{where}: mean, scale and weights need {len(FEATURE_NAMES)} values, scale > 0")
        return cls(FEATURE_NAMES, *arrays, prefix=int(data.get("prefix", 50)), trained_on=str(data.get("trained_on", "")))

    @classmethod
    def load(cls, path: Path | None = None) -> LinearRanker:
        """The model at `path`, or the one shipped with the package."""
        try:
            if path is None:
                text = resources.files("ki_query.rerank").joinpath(MODEL_FILE).read_text(encoding="utf-8")
                where = f"ki_query/rerank/{MODEL_FILE}"
            else:
                text, where = Path(path).read_text(encoding="utf-8"), str(path)
            data = json.loads(text)
        except (OSError, json.JSONDecodeError) as exc:
            raise RerankModelError(f"{path or MODEL_FILE}: cannot read the reranker model: {exc}") from None
        return cls.from_dict(data, where)


def reordered(items: Sequence, scores: np.ndarray, prefix: int) -> list:
    """The first `prefix` items by descending model score (ties keep their order), then the rest unchanged."""
    head = list(items[:prefix])
    order = sorted(range(len(head)), key=lambda i: -float(scores[i]))
    return [head[i] for i in order] + list(items[prefix:])


def keep_scores_descending(result: Sequence, fused: Iterable[float], assign: Callable[[Any, float], None]) -> None:
    """Hand the prefix's fused scores, sorted, out again in the reranked order.

    The reranker changes the order, not the scale: scores stay comparable with the hits past the
    prefix (and, federated, with the other corpora's), and they still descend down the list."""
    for item, score in zip(result, sorted(fused, reverse=True), strict=False):
        assign(item, score)


@lru_cache(maxsize=4)
def _loaded(path: str | None) -> LinearRanker:
    return LinearRanker.load(Path(path) if path else None)


def offline_ranker(retrieval: Any) -> LinearRanker | None:
    """The offline ranker `retrieval` settings ask for (rerank_enabled, provider "offline"), else None.

    Read once per process and model file; a broken file is a RerankModelError naming it."""
    if not retrieval.rerank_enabled or retrieval.rerank_provider != "offline":
        return None
    return _loaded(retrieval.rerank_model_path)
