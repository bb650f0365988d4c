"""Which corpus a question is about: one law prior over the laws of all corpora, as a weight per corpus.

Why (issue 44): the common scale (ranking.py) is calibrated per embedder, not per corpus, and with
e5 every legal text of any corpus is about as close by cosine. A question about a lease put beside
16 more laws got their hits interleaved with the statutes' own: caselaw nDCG@10 fell from 0.231
(statutes alone) to 0.130, the other corpus taking 71 of 280 top-10 slots, none of them relevant.
Each corpus already knows which of ITS laws a question is about (law_prior.py); none knew whether
the question is about its laws at all. This learns the same model over the union of the corpora's
laws, so P(corpus | question) is the mean P(law | question) of the laws it holds (each corpus
equally likely before the question is read, its laws equally likely within it: the sum instead
gave the 16 laws of extra16 four times the 4 laws of the statutes before any word was read, and
sent 22 of 60 statutes heading questions to extra16), and the federation weighs each corpus's levels by (P(corpus) / P(best corpus)) ** strength: the likeliest
corpus keeps its levels, a corpus the question is not about sinks, an even prior changes nothing.
A law held by several corpora counts for each of them. A corpus without units (the firm's index)
is not weighed (1.0).

Learned in memory, once per set of corpora and process (a few seconds over 18,000 units): nothing
is written into the state directory.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ki_core.identifiers import normalize_law
from ki_query.law_prior import LawPrior

Weights = dict[str, float]


class CorpusPrior:
    """The federation's `corpus_weights` provider: question, corpus ids -> weight per corpus in (0, 1]."""

    name = "corpus-prior"

    def __init__(self, prior: LawPrior, holders: Mapping[str, Sequence[str]], strength: float, floor: float = 0.0):
        self.prior = prior
        # law -> the corpora holding it
        self.holders = {law: tuple(corpora) for law, corpora in holders.items()}
        self.law_counts = Counter(corpus_id for corpora in self.holders.values() for corpus_id in corpora)
        self.strength = strength
        # The least weight a corpus keeps however sure the prior is that the question is not about it.
        self.floor = floor

    @classmethod
    def learn(cls, texts: Mapping[str, Sequence[tuple[str, str]]], strength: float, floor: float = 0.0) -> CorpusPrior:
        """texts: corpus -> (law, text) of its in-force units."""
        by_law: dict[str, list[str]] = {}
        holders: dict[str, list[str]] = {}
        for corpus_id, units in texts.items():
            for law, text in units:
                law = normalize_law(law)
                by_law.setdefault(law, []).append(text)
                if corpus_id not in holders.setdefault(law, []):
                    holders[law].append(corpus_id)
        return cls(LawPrior.learn(by_law), holders, strength, floor)

    def probabilities(self, question: str, corpus_ids: Sequence[str]) -> dict[str, float]:
        """P(corpus | question) of the given corpora that hold laws, up to one factor common to all."""
        totals: dict[str, float] = {}
        for law, probability in self.prior.distribution(question).items():
            for corpus_id in self.holders.get(law, ()):
                if corpus_id in corpus_ids:
                    totals[corpus_id] = totals.get(corpus_id, 0.0) + probability
        return {corpus_id: total / self.law_counts[corpus_id] for corpus_id, total in totals.items()}

    def __call__(self, question: str, corpus_ids: Sequence[str]) -> Weights:
        totals = self.probabilities(question, corpus_ids)
        if len(totals) < 2 or self.strength <= 0:
            return {}
        best = max(totals.values())
        return {c: self.floor + (1.0 - self.floor) * ((p / best) ** self.strength if best > 0 else 1.0)
                for c, p in totals.items()}


class CorpusPriors:
    """One CorpusPrior per set of corpora, learned on first use from their retrievers' units."""

    def __init__(self, registry: Any, strength: float, floor: float = 0.0):
        self.registry = registry
        self.strength = strength
        self.floor = floor
        self._learned: dict[tuple[str, ...], CorpusPrior] = {}
        self._lock = threading.Lock()

    def for_corpora(self, corpus_ids: Sequence[str]) -> CorpusPrior | None:
        """The prior over the corpora that hold units; None when fewer than two do."""
        with_units = tuple(sorted(c for c in corpus_ids if self._units(c) is not None))
        if len(with_units) < 2:
            return None
        with self._lock:
            if with_units not in self._learned:
                texts = {c: [(law, text) for law, _, text in self._units(c).in_force_texts()] for c in with_units}
                self._learned[with_units] = CorpusPrior.learn(texts, self.strength, self.floor)
            return self._learned[with_units]

    def _units(self, corpus_id: str) -> Any:
        try:
            return getattr(self.registry.retriever(corpus_id), "units", None)
        except Exception:  # noqa: BLE001 - a corpus that cannot open is not weighed (the federation skips it)
            return None

    def __call__(self, question: str, corpus_ids: Sequence[str]) -> Weights:
        prior = self.for_corpora(corpus_ids)
        return prior(question, corpus_ids) if prior is not None else {}
