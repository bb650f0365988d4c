"""Which law a question is about, from its words alone: a per-law term model of the corpus's own text.

A caselaw-style question names no law ("mir wurde gekündigt, wie lange habe ich Zeit ...") and its
top 10 is often led by the wrong law; restricting the search to the right law doubles its nDCG.
The model is a multinomial per law over stemmed words of the units' `text` (never the heading,
which the statutes corpus does not index), smoothed towards the whole corpus (Dirichlet), so a
word scores by how much more often one law uses it than the corpus does. A question's
distribution over laws is the softmax of the summed log-ratios divided by a temperature and by
the square root of its word count (a long statute sentence would otherwise be certain of every
guess). A law the question names by its abbreviation ("KSchG") wins outright.

The retriever multiplies each fused score by 1 + strength x P(law of the hit): an even
distribution changes no order, a confident one lifts its law's sections.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_WORD = re.compile(r"[a-zäöüß]{3,}")
# Inflection endings, longest first; a stem keeps at least four letters ("kündigungen" -> "kündig").
_SUFFIXES = ("ungen", "ung", "innen", "heiten", "keiten", "heit", "keit", "lichen", "liche", "lich",
             "isch", "ern", "em", "en", "er", "es", "e", "n", "s", "t")  # fmt: skip
_STOPWORDS = frozenset(
    "aber alle allem allen aller alles als also auch auf aus bei beim bin bis bist dass das dem den der des "
    "die dies diese diesem diesen dieser dieses doch dort durch ein eine einem einen einer eines er es "
    "für gegen habe haben hat hatte ich ihm ihn ihr ihre im in ist jetzt kann können mein meine meinem "
    "meinen meiner mich mir mit muss nach nicht noch nur oder ob schon sein seine sich sie sind so soll "
    "über um und uns unser unsere vom von vor war was weil wenn werden wie wir wird wurde zu zum zur "
    "darf dürfen geht gilt welche welcher welches wann wer wo".split()
)
# Dirichlet smoothing mass (in words): a law with fewer words than this leans on the corpus's
# frequencies, so one rare word of a small law (MiLoG) cannot decide alone. Tuned on
# tests/fixtures/eval (own sets), not on the dev queries.
SMOOTHING = 1000.0
# 0.35-1.0 and strengths 0.5-2 scored within 0.01 of each other on the own sets (0.5 and 1.0 kept).
TEMPERATURE = 0.5
MIN_COUNT = 2
# Words of 8+ letters add their first and last 6 letters as features: on the own sets the
# compounds' parts lifted the lay caselaw questions over 16 laws from 0.28 to 0.31 nDCG@10.
COMPOUND_LENGTH = 8
AFFIX = 6
NAMED_LAW_PROBABILITY = 0.9
# The share of the mass every law keeps when the retriever boosts by the prior (issue 44). The prior is
# sure of a court's sentence when it should not be: of the own court and decision sentences it gave
# P >= 0.99 to, its top law was right for 73 %, of P 0.9-0.99 for 44 % (statute text, xref: 99 %).
# With 0.2 nDCG@10 of the court sentences rose 0.228 -> 0.237, headings and xref kept theirs;
# 0.3 and 0.5 scored the same on the court sentences and cost the headings.
UNCERTAINTY = 0.2


def stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


def terms(text: str) -> list[str]:
    """Stemmed content words and, of long words, their leading and trailing stems (compounds:
    "Kündigungsschreiben" shares "kündig" with the law's "Kündigung")."""
    found = []
    for word in _WORD.findall(text.casefold()):
        if word in _STOPWORDS:
            continue
        found.append(stem(word))
        if len(word) >= COMPOUND_LENGTH:
            found += ["<" + word[:AFFIX], stem(word)[-AFFIX:] + ">"]
    return found


@dataclass(frozen=True)
class LawPrior:
    """log P(term | law) / P(term | corpus) per term and law, and the laws in column order."""

    laws: tuple[str, ...]
    vocabulary: Mapping[str, int]
    log_ratio: np.ndarray  # (terms, laws), float32
    temperature: float = TEMPERATURE

    @classmethod
    def learn(cls, texts_by_law: Mapping[str, Iterable[str]], *, smoothing: float = SMOOTHING) -> LawPrior:
        laws = tuple(sorted(texts_by_law))
        counts = {law: Counter(t for text in texts_by_law[law] for t in terms(text)) for law in laws}
        total = Counter()
        for law_counts in counts.values():
            total.update(law_counts)
        vocabulary = {t: i for i, t in enumerate(sorted(t for t, n in total.items() if n >= MIN_COUNT))}
        matrix = np.zeros((len(vocabulary), len(laws)), dtype=np.float64)
        for column, law in enumerate(laws):
            for term, n in counts[law].items():
                if term in vocabulary:
                    matrix[vocabulary[term], column] = n
        corpus_words = max(sum(total[t] for t in vocabulary), 1)
        background = np.array([total[t] for t in vocabulary], dtype=np.float64)[:, None] / corpus_words
        law_words = matrix.sum(axis=0)[None, :]
        smoothed = (matrix + smoothing * background) / (law_words + smoothing)
        return cls(laws, vocabulary, np.log(smoothed / background).astype(np.float32))

    def distribution(self, question: str) -> dict[str, float]:
        """P(law | question); even when no word of the question is known to the model."""
        if not self.laws:
            return {}
        named = [law for law in self.laws if re.search(rf"(?<![\w-]){re.escape(law)}(?![\w-])", question)]
        if named:
            rest = (1.0 - NAMED_LAW_PROBABILITY) / len(self.laws)
            return {law: rest + (NAMED_LAW_PROBABILITY / len(named) if law in named else 0.0) for law in self.laws}
        rows = [self.vocabulary[t] for t in terms(question) if t in self.vocabulary]
        if not rows:
            return {law: 1.0 / len(self.laws) for law in self.laws}
        scores = self.log_ratio[rows].sum(axis=0, dtype=np.float64) / (math.sqrt(len(rows)) * self.temperature)
        weights = np.exp(scores - scores.max())
        return dict(zip(self.laws, (weights / weights.sum()).tolist(), strict=True))

    # ------------------------------------------------------------ storage

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        terms_sorted = sorted(self.vocabulary, key=self.vocabulary.__getitem__)
        with path.open("wb") as out:
            np.savez_compressed(out, laws=np.array(self.laws), terms=np.array(terms_sorted), log_ratio=self.log_ratio)

    @classmethod
    def load(cls, path: Path) -> LawPrior:
        with np.load(path) as data:
            vocabulary = {str(t): i for i, t in enumerate(data["terms"])}
            return cls(tuple(str(law) for law in data["laws"]), vocabulary, data["log_ratio"])


def fingerprint(text_hashes: Iterable[tuple[str, str]]) -> str:
    """A short digest of the features' settings and the (law, text hash) pairs: a reloaded corpus with
    other text, or a change of how features are cut, gets a new model file."""
    digest = hashlib.sha256(f"{SMOOTHING} {MIN_COUNT} {COMPOUND_LENGTH} {AFFIX} {_SUFFIXES}\n".encode())
    for law, text_hash in sorted(text_hashes):
        digest.update(f"{law}\0{text_hash}\n".encode())
    return digest.hexdigest()[:16]


def with_uncertainty(distribution: Mapping[str, float], share: float = UNCERTAINTY) -> dict[str, float]:
    """The distribution mixed with the even one: the order stays, no law falls below share / laws."""
    if not distribution:
        return {}
    even = share / len(distribution)
    return {law: (1.0 - share) * p + even for law, p in distribution.items()}


def boosted(score: float, law_probability: float, strength: float) -> float:
    """The fused score times 1 + strength x P(law): an even prior keeps every order."""
    return score * (1.0 + strength * law_probability)


def corpus_prior(units: Iterable[tuple[str, str, str]], directory: Path | None) -> LawPrior:
    """The prior of a corpus's (law, text hash, text) units, read from `directory` when it was learned
    from the same units before (learning takes seconds on 17,000 units), else learned and stored there."""
    units = list(units)
    path = directory / f"law-prior-{fingerprint((law, h) for law, h, _ in units)}.npz" if directory else None
    if path is not None and path.exists():
        return LawPrior.load(path)
    texts: dict[str, list[str]] = {}
    for law, _, text in units:
        texts.setdefault(law, []).append(text)
    prior = LawPrior.learn(texts)
    if path is not None:
        prior.save(path)
    return prior
