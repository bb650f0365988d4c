"""Ranking steps between the index and the caller: RRF, status boost, document collapse, rerank.

Pure functions over `Candidate`s, no I/O: the retrieval service feeds them leg
hits and SQL facts, the tests feed them numbers. Orders are total (ties break
on chunk id), so a page is the same every time the index is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ki_core.search.types import Leg, LegHit

# Leading collapsed hits sent to the reranker in one call (spec: "the top 20").
RERANK_PREFIX = 20


@dataclass
class Candidate:
    """One chunk on its way through the query path."""

    chunk_id: int
    document_id: str
    version_id: str
    project_id: str
    version_status: str
    chunk_kind: str
    identifiers: tuple[str, ...] = ()
    # leg -> (rank from 0, the leg's own score)
    legs: dict[str, tuple[int, float]] = field(default_factory=dict)
    fused: float = 0.0
    boost: float = 1.0
    score: float = 0.0
    rerank_score: float | None = None
    matched_identifiers: tuple[str, ...] = ()
    # Set by re-verification from SQL: the collapse tiebreaker.
    is_latest_final: bool = False

    @classmethod
    def from_leg_hit(cls, hit: LegHit) -> Candidate:
        return cls(
            chunk_id=hit.chunk_id,
            document_id=hit.document_id,
            version_id=hit.document_version_id,
            project_id=hit.project_id,
            version_status=hit.version_status,
            chunk_kind=hit.chunk_kind,
            identifiers=hit.identifiers,
        )


def fused_order(candidate: Candidate) -> tuple[float, int]:
    return (-candidate.score, candidate.chunk_id)


def rrf(legs: Mapping[Leg | str, Sequence[LegHit]], weights: Mapping[str, float], k: int) -> list[Candidate]:
    """Reciprocal rank fusion by chunk id: score += weight_leg / (k + rank), rank from 0 per leg.

    A leg without a weight counts 0. Returns the candidates best first; `score` starts as `fused`.
    """
    if k < 1:
        raise ValueError(f"retrieval.fusion_rrf_k must be at least 1 (got {k}): rank 0 would divide by zero")
    candidates: dict[int, Candidate] = {}
    for leg, hits in legs.items():
        name = str(leg)
        weight = weights.get(name, 0.0)
        for rank, hit in enumerate(hits):
            candidate = candidates.get(hit.chunk_id)
            if candidate is None:
                candidate = candidates[hit.chunk_id] = Candidate.from_leg_hit(hit)
            candidate.legs[name] = (rank, hit.score)
            candidate.fused += weight / (k + rank)
    for candidate in candidates.values():
        candidate.score = candidate.fused
    return sorted(candidates.values(), key=fused_order)


def matched_identifiers(identifiers: Iterable[str], query: str) -> tuple[str, ...]:
    """The indexed identifiers whose casefolded text occurs in the casefolded query (reported, not scored)."""
    folded = query.casefold()
    return tuple(i for i in identifiers if i.strip() and i.casefold() in folded)


def mark_identifier_matches(candidates: Iterable[Candidate], query: str) -> None:
    """Only candidates the identifier leg returned report matched identifiers."""
    for candidate in candidates:
        if str(Leg.IDENTIFIER) in candidate.legs:
            candidate.matched_identifiers = matched_identifiers(candidate.identifiers, query)


def apply_boost(candidates: list[Candidate], boosts: Mapping[str, float]) -> list[Candidate]:
    """score = fused * boost[version_status] (an unlisted status: 1.0), re-sorted best first."""
    for candidate in candidates:
        candidate.boost = boosts.get(candidate.version_status, 1.0)
        candidate.score = candidate.fused * candidate.boost
    return sorted(candidates, key=fused_order)


def prefix_covering(candidates: Sequence[Candidate], documents: int, start: int = 0) -> int:
    """End of the shortest prefix (at least `start` long) of best-first candidates naming `documents`
    distinct documents, extended over candidates tied with its last score.

    Collapsing such a prefix gives exactly the head of the collapse of the whole list: every
    candidate left out scores lower than all that were kept, and ties stay together, so no
    document's winner, and no document's place, depends on what was left out.
    """
    seen = {c.document_id for c in candidates[:start]}
    end = start
    while end < len(candidates) and len(seen) < documents:
        seen.add(candidates[end].document_id)
        end += 1
    while 0 < end < len(candidates) and candidates[end].score == candidates[end - 1].score:
        end += 1
    return end


def _collapse_order(candidate: Candidate) -> tuple[float, bool, int]:
    return (-candidate.score, not candidate.is_latest_final, candidate.chunk_id)


def collapse(candidates: Iterable[Candidate], *, per_document: bool = True, max_chunks: int = 3) -> list[Candidate]:
    """One hit per document (best score, then the latest final version), or up to max_chunks per document.

    The result is best first; dropped versions stay reachable through get_document and traversal.
    """
    keep = 1 if per_document else max_chunks
    taken: dict[str, int] = {}
    result: list[Candidate] = []
    for candidate in sorted(candidates, key=_collapse_order):
        if taken.get(candidate.document_id, 0) < keep:
            taken[candidate.document_id] = taken.get(candidate.document_id, 0) + 1
            result.append(candidate)
    return result


def rerank_prefix(
    ordered: Sequence[Candidate],
    scores: Mapping[str, float],
    key: Callable[[Candidate], str],
    size: int = RERANK_PREFIX,
) -> list[Candidate]:
    """The model's scores replace the fused ones and order the first `size` hits; nothing is dropped.

    Candidates the model did not score follow the scored ones in fused order,
    then everything past the prefix, also in fused order.
    """
    prefix = list(ordered[:size])
    scored = [c for c in prefix if key(c) in scores]
    for candidate in scored:
        candidate.rerank_score = float(scores[key(candidate)])
        candidate.score = candidate.rerank_score
    scored.sort(key=lambda c: -c.score)  # stable: equal model scores keep the fused order
    unscored = [c for c in prefix if key(c) not in scores]
    return [*scored, *unscored, *ordered[size:]]
