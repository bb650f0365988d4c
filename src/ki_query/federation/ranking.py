"""Ranking steps of the federation (spec/federation.md): rank, fusion, corpus quota, named corpus first.

Hits are the plain dicts every corpus retriever returns (text, score, optional
rank_score, metadata, retrieval_kinds, corpus_id); these functions never mutate
a hit they were given, they copy the ones they change.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

Hit = dict[str, Any]

# Length of the text prefix in the fallback fusion key: long enough to tell two chunks of one
# section apart, short enough that trailing whitespace differences do not split a chunk.
KEY_TEXT_CHARS = 160


def hit_rank(hit: Hit) -> float:
    """float(rank_score if present else score); anything unreadable counts as 0.0."""
    value = hit.get("rank_score")
    if value is None:
        value = hit.get("score")
    try:
        rank = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return rank if math.isfinite(rank) else 0.0


def hit_corpus(hit: Hit) -> str | None:
    return hit.get("corpus_id") or (hit.get("metadata") or {}).get("corpus_id")


def _address_field(hit: Hit, name: str) -> Any:
    meta = hit.get("metadata") or {}
    value = meta.get(name)
    return value if value is not None else hit.get(name)


def fusion_key(hit: Hit) -> tuple:
    """(corpus, text_hash), or (corpus, container, section, chunk index, first 160 characters)."""
    text_hash = (hit.get("metadata") or {}).get("text_hash")
    if text_hash:
        return (hit_corpus(hit), text_hash)
    return (
        hit_corpus(hit),
        _address_field(hit, "container_id"),
        _address_field(hit, "section_id"),
        _address_field(hit, "chunk_index_in_section"),
        str(hit.get("text") or "")[:KEY_TEXT_CHARS],
    )


def union_kinds(first: Iterable[str], second: Iterable[str]) -> list[str]:
    kinds = list(dict.fromkeys(first))
    kinds += [kind for kind in second if kind not in kinds]
    return kinds


def fuse(hits: Iterable[Hit]) -> list[Hit]:
    """Merge hits with the same key (higher rank wins, kinds united); stable sort by rank."""
    merged: dict[tuple, Hit] = {}
    for hit in hits:
        key = fusion_key(hit)
        held = merged.get(key)
        if held is None:
            merged[key] = hit
            continue
        winner, loser = (hit, held) if hit_rank(hit) > hit_rank(held) else (held, hit)
        kinds = union_kinds(winner.get("retrieval_kinds") or (), loser.get("retrieval_kinds") or ())
        merged[key] = {**winner, "retrieval_kinds": kinds}
    return sort_by_rank(merged.values())


def sort_by_rank(hits: Iterable[Hit]) -> list[Hit]:
    """Descending rank; Python's sort is stable, so ties keep their order."""
    return sorted(hits, key=hit_rank, reverse=True)


def quota_cut(hits: Sequence[Hit], limit: int | None, *, min_per_corpus: int = 2, min_ratio: float = 0.25) -> list[Hit]:
    """Cut to `limit`, reserving up to min_per_corpus hits per comparable corpus first.

    The reservation rescues a corpus whose best hit is comparable (>= min_ratio x the best
    overall) but outnumbered; it takes whole rounds within half the list, so the corpus that
    would miss out of a partial round is never the weak one this protects.
    """
    ordered = sort_by_rank(hits)
    if limit is None or limit <= 0:
        return ordered
    if min_per_corpus <= 0 or len(ordered) <= limit:
        return ordered[:limit]
    groups: dict[str | None, list[int]] = {}
    for position, hit in enumerate(ordered):
        groups.setdefault(hit_corpus(hit), []).append(position)
    best = hit_rank(ordered[0])
    qualifying = [c for c, positions in groups.items() if hit_rank(ordered[positions[0]]) >= min_ratio * best]
    if len(groups) == 1 or len(qualifying) <= 1:
        return ordered[:limit]
    reserved = reserved_positions([groups[c] for c in qualifying], budget=max(1, limit // 2), rounds=min_per_corpus)
    rest = [p for p in range(len(ordered)) if p not in reserved]
    chosen = reserved | set(rest[: limit - len(reserved)])
    return [ordered[p] for p in sorted(chosen)][:limit]


def reserved_positions(groups: Sequence[Sequence[int]], *, budget: int, rounds: int) -> set[int]:
    """Round i takes the i-th best of every group that has one; never a partial round."""
    reserved: set[int] = set()
    for i in range(rounds):
        round_ = [positions[i] for positions in groups if len(positions) > i]
        if not round_ or len(reserved) + len(round_) > budget:
            break
        reserved.update(round_)
    return reserved


def named_corpus_first(hits: Sequence[Hit], named: Iterable[str], queried: Iterable[str]) -> list[Hit]:
    """Move the best hit of a named corpus to the front when the question names some, not all."""
    hits = list(hits)
    queried_set = set(queried)
    named_set = set(named) & queried_set
    if len(hits) < 2 or not named_set or named_set == queried_set:
        return hits
    if hit_corpus(hits[0]) in named_set:
        return hits
    position = next((i for i, hit in enumerate(hits) if hit_corpus(hit) in named_set), None)
    if position is None:
        return hits
    promoted = {**hits[position], "rank_score": max(hit_rank(hit) for hit in hits)}
    return [promoted, *hits[:position], *hits[position + 1 :]]
