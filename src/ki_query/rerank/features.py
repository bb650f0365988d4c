"""What the offline reranker sees of a candidate, on both query paths (firm search and statute corpora).

Every feature is relative to the candidate's own list (a rank, a ratio to the list's best
score, a gap to its best cosine), so one model serves queries of any length and indexes of any
size; the query itself enters only as a factor of some of them (its length, below). A feature a
path does not have (the law prior in a firm's index, citations between firm documents) is 0 for
every candidate of the list: a linear model's order ignores it.
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

CANDIDATE_FEATURES = (
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

# How far to trust each leg depends on the query: a few words (a heading, a term) are matched
# best by meaning, a quoted sentence of statute text by its words. A linear score cannot condition
# on the query unless the query enters as a factor, so these candidate features appear a second and
# a third time, multiplied by the query's length (log of its words) and by "short" (at most
# SHORT_QUERY_WORDS words; the training headings have 2-16 words, median 4, the quoted sentences a
# median of 39). A query-level feature on its own would shift every candidate alike and change no order.
SHORT_QUERY_WORDS = 8
QUERY_CROSSED = (
    "rank_lexical",
    "rank_semantic",
    "top_lexical",
    "top_semantic",
    "group_lexical",
    "group_semantic",
    "lexical_ratio",
    "cosine_gap",
    "both_legs",
    "cited_by_top",
    "law_probability",
)
QUERY_FACTORS = ("query_length", "short_query")
FEATURE_NAMES = CANDIDATE_FEATURES + tuple(f"{name}*{factor}" for factor in QUERY_FACTORS for name in QUERY_CROSSED)
_CROSSED_COLUMNS = [CANDIDATE_FEATURES.index(name) for name in QUERY_CROSSED]


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


def query_factors(query: str) -> np.ndarray:
    """QUERY_FACTORS of one query: (log(1 + words), 1.0 if it has at most SHORT_QUERY_WORDS words)."""
    words = len(query.split())
    return np.array([math.log1p(words), 1.0 if words <= SHORT_QUERY_WORDS else 0.0])


def feature_matrix(candidates: Sequence[RerankInput], query: str) -> np.ndarray:
    """(candidates, FEATURE_NAMES) float64: the model's input for one query's list."""
    matrix = candidate_matrix(candidates)
    crossed = matrix[:, _CROSSED_COLUMNS]
    return np.hstack([matrix, *(crossed * factor for factor in query_factors(query))])


def candidate_matrix(candidates: Sequence[RerankInput]) -> np.ndarray:
    """(candidates, CANDIDATE_FEATURES): what each candidate shows in its list, before the query's factors."""
    matrix = np.zeros((len(candidates), len(CANDIDATE_FEATURES)), dtype=np.float64)
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
