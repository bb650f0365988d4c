"""The offline reranker on the firm's search: the fused candidates' evidence as features.py reads it.

A firm's index has no law prior and no citations between its documents, so those features are
0 for the whole list (a linear order ignores them); a chunk's group is its document. A candidate
the identifier leg matched keeps its place ahead of the others: a pasted case number or file
reference is direct evidence the model was not trained on (its training queries name none),
as the statute corpora keep a named § in front of the ranking.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ki_query.fusion import Candidate, rerank_prefix
from ki_query.rerank.features import RerankInput, feature_matrix
from ki_query.rerank.model import LinearRanker, keep_scores_descending


# The offline ranker reorders the first 10 collapsed hits of a firm search, the gateway the spec's 20:
# a hit must be verified before it may be reordered, and verifying 21 hits instead of the 11 that a
# first page at limit 10 needs cost 4-8 ms (bench/query.py), thirty times the model itself. Fixed,
# not the page's size, so pages stay slices of one ranking.
OFFLINE_PREFIX = 10


def firm_inputs(prefix: Sequence[Candidate], cosine: Callable[[float], float]) -> list[RerankInput]:
    """One RerankInput per candidate; a document's rank in a leg counts documents by their best chunk."""
    best: dict[str, dict[str, int]] = {}
    for candidate in prefix:
        for leg, (rank, _) in candidate.legs.items():
            ranks = best.setdefault(leg, {})
            ranks[candidate.document_id] = min(rank, ranks.get(candidate.document_id, rank))
    group_ranks = {leg: {doc: n for n, (doc, _) in enumerate(sorted(ranks.items(), key=lambda kv: kv[1]))}
                   for leg, ranks in best.items()}  # fmt: skip
    inputs = []
    for position, candidate in enumerate(prefix):
        legs = {
            leg: (rank, cosine(score) if leg == "semantic" else score) for leg, (rank, score) in candidate.legs.items()
        }
        inputs.append(RerankInput(
            position=position,
            legs=legs,
            group_ranks={leg: ranks[candidate.document_id] for leg, ranks in group_ranks.items()
                         if candidate.document_id in ranks},
            inactive=candidate.boost < 1.0,
        ))  # fmt: skip
    return inputs


def offline_scores(
    query: str,
    prefix: Sequence[Candidate],
    model: LinearRanker,
    key: Callable[[Candidate], str],
    cosine: Callable[[float], float],
) -> dict[str, float]:
    """key(candidate) -> score for fusion.rerank_prefix; identifier matches score above every other."""
    if not prefix:
        return {}
    scores = model.scores(feature_matrix(firm_inputs(prefix, cosine), query))
    ceiling = float(scores.max()) + 1.0
    result = {}
    for position, (candidate, score) in enumerate(zip(prefix, scores, strict=True)):
        pinned = "identifier" in candidate.legs
        result[key(candidate)] = ceiling + len(prefix) - position if pinned else float(score)
    return result


def offline_reranked(
    query: str,
    ranked: Sequence[Candidate],
    model: LinearRanker,
    key: Callable[[Candidate], str],
    cosine: Callable[[float], float],
) -> list[Candidate]:
    """The first OFFLINE_PREFIX hits in the model's order; nothing dropped, nothing past the prefix moved.

    Each reordered hit keeps the model's score in `rerank_score` (explain shows it beside the fused
    score and the boost), and the prefix's boosted fused scores, sorted, are handed out again in the
    new order: `score` descends across every page and stays on the scale of the hits past the prefix.
    """
    prefix = list(ranked[:OFFLINE_PREFIX])
    fused = [c.score for c in prefix]
    result = rerank_prefix(ranked, offline_scores(query, prefix, model, key, cosine), key, size=OFFLINE_PREFIX)
    keep_scores_descending(result, fused, lambda candidate, score: setattr(candidate, "score", score))
    return result
