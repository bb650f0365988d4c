"""The retriever of one statute-format corpus: hybrid query, lookups by address, negative check.

query(): German BM25 on `text` (never the heading), semantic kNN, the identifier leg and
explicit lookups of the § references the question names, fused with weighted RRF, then
ranked by section: a § whose Absätze match several times is stronger evidence than one
stray Absatz (the § is the unit a lawyer cites, and the eval grades every Absatz of it).
For a court's wording, which shares few words with the norm it applies (issue 44), the lexical legs
also search the parts of the question's compounds (compounds.py), the §§ the best hits cite join
the candidates (CITED_AT), and so do the other Absätze of the best §§ (WHOLE_SECTIONS_AT).

Every hit carries `score` (this corpus's fused score, for its own order) and `rank_score`,
the plain cosine of the shared embedding model between question and chunk (on both backends).
The federation puts it on its common scale (ranking.py) before it compares corpora; the
negative check reads the same scale.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ki_core.embedding import Embedder
from ki_core.identifiers import Identifier, extract, normalize_law, query_identifier_terms
from ki_core.models.corpora import CorpusUnit
from ki_core.search import SearchIndex
from ki_core.search.types import Leg, MultiSearchRequest, ScopeFilter, SearchFilters, oversampled_window
from ki_query.federation.corpus_loader import SECTION_KIND, UNIT_KIND, section_key
from ki_query.federation.corpus_units import Hit, UnitStore, unit_hit
from ki_query.federation.providers import StatuteVerweise, expand_sections
from ki_query.compounds import CompoundSplitter
from ki_query.law_prior import LawPrior, boosted, corpus_prior, with_uncertainty
from ki_query.rerank.features import RerankInput, feature_matrix
from ki_query.rerank.model import LinearRanker, keep_scores_descending, reordered
from ki_query.federation.ranking import (
    FOUND,
    FOUND_LEVEL,
    NOTHING_RELEVANT,
    WEAK,
    calibration_for,
    finite,
    weak_cosine,
)


ALL_LEGS = frozenset(Leg)
LOOKUP_SCORE = 1.0
LOOKUP_MAX_CHUNKS = 2
WHERE_KEYS = frozenset({"container_id", "section_id", "repealed"})
NEGATIVE_CHECK_TOP_K = 20
# The best fused hits whose § references count for the reranker's citation feature (issue 19, item 0)
# and bring the §§ they cite among the candidates (issue 44).
CITING_HITS = 10
# A § the best hits cite that the first CITED_DEPTH candidates lack joins them at CITED_AT with its
# first CITED_UNITS in-force Absätze: below the top the caller reads first, above the depth the
# reranker reorders. On the own sets (lexical and identifier legs) Recall@100 of the xref questions
# 0.585 -> 0.630, of the court sentences 0.368 -> 0.387; 1, 2 or all Absätze, 20 or 40 citing hits,
# and the position 10 or 50 scored the same or lower.
CITED_AT = 20
CITED_UNITS = 3
CITED_DEPTH = 100
# The in-force Absätze of the first WHOLE_SECTIONS §§ among the candidates that no leg returned join
# them at WHOLE_SECTIONS_AT: the § is what a court cites and every Absatz of it is graded, but a
# sentence about one Absatz brings only that one. On the own sets (e5-small, reranked) Recall@100 of
# the court sentences 0.466 -> 0.499, of the decision sentences 0.673 -> 0.738, headings 0.789 ->
# 0.872, xref 0.676 -> 0.704; 5 §§ added more Recall and cost nDCG@10 of the court sentences, and
# each § 's Absätze placed right after its best one cost nDCG@10 of the court and lay questions.
WHOLE_SECTIONS = 3
WHOLE_SECTIONS_AT = 30
# The extractor does not end a reference at "?" or "!" ("Was regelt § 573c BGB?" finds nothing);
# a question is read with a full stop there instead.
_CLOSING_MARKS = str.maketrans({"?": ".", "!": "."})


@dataclass(frozen=True)
class HybridWeights:
    """RRF weights per leg (retrieval.weight_*), the RRF constant, and the weight of section evidence.

    section_weight: a chunk's score is the RRF of its own ranks plus this times the RRF of its
    section's ranks (passage and document evidence interpolated; 1.0 weighs them equally).
    0 ranks chunks alone.
    law_prior: each fused score times 1 + this x P(law of the hit | question) (law_prior.py);
    0, the default here, is the plain hybrid (the setting retrieval.law_prior_strength turns it on).
    """

    lexical: float = 1.0
    semantic: float = 1.0
    identifier: float = 1.5
    rrf_k: int = 60
    section_weight: float = 1.0
    law_prior: float = 0.0
    # Issue 44, all on by default: the lexical legs search the question plus its compounds' parts
    # (compounds.py), the §§ the best hits cite join the candidates (CITED_AT), and so do the other
    # Absätze of the best §§ (WHOLE_SECTIONS_AT).
    compound_split: bool = True
    cited_sections: bool = True
    whole_sections: bool = True

    def of(self, leg: Leg) -> float:
        return {Leg.LEXICAL: self.lexical, Leg.SEMANTIC: self.semantic, Leg.IDENTIFIER: self.identifier}[leg]


@dataclass
class LegRankings:
    """(chunk id, leg score) of Absätze per leg, best first; sections by lexical score over the whole §."""

    absaetze: dict[Leg, list[tuple[int, float]]]
    section_lexical: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Candidate:
    chunk_id: int
    score: float = 0.0
    kinds: list[str] = field(default_factory=list)
    cosine: float | None = None
    # leg -> (rank from 0, leg score; the cosine for the semantic leg): what the reranker reads.
    legs: dict[str, tuple[int, float]] = field(default_factory=dict)


@dataclass
class RankedHit:
    """A fused hit and the evidence behind it, until the reranker has read it."""

    hit: Hit
    evidence: RerankInput


def parse_legs(legs: Iterable[str | Leg] | str | None) -> frozenset[Leg]:
    if legs is None:
        return ALL_LEGS
    if isinstance(legs, str):
        legs = [part for part in legs.split(",") if part.strip()]
    try:
        return frozenset(Leg(str(leg).strip()) for leg in legs)
    except ValueError:
        raise ValueError(f"unknown leg in {legs!r}; legs are {', '.join(sorted(ALL_LEGS))}") from None


def named_identifiers(question: str, context_law: str | None = None) -> list[Identifier]:
    return extract(question.translate(_CLOSING_MARKS), context_law=context_law)


def negative_threshold_for(signature: str) -> float:
    """The cosine at which a hit counts as robust evidence: the found level of the embedder's calibration."""
    return calibration_for(signature).cosine_at(FOUND_LEVEL)


class CorpusRetriever:
    """Retriever of one corpus with its own index; the federation's `query` / `get_units` peer."""

    def __init__(
        self,
        corpus_id: str,
        *,
        index: SearchIndex,
        units: UnitStore,
        embedder: Embedder,
        containers: Iterable[str] = (),
        default_container: str | None = None,
        weights: HybridWeights | None = None,
        negative_threshold: float | None = None,
        law_prior_dir: Path | None = None,
        reranker: LinearRanker | None = None,
    ):
        self.corpus_id = corpus_id
        self.index = index
        self.units = units
        self.embedder = embedder
        self.containers = {normalize_law(c) for c in containers}
        self.default_container = default_container
        self.weights = weights or HybridWeights()
        self.negative_threshold = negative_threshold or negative_threshold_for(embedder.signature)
        # OpenSearch scores kNN as (1 + cos) / 2; the embedded backend returns the cosine itself.
        self._cosine: Callable[[float], float] = getattr(index, "cosine", lambda score: score)
        self.law_prior_dir = law_prior_dir
        self._law_prior: LawPrior | None = None
        self._splitter: CompoundSplitter | None = None
        self.reranker = reranker
        self._references = StatuteVerweise({corpus_id: self.containers})

    # ---------------------------------------------------------------- query

    def query(
        self,
        question: str,
        top_k: int = 8,
        where: Mapping[str, Any] | None = None,
        fetch_k: int | None = None,
        *,
        legs: Iterable[str | Leg] | str | None = None,
        include_neighbors: bool = False,
        exclude_records: Iterable[str] = (),
        rerank: bool = True,
    ) -> list[Hit]:
        """The top_k hits: lookups of named §§ first, then the fused ranking, reordered by the
        offline reranker (when configured, `rerank` and both text legs are on).

        exclude_records: record ids that leave the candidates before anything reads them (an
        evaluation's citing Absatz, whose own references would hand the reranker the answer).
        """
        legs = parse_legs(legs)
        vector = self.embedder.embed_query(question)
        lookups, ranked = self.candidates(
            question, vector, legs=legs, where=where, size=fetch_k or oversampled_window(top_k),
            exclude_records=exclude_records,
        )
        if rerank and self.reranker is not None and {Leg.LEXICAL, Leg.SEMANTIC} <= legs:
            ranked = self._reranked(question, ranked)
        hits = (lookups + [r.hit for r in ranked])[:top_k]
        if include_neighbors:
            hits = self._with_neighbors(hits)
        return self._with_rank_scores(hits, vector)

    def candidates(
        self,
        question: str,
        vector: np.ndarray,
        *,
        legs: frozenset[Leg],
        where: Mapping[str, Any] | None,
        size: int,
        exclude_records: Iterable[str] = (),
    ) -> tuple[list[Hit], list[RankedHit]]:
        """The lookups of named §§ and the fused ranking with its evidence, before any reranking
        (what bench/train_reranker.py learns from)."""
        named = named_identifiers(question)
        if not named:
            # The identifier leg matches the identifiers of chunks; a question naming none gives it
            # only stray tokens ("1.", "Abs") to match, which is noise at its weight of 1.5.
            legs = legs - {Leg.IDENTIFIER}
        lookups = self.section_lookups(question, where, named) if Leg.IDENTIFIER in legs else []
        rankings = self._leg_rankings(question, vector, legs, where, size)
        excluded = set(exclude_records)
        lookups = [h for h in lookups if h["metadata"]["record_id"] not in excluded]
        taken = {h["metadata"]["text_hash"] for h in lookups}
        laws = self.law_distribution(question)
        ranked = self._ranked_hits(rankings, skip_hashes=taken, laws=laws, exclude_records=excluded)
        if self.weights.cited_sections:
            ranked = self._with_cited_sections(
                ranked, rankings, laws=laws, where=where, skip_hashes=taken, exclude_records=excluded
            )
        if self.weights.whole_sections:
            ranked = self._with_whole_sections(ranked, where=where, skip_hashes=taken, exclude_records=excluded)
        return lookups, ranked

    def _leg_rankings(
        self, question: str, vector: np.ndarray, legs: frozenset[Leg], where: Mapping[str, Any] | None, size: int
    ) -> LegRankings:
        """Absatz rankings per requested leg, and the lexical ranking of whole sections."""
        scope, filters = self._filters(where)
        words = self.lexical_text(question) if Leg.LEXICAL in legs else ""
        request = MultiSearchRequest(
            query_text=words,
            query_vector=tuple(float(x) for x in vector) if Leg.SEMANTIC in legs else None,
            scope=scope,
            filters=filters.model_copy(update={"chunk_kind": UNIT_KIND}),
            size=size,
            identifier_terms=query_identifier_terms(question) if Leg.IDENTIFIER in legs else (),
        )
        result = self.index.multi_search(request)
        # Legs in their declared order (not the set's hash order): equal scores keep a stable order.
        ordered = [leg for leg in Leg if leg in legs]
        columns = {leg: result.hits(leg) for leg in ordered}
        rankings = LegRankings({
            leg: list(zip(hits.chunk_ids.tolist(), hits.scores.tolist(), strict=True)) for leg, hits in columns.items()
        })  # fmt: skip
        if Leg.LEXICAL in legs:
            sections = self.index.multi_search(
                MultiSearchRequest(
                    query_text=words,
                    query_vector=None,
                    scope=scope,
                    filters=filters.model_copy(update={"chunk_kind": SECTION_KIND}),
                    size=size,
                )
            )
            rankings.section_lexical = [_section_of_key(h.document_version_id) for h in sections.hits(Leg.LEXICAL)]
        return rankings

    def lexical_text(self, question: str) -> str:
        """What the lexical legs search: the question, plus the parts of its compounds (compounds.py)."""
        if not self.weights.compound_split:
            return question
        if self._splitter is None:
            self._splitter = CompoundSplitter.learn(text for _, _, text in self.units.in_force_texts())
        return self._splitter.expanded(question)

    def law_distribution(self, question: str) -> dict[str, float]:
        """P(law | question) from the corpus's own text, every law keeping a share (UNCERTAINTY);
        empty when the prior is off or one law is all."""
        if self.weights.law_prior <= 0 or len(self.containers) < 2:
            return {}
        if self._law_prior is None:
            self._law_prior = corpus_prior(self.units.in_force_texts(), self.law_prior_dir)
        return with_uncertainty(self._law_prior.distribution(question))

    def _filters(self, where: Mapping[str, Any] | None) -> tuple[ScopeFilter, SearchFilters]:
        where = dict(where or {})
        unknown = set(where) - WHERE_KEYS
        if unknown:
            raise ValueError(f"unknown where key(s) {sorted(unknown)}; known: {sorted(WHERE_KEYS)}")
        container = where.get("container_id")
        scope = (
            ScopeFilter(document_ids=frozenset({normalize_law(container)}))
            if container
            else ScopeFilter(project_ids=frozenset({self.corpus_id}))
        )
        section = where.get("section_id")
        repealed = where.get("repealed")
        filters = SearchFilters(
            matter_id=section_key(normalize_law(container), section) if container and section else None,
            version_status=None if repealed is None else ("repealed" if repealed else "in_force"),
        )
        return scope, filters

    def _ranked_hits(
        self,
        rankings: LegRankings,
        *,
        skip_hashes: set[str],
        laws: Mapping[str, float] | None = None,
        exclude_records: set[str] | frozenset[str] = frozenset(),
    ) -> list[RankedHit]:
        """Absätze by RRF of their own ranks plus section_weight x RRF of their section's ranks.

        A section's rank in a leg is its natural document-level score: BM25 over the whole §
        for the lexical leg (query words spread over several Absätze add up), and its best
        Absatz for the semantic and identifier legs (max-passage). A § counts once per leg,
        so a long § with many weak matches gains nothing from its length. With `laws` (the law
        prior), the fused score is then lifted by the probability of the hit's law.
        """
        units = self.units.by_chunk_ids(cid for ranking in rankings.absaetze.values() for cid, _ in ranking)
        units = {cid: u for cid, u in units.items() if u.record_id not in exclude_records}
        candidates: dict[int, Candidate] = {}
        for leg, ranking in rankings.absaetze.items():
            for rank, (chunk_id, leg_score) in enumerate(ranking):
                if chunk_id not in units:
                    continue
                candidate = candidates.setdefault(chunk_id, Candidate(chunk_id))
                candidate.score += self.weights.of(leg) / (self.weights.rrf_k + rank)
                candidate.kinds.append(leg.value)
                if leg is Leg.SEMANTIC:
                    candidate.cosine = self._cosine(leg_score)
                    leg_score = candidate.cosine
                candidate.legs[leg.value] = (rank, leg_score)
        section_ranks = self._section_ranks(rankings, units)
        section_score: dict[tuple[str, str], float] = {}
        for leg, ranks in section_ranks.items():
            for key, rank in ranks.items():
                section_score[key] = section_score.get(key, 0.0) + self.weights.of(Leg(leg)) / (self.weights.rrf_k + rank)
        ranked = []
        for candidate in candidates.values():
            unit = units[candidate.chunk_id]
            if unit.text_hash in skip_hashes:
                continue
            key = (unit.container_id, unit.section_id)
            score = candidate.score + self.weights.section_weight * section_score.get(key, 0.0)
            law_probability = (laws or {}).get(unit.container_id, 0.0)
            if laws:
                score = boosted(score, law_probability, self.weights.law_prior)
            evidence = RerankInput(
                position=0,
                legs=candidate.legs,
                group_ranks={leg: ranks[key] for leg, ranks in section_ranks.items() if key in ranks},
                law_probability=law_probability,
                inactive=bool(unit.repealed),
            )
            ranked.append(RankedHit(unit_hit(unit, score=score, rank_score=candidate.cosine, kinds=candidate.kinds), evidence))
        ranked.sort(key=lambda r: r.hit["score"], reverse=True)
        for position, item in enumerate(ranked):
            item.evidence.position = position
        return ranked

    def _section_ranks(
        self, rankings: LegRankings, units: Mapping[int, CorpusUnit]
    ) -> dict[str, dict[tuple[str, str], int]]:
        """leg -> (container, section) -> the section's rank from 0 in that leg."""
        ranks: dict[str, dict[tuple[str, str], int]] = {}
        for leg, ranking in rankings.absaetze.items():
            if leg is Leg.LEXICAL and rankings.section_lexical:
                sections = rankings.section_lexical
            else:
                keys = ((units[c].container_id, units[c].section_id) for c, _ in ranking if c in units)
                sections = list(dict.fromkeys(keys))
            ranks[leg.value] = {key: rank for rank, key in enumerate(sections)}
        return ranks

    def _reranked(self, question: str, ranked: list[RankedHit]) -> list[RankedHit]:
        """The reranker's order of the first `prefix` hits (scores rewritten in that order); the rest follow."""
        assert self.reranker is not None
        head = ranked[: self.reranker.prefix]
        if len(head) < 2:
            return ranked
        self.count_citations(head)
        scores = self.reranker.scores(feature_matrix([r.evidence for r in head], question))
        result = reordered(ranked, scores, self.reranker.prefix)
        keep_scores_descending(result, [r.hit["score"] for r in head], _set_hit_score)
        return result

    def count_citations(self, head: Sequence[RankedHit]) -> None:
        """cited_by of each hit: 1 / (1 + position) summed over the best CITING_HITS hits whose text
        cites its § (the references the federation's Verweise follow, read the same way)."""
        cited = self.cited_sections(head)
        for item in head:
            item.evidence.cited_by = cited.get(_section_of(item.hit), 0.0)

    def cited_sections(self, ranked: Sequence[RankedHit]) -> dict[tuple[str, str], float]:
        """(container, §) -> 1 / (1 + position) summed over the best CITING_HITS hits citing it
        (a hit's own § excluded), most cited first."""
        cited: dict[tuple[str, str], float] = {}
        for item in ranked[:CITING_HITS]:
            own = _section_of(item.hit)
            for address in dict.fromkeys(self._references.references_of(item.hit, [self.corpus_id])):
                key = (address.container_id, address.section_id)
                if key != own:
                    cited[key] = cited.get(key, 0.0) + 1.0 / (1 + item.evidence.position)
        return dict(sorted(cited.items(), key=lambda kv: kv[1], reverse=True))

    def _with_cited_sections(
        self,
        ranked: list[RankedHit],
        rankings: LegRankings,
        *,
        laws: Mapping[str, float],
        where: Mapping[str, Any] | None,
        skip_hashes: set[str],
        exclude_records: set[str],
    ) -> list[RankedHit]:
        """The §§ the best hits cite, brought among the candidates at CITED_AT (issue 44).

        A court's sentence shares few words with the norm it applies, but often many with the norms
        that cite it ("die Kosten ... nach § 91"): the best hits' references are candidates that no
        leg returned. They enter at the score of the hit before them (the order stays descending)
        and the reranker reads them as every other candidate: the citation, the law prior and the
        lexical rank of their whole § (no Absatz of theirs is in a leg, or they would be present).
        """
        present = {_section_of(item.hit) for item in ranked[:CITED_DEPTH]}
        wanted = [key for key in self.cited_sections(ranked) if key not in present]
        if not wanted:
            return ranked
        sections = self.units.sections(wanted)
        at = min(CITED_AT, len(ranked))
        score = ranked[at - 1].hit["score"]
        section_lexical = {key: rank for rank, key in enumerate(rankings.section_lexical)}
        seen = set(skip_hashes)
        added = []
        for key in wanted:
            units = [u for u in sections.get(key, []) if _admitted(u, where) and u.record_id not in exclude_records]
            group = {Leg.LEXICAL.value: section_lexical[key]} if key in section_lexical else {}
            for unit in units[:CITED_UNITS]:
                if unit.text_hash not in seen:
                    seen.add(unit.text_hash)
                    evidence = RerankInput(0, group_ranks=group, law_probability=laws.get(unit.container_id, 0.0))
                    added.append(RankedHit(unit_hit(unit, score=score, rank_score=None, kinds=["cited"]), evidence))
        rest = [item for item in ranked if item.hit["metadata"]["text_hash"] not in seen]
        return _renumbered(rest[:at] + added + rest[at:])

    def _with_whole_sections(
        self,
        ranked: list[RankedHit],
        *,
        where: Mapping[str, Any] | None,
        skip_hashes: set[str],
        exclude_records: set[str],
    ) -> list[RankedHit]:
        """The other in-force Absätze of the first WHOLE_SECTIONS §§, at WHOLE_SECTIONS_AT (issue 44).

        A court applies a § and the eval grades all of it, but the legs return the one Absatz the
        sentence's words touch. The siblings enter at the score of the hit before them with the
        evidence their § has (its group ranks and law prior), none of their own: the reranker
        decides whether they rise, and they hold a place among the candidates either way.
        """
        best: dict[tuple[str, str], RankedHit] = {}
        for item in ranked:
            if len(best) == WHOLE_SECTIONS:
                break
            best.setdefault(_section_of(item.hit), item)
        if not best:
            return ranked
        sections = self.units.sections(list(best))
        seen = set(skip_hashes) | {item.hit["metadata"]["text_hash"] for item in ranked}
        at = min(WHOLE_SECTIONS_AT, len(ranked))
        score = ranked[at - 1].hit["score"]
        added = []
        for key, item in best.items():
            for unit in sections.get(key, []):
                if not _admitted(unit, where) or unit.record_id in exclude_records or unit.text_hash in seen:
                    continue
                seen.add(unit.text_hash)
                evidence = RerankInput(
                    0, group_ranks=dict(item.evidence.group_ranks), law_probability=item.evidence.law_probability
                )
                added.append(RankedHit(unit_hit(unit, score=score, rank_score=None, kinds=["same_section"]), evidence))
        return _renumbered(ranked[:at] + added + ranked[at:])

    def _with_rank_scores(self, hits: list[Hit], vector: np.ndarray) -> list[Hit]:
        """rank_score = plain cosine of question and chunk for every hit that has none yet."""
        missing = [h for h in hits if h.get("rank_score") is None]
        if missing:
            rows = self.embedder.embed_passages([h["text"] for h in missing])
            for hit, row in zip(missing, rows @ vector, strict=True):
                hit["rank_score"] = float(row)
        return hits

    # -------------------------------------------------------------- lookups

    def get_units(
        self,
        section_id: str,
        container: str | None = None,
        subsection: str | None = None,
        max_chunks: int = 3,
    ) -> list[Hit]:
        """The chunks at an address, in text order, scored 1.0 (a lookup, not a similarity)."""
        container = normalize_law(container) if container else self.default_container
        units = self.units.at_address(section_id, container, subsection)
        return [
            unit_hit(u, score=LOOKUP_SCORE, rank_score=LOOKUP_SCORE, kinds=["section_lookup"])
            for u in units[: max(0, max_chunks)]
        ]

    def section_lookups(
        self, question: str, where: Mapping[str, Any] | None = None, named: Sequence[Identifier] | None = None
    ) -> list[Hit]:
        """Explicit lookups of the § references the question names in a law this corpus holds."""
        only = normalize_law(where["container_id"]) if where and where.get("container_id") else None
        hits: list[Hit] = []
        if named is None or self.default_container:
            named = named_identifiers(question, context_law=self.default_container)
        for ident in named:
            law = normalize_law(ident.law) if ident.law else None
            if ident.kind != "statute" or not ident.section or law not in self.containers:
                continue
            if only is not None and law != only:
                continue
            subsection = ident.absatz if ident.absatz and ident.absatz.isalnum() else None
            for section in expand_sections(ident.section):
                hits += self.get_units(section, container=law, subsection=subsection, max_chunks=LOOKUP_MAX_CHUNKS)
        unique = {h["metadata"]["text_hash"]: h for h in reversed(hits)}
        return [h for h in hits if unique.get(h["metadata"]["text_hash"]) is h]

    def _with_neighbors(self, hits: list[Hit]) -> list[Hit]:
        """Each hit followed by the adjacent Absätze of its section (kind "neighbor")."""
        keys = {(h["metadata"]["container_id"], h["metadata"]["section_id"]) for h in hits}
        sections = self.units.sections(keys)
        seen = {h["metadata"]["text_hash"] for h in hits}
        result: list[Hit] = []
        for hit in hits:
            result.append(hit)
            for unit in adjacent_units(sections.get(_section_of(hit), []), hit["metadata"]["text_hash"]):
                if unit.text_hash not in seen:
                    seen.add(unit.text_hash)
                    result.append(unit_hit(unit, score=hit["score"], rank_score=None, kinds=["neighbor"]))
        return result

    # ------------------------------------------------------ negative check

    def verify_negative_result(self, question: str, threshold: float | None = None) -> dict[str, Any]:
        """A broad control retrieval (all legs, no filter), read on the common scale.

        found: a hit at cosine >= threshold (the found level, FOUND_LEVEL) or a § the question names
        and this corpus holds; weak: a hit at the weak level; else nothing relevant. Only nothing
        relevant is safe to answer negatively: a weak hit is something the corpus says.
        """
        found_cosine = self.negative_threshold if threshold is None else threshold
        weak_from = weak_cosine(found_cosine, calibration_for(self.embedder.signature).null_cosine)
        hits = self.query(question, top_k=NEGATIVE_CHECK_TOP_K, fetch_k=oversampled_window(NEGATIVE_CHECK_TOP_K))
        cosines = [finite(h.get("rank_score")) for h in hits]
        strong = [
            h for h, c in zip(hits, cosines, strict=True) if "section_lookup" in h["retrieval_kinds"] or c >= found_cosine
        ]
        best_cosine = max(cosines, default=0.0)
        if strong:
            verdict, best = FOUND, strong[0]
            reason = (
                f"{len(strong)} hit(s) at cosine >= {found_cosine:.2f} or named by address, "
                f"best {best['metadata']['address']} ({finite(best['rank_score']):.3f})"
            )
        else:
            verdict = WEAK if best_cosine >= weak_from else NOTHING_RELEVANT
            reason = f"no hit at cosine >= {found_cosine:.2f} (best {best_cosine:.3f}; weak from {weak_from:.2f})"
        return {
            "safe_to_answer_negative": verdict == NOTHING_RELEVANT,
            "verdict": verdict,
            "reason": reason,
            "results": strong,
            "strong_result_count": len(strong),
            "threshold": found_cosine,
        }


def _section_of_key(key: str) -> tuple[str, str]:
    container, _, section = key.rpartition("|")
    return container, section


def _section_of(hit: Hit) -> tuple[str, str]:
    return (hit["metadata"]["container_id"], hit["metadata"]["section_id"])


def adjacent_units(section_units: Sequence[CorpusUnit], text_hash: str) -> list[CorpusUnit]:
    position = next((i for i, u in enumerate(section_units) if u.text_hash == text_hash), None)
    if position is None:
        return []
    return [section_units[i] for i in (position - 1, position + 1) if 0 <= i < len(section_units)]


def _admitted(unit: CorpusUnit, where: Mapping[str, Any] | None) -> bool:
    """A unit that no leg returned may join the candidates: in force (repealed where the filter asks
    for repealed ones), and in the container and § the filter names."""
    where = where or {}
    if where.get("container_id") and unit.container_id != normalize_law(where["container_id"]):
        return False
    if where.get("section_id") and unit.section_id != where["section_id"]:
        return False
    return bool(unit.repealed) == bool(where.get("repealed"))


def _renumbered(ranked: list[RankedHit]) -> list[RankedHit]:
    """The list with each hit's evidence.position set to its place (the reranker reads it)."""
    for position, item in enumerate(ranked):
        item.evidence.position = position
    return ranked


def _set_hit_score(item: RankedHit, score: float) -> None:
    item.hit["score"] = score
