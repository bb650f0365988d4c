"""What the offline reranker sees of a candidate, on both query paths (firm search and statute corpora).

Every feature is relative to the candidate's own list (a rank, a ratio to the list's best
score, a gap to its best cosine), so one model serves queries of any length and indexes of any
size. A feature a path does not have (the law prior in a firm's index, citations between firm
documents) is 0 for every candidate of the list: a linear model's order ignores it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

LEGS = ("lexical", "semantic", "identifier")
# The RRF constant that turns ranks into features (60/(60+rank), 1 at the top); fixed, not a
# setting: the model was trained on these values.
RANK_K = 60.0
POSITION_K = 10.0
# A candidate the semantic leg did not return is taken to lie this far below the list's worst cosine.
MISSING_COSINE_MARGIN = 0.02

FEATURE_NAMES = (
    "rank_lexical",
    "rank_semantic",
    "rank_identifier",
    "lexical_ratio",
    "cosine_gap",
    "both_legs",
    "group_lexical",
    "group_semantic",
    "law_probability",
    "law_is_likeliest",
    "inactive",
    "cited_by_top",
    "fused_position",
    "top_lexical",
    "top_semantic",
    "top_group_lexical",
    "top_group_semantic",
)


@dataclass(slots=True)
class RerankInput:
    """One candidate as the reranker reads it.

    legs: leg -> (rank from 0, the leg's own score: BM25 for lexical, cosine for semantic).
    group_ranks: leg -> rank from 0 of the candidate's section (statutes) or document (firm) in that leg.
    cited_by: sum over the best hits citing the candidate's section of 1 / (1 + their position).
    """

    position: int
    legs: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    group_ranks: Mapping[str, int] = field(default_factory=dict)
    law_probability: float = 0.0
    inactive: bool = False
    cited_by: float = 0.0


def _rank_feature(rank: int | None) -> float:
    return 0.0 if rank is None else RANK_K / (RANK_K + rank)


def _top_feature(rank: int | None) -> float:
    """1 / (1 + rank): tells the first few places apart, where 60 / (60 + rank) is nearly flat."""
    return 0.0 if rank is None else 1.0 / (1.0 + rank)


def feature_matrix(candidates: Sequence[RerankInput]) -> np.ndarray:
    """(candidates, FEATURE_NAMES) float64: the model's input for one query's list."""
    matrix = np.zeros((len(candidates), len(FEATURE_NAMES)), dtype=np.float64)
    if not candidates:
        return matrix
    lexical = [c.legs["lexical"][1] for c in candidates if "lexical" in c.legs]
    cosines = [c.legs["semantic"][1] for c in candidates if "semantic" in c.legs]
    best_lexical = max(lexical, default=0.0)
    best_cosine = max(cosines, default=0.0)
    floor_cosine = min(cosines, default=0.0) - MISSING_COSINE_MARGIN
    best_law = max(c.law_probability for c in candidates)
    for row, c in enumerate(candidates):
        ranks = [_rank_feature(c.legs[leg][0] if leg in c.legs else None) for leg in LEGS]
        lexical_score = c.legs["lexical"][1] if "lexical" in c.legs else 0.0
        cosine = c.legs["semantic"][1] if "semantic" in c.legs else floor_cosine
        matrix[row] = (
            *ranks,
            lexical_score / best_lexical if best_lexical > 0 else 0.0,
            cosine - best_cosine if cosines else 0.0,
            min(ranks[0], ranks[1]),
            _rank_feature(c.group_ranks.get("lexical")),
            _rank_feature(c.group_ranks.get("semantic")),
            c.law_probability,
            1.0 if best_law > 0 and c.law_probability >= best_law else 0.0,
            1.0 if c.inactive else 0.0,
            math.log1p(c.cited_by),
            POSITION_K / (POSITION_K + c.position),
            _top_feature(c.legs["lexical"][0] if "lexical" in c.legs else None),
            _top_feature(c.legs["semantic"][0] if "semantic" in c.legs else None),
            _top_feature(c.group_ranks.get("lexical")),
            _top_feature(c.group_ranks.get("semantic")),
        )
    return matrix
