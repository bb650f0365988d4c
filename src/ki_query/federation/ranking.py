"""Ranking steps of the federation (spec/federation.md): the common scale, rank, fusion, corpus quota,
named corpus first, and what a level says about the question (found / weak / nothing relevant).

Hits are the plain dicts every corpus retriever returns (text, score, optional
rank_score, metadata, retrieval_kinds, corpus_id); these functions never mutate
a hit they were given, they copy the ones they change.

The common scale (spec/amendments.md 5, issue 14). A corpus reports the raw cosine of the
configured embedder, and raw cosines are no scale: e5-small puts every German legal text
between 0.78 and 0.98 (an off-topic question's best statute hit scores 0.78-0.83), USE
spreads them over 0-0.9, the hashing test embedder counts shared words. The federation
therefore ranks on one scale that is calibrated AND rank-based:

- calibrated: level = (cosine - null) / (1 - null), clipped to [0, 1], where `null` is the
  cosine an unrelated question's best hit reaches with that embedder (NULL_COSINES, measured).
  0 is "no closer than a question about something else", 1 an identical text; a lookup by
  address (and an anchor) is 1.0. A purely rank-based scale (RRF, Borda) cannot say "nothing
  relevant" at all: every corpus's first hit would score the same, on topic or not.
- rank-based within a corpus: a corpus keeps its own order, and its hits take its levels sorted
  best first (`on_common_scale`). The corpora's own hybrid order beats plain cosine (statutes,
  e5: nDCG@10 0.266 hybrid vs 0.203 semantic), so the federation must not re-sort a corpus by
  cosine; the levels decide only how the corpora interleave and what the question found.

On this scale federation.md's constants keep their literal values and their intent:
1.0 anchor/lookup (the top), 0.50 a Verweis (half-way between unrelated and identical, read
only from hits at least that strong: see search.py), min_ratio 0.25 (a corpus whose best hit
is below a quarter of the best has nothing to say), FOUND_LEVEL and WEAK_LEVEL for the verdict.
One intent needs more than its constant: a quarter of a modest best hit is still "nothing to
say", so the quota also asks a corpus to reach the found level itself (FOUND_LEVEL).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

log = logging.getLogger(__name__)

Hit = dict[str, Any]

# Length of the text prefix in the fallback fusion key: long enough to tell two chunks of one
# section apart, short enough that trailing whitespace differences do not split a chunk.
KEY_TEXT_CHARS = 160


def hit_rank(hit: Hit) -> float:
    """float(rank_score if present else score); anything unreadable counts as 0.0."""
    value = hit.get("rank_score")
    return finite(hit.get("score") if value is None else value)


def finite(value: object) -> float:
    """The value as a float; anything unreadable (None, text, NaN, inf) is 0.0."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


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


def quota_cut(
    hits: Sequence[Hit], limit: int | None, *, min_per_corpus: int = 2, min_ratio: float = 0.25, floor: float = 0.0
) -> list[Hit]:
    """Cut to `limit`, reserving up to min_per_corpus hits per comparable corpus first.

    The reservation rescues a corpus whose best hit is comparable (>= min_ratio x the best
    overall, and >= floor) but outnumbered; it takes whole rounds within half the list, so the
    corpus that would miss out of a partial round is never the weak one this protects.
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
    needed = max(min_ratio * best, floor)
    qualifying = [c for c, positions in groups.items() if hit_rank(ordered[positions[0]]) >= needed]
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


# ------------------------------------------------------------------ the common scale

LOOKUP_LEVEL = 1.0
# The verdict's thresholds on the scale, for the best hit of a question. Measured on a calibration
# set of 15 off-topic and 15 on-topic questions (not the committed verdict questions) over the
# 11,817 statute units: with e5 (null 0.79) off-topic best hits reach at most level 0.20 (cosine
# 0.831), on-topic ones at least 0.32 (0.857); with USE (null 0.20) at most 0.22 (0.379; a Grundsteuer
# question, which GG Art. 106 does govern, 0.31) and at least 0.29 (0.431). FOUND sits in both gaps.
# It is also the quota's floor (FederatedRetriever.quota_floor): min_ratio 0.25 is relative to the best
# hit, and an answerable question's best hit is a lookup (1.0) or a hit at level 0.3-0.9, so 0.25 x best
# alone let a corpus at level 0.08-0.2, which found nothing by its own verdict, take a reserved slot
# (measured: AGG § 2 at 0.23 for a question on health promotion, beside SGB V at 0.45).
FOUND_LEVEL = 0.25
# Half the found level: a best hit between the two is related, but nothing to answer from.
WEAK_LEVEL = 0.125
# Kinds whose hits are fetched by address: their level is the top of the scale, whatever their cosine.
LOOKUP_KINDS = frozenset({"section_lookup", "norm_anchor"})

FOUND = "found"
WEAK = "weak"
NOTHING_RELEVANT = "nothing relevant"
UNKNOWN = "unknown"
VerdictStatus = Literal["found", "weak", "nothing relevant", "unknown"]

# The cosine an off-topic question's best hit reaches, per embedder family (signature up to its first
# ":"; a gateway model is keyed "gateway:<model>"). Measured best hits of the 15 off-topic calibration
# questions over the statutes corpus: e5-small 0.781-0.831, USE 0.149-0.379, hashing 0.238-0.470 (it
# matches words, not meaning: its on-topic best hits start at 0.391, so its verdicts are rough).
NULL_COSINES = {"e5-small": 0.79, "use-multilingual": 0.20, "hashing": 0.30}
# An embedder nobody has measured (a gateway model): a typical value for models whose unrelated texts
# score near 0; logged once per process. Measure it with `ki eval --verdict` (docs/federation.md).
DEFAULT_NULL_COSINE = 0.25


@dataclass(frozen=True)
class Calibration:
    """How one embedder's cosines map onto the common scale: `null` goes to 0, an identical text to 1."""

    embedder: str
    null_cosine: float
    measured: bool = True

    def level(self, cosine: float) -> float:
        return min(LOOKUP_LEVEL, max(0.0, (cosine - self.null_cosine) / (1.0 - self.null_cosine)))

    def cosine_at(self, level: float) -> float:
        """The cosine that reaches `level` (the found cosine is the corpora's negative-check threshold)."""
        return self.null_cosine + level * (1.0 - self.null_cosine)

    def hit_level(self, hit: Hit) -> float:
        """A lookup by address is at the top; any other hit at the level of its cosine (rank_score)."""
        if LOOKUP_KINDS.intersection(hit.get("retrieval_kinds") or ()):
            return LOOKUP_LEVEL
        return self.level(finite(hit.get("rank_score")))

    def __call__(self, hits: Sequence[Hit]) -> list[Hit]:
        return on_common_scale(hits, self)


@cache
def calibration_for(signature: str) -> Calibration:
    """The calibration of an embedder signature (`e5-small:384`, `gateway:<model>:<dims>`)."""
    family, _, rest = signature.partition(":")
    model = f"{family}:{rest.rpartition(':')[0]}" if family == "gateway" else family
    for key in (model, family):
        if key in NULL_COSINES:
            return Calibration(signature, NULL_COSINES[key])
    log.warning(
        "federation: scores of embedder %s are not calibrated; its null cosine is taken as %.2f "
        "(measure it: ki eval --verdict, docs/federation.md)", signature, DEFAULT_NULL_COSINE,
    )  # fmt: skip
    return Calibration(signature, DEFAULT_NULL_COSINE, measured=False)


def on_common_scale(hits: Sequence[Hit], calibration: Calibration) -> list[Hit]:
    """One corpus's hits in the corpus's own order, rank_score = its levels sorted best first.

    The corpus decides the order (its hybrid ranking is better than cosine), the levels how
    strong its hits are against other corpora's; the raw cosine stays in metadata.cosine.
    """
    levels = sorted((calibration.hit_level(hit) for hit in hits), reverse=True)
    placed = []
    for hit, level in zip(hits, levels, strict=True):
        metadata = {**(hit.get("metadata") or {}), "cosine": hit.get("rank_score")}
        placed.append({**hit, "metadata": metadata, "rank_score": level})
    return placed


def weak_cosine(found_cosine: float, null_cosine: float) -> float:
    """The cosine of the weak level on the line from the null cosine (level 0) to the found cosine."""
    return null_cosine + (found_cosine - null_cosine) * WEAK_LEVEL / FOUND_LEVEL


def cosine_verdict(best_cosine: float | None, found_cosine: float, null_cosine: float) -> VerdictStatus:
    """What a corpus's best cosine says, with the corpus's found cosine (its negative-check threshold)."""
    if best_cosine is not None and best_cosine >= found_cosine:
        return FOUND
    if best_cosine is not None and best_cosine >= weak_cosine(found_cosine, null_cosine):
        return WEAK
    return NOTHING_RELEVANT


def weighed(hits: Sequence[Hit], weight: float) -> list[Hit]:
    """A corpus's hits with their levels times the corpus's weight (federation/corpus_prior.py); lookups
    by address keep theirs (they were asked for by name), and weight 1.0 changes nothing."""
    if weight == 1.0:
        return list(hits)
    return [
        hit if LOOKUP_KINDS.intersection(hit.get("retrieval_kinds") or ())
        else {**hit, "rank_score": hit_rank(hit) * weight, "metadata": {**(hit.get("metadata") or {}), "corpus_weight": weight}}
        for hit in hits
    ]


def level_verdict(best_level: float) -> VerdictStatus:
    """What the best hit's level says about the question."""
    if best_level >= FOUND_LEVEL:
        return FOUND
    return WEAK if best_level >= WEAK_LEVEL else NOTHING_RELEVANT


def combined_verdict(corpus_verdicts: Iterable[str], *, any_failed: bool) -> VerdictStatus:
    """Found anywhere is found; otherwise a corpus that could not be checked makes it unknown."""
    verdicts = set(corpus_verdicts)
    if FOUND in verdicts:
        return FOUND
    if any_failed or not verdicts or UNKNOWN in verdicts:
        return UNKNOWN
    return WEAK if WEAK in verdicts else NOTHING_RELEVANT


def corpus_verdict(check: dict[str, Any]) -> VerdictStatus:
    """A corpus check's verdict; a check that gives none says only blocking (found) or not."""
    given = check.get("verdict")
    if given in (FOUND, WEAK, NOTHING_RELEVANT, UNKNOWN):
        return given  # type: ignore[return-value]
    return NOTHING_RELEVANT if check.get("safe_to_answer_negative", True) else FOUND
