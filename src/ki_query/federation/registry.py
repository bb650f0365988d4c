"""The corpus registry: statute-format corpora registered in SQL, plus the firm's own index.

Scores from several corpora may be merged only when they are comparable: every corpus
must be indexed with the same embedding model and metric as the query embedder. The
registry checks that and returns a warning text (it does not raise: a ranking problem
must not take the service down).

The firm's index is a corpus too, through `FirmIndexCorpus`, an adapter over anything
with `search(request, principals)` (the RetrievalService). Statute corpora are public;
the firm's index answers only with the caller's principals, and nothing without them.
It is asked for every question outside the corpus cap (`always_selected`); a corpus that
cannot answer now (`cannot_answer`: another embedder, no index) is not asked at all.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ki_core.config import Settings
from ki_core.embedding import Embedder, embedder_signature
from ki_core.models.corpora import Corpus
from ki_core.search import SearchIndex, open_index
from ki_query.federation.corpus_loader import corpus_index_exists, index_metric
from ki_query.federation.errors import CorpusEmbeddingMismatch, CorpusIndexMissing, UnknownCorpus
from ki_query.federation.corpus_retriever import (
    NEGATIVE_CHECK_TOP_K,
    CorpusRetriever,
    HybridWeights,
    negative_threshold_for,
)
from ki_query.federation.ranking import (
    FOUND,
    NOTHING_RELEVANT,
    calibration_for,
    cosine_verdict,
    finite,
    weak_cosine,
)
from ki_query.federation.corpus_units import UnitStore
from ki_query.rerank.model import offline_ranker


log = logging.getLogger(__name__)

FIRM_CORPUS_ID = "firm"
FIRM_KIND = "firm"


@dataclass(frozen=True)
class CorpusSpec:
    id: str
    kind: str
    index_name: str
    embedding_signature: str
    metric: str
    default_container: str | None = None
    containers: tuple[str, ...] = ()
    title: str | None = None
    unit_count: int = 0
    public: bool = True

    @classmethod
    def from_row(cls, row: Corpus) -> CorpusSpec:
        attributes = row.attributes or {}
        return cls(
            id=row.id,
            kind=str(getattr(row.kind, "value", row.kind)),
            index_name=row.index_name,
            embedding_signature=row.embedding_signature,
            metric=row.metric,
            default_container=row.default_container,
            containers=tuple(attributes.get("containers", ())),
            title=attributes.get("title"),
            unit_count=row.unit_count,
            public=bool(attributes.get("public", True)),
        )


# ------------------------------------------------------------------ firm index adapter


class FirmSearchService(Protocol):
    """What the adapter needs of the retrieval service."""

    def search(self, request: Any, principals: Sequence[str]) -> Any: ...


class FirmSearchRequest(BaseModel):
    """Stand-in request with the field names of ki_query's SearchRequest (query, limit)."""

    query: str
    limit: int = 8


def default_firm_request(question: str, top_k: int) -> Any:
    """ki_query.types.SearchRequest when it exists, else the stand-in with the same fields."""
    try:
        from ki_query.types import SearchRequest  # type: ignore[import-not-found]
    except ImportError:
        return FirmSearchRequest(query=question, limit=top_k)
    return SearchRequest(query=question, limit=top_k)


def _field(item: Any, *names: str) -> Any:
    for name in names:
        value = item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)
        if value is not None:
            return value
    return None


def read_chunk_text(service: Any, item: Any, principals: Sequence[str]) -> str | None:
    """The hit's whole chunk, read as the caller through the service (the citation's passage range),
    or None where the service cannot read text or the hit names no passage (then its text is scored)."""
    read_text = getattr(service, "read_text", None)
    citation = _field(item, "citation")
    start, end = _field(citation, "passage_start"), _field(citation, "passage_end")
    document_id, version_id = _field(item, "document_id"), _field(item, "version_id", "document_version_id")
    if read_text is None or None in (citation, start, end, document_id) or end <= start:
        return None
    from ki_query.reading import TextRequest

    try:
        part = read_text(document_id, TextRequest(version=version_id, offset=start, limit=end - start), principals)
    except Exception as exc:  # noqa: BLE001 - a chunk that cannot be read is scored on the excerpt
        log.warning("federation: firm chunk of %s not read, its excerpt is scored: %s: %s",
                    document_id, type(exc).__name__, exc)
        return None
    return str(_field(part, "text") or "") or None


@dataclass
class FirmIndexCorpus:
    """The firm's knowledge index as a federation corpus (no address lookups: it has no §§)."""

    service: FirmSearchService
    corpus_id: str = FIRM_CORPUS_ID
    embedder: Embedder | None = None
    request_factory: Callable[[str, int], Any] = default_firm_request
    negative_threshold: float | None = None
    # Reads a hit's whole chunk as the caller (service, hit, principals); None scores the hit's text.
    chunk_reader: Callable[[Any, Any, Sequence[str]], str | None] = read_chunk_text

    def query(
        self, question: str, top_k: int = 8, principals: Sequence[str] | None = None, **_ignored: Any
    ) -> list[dict[str, Any]]:
        """The caller's hits; without principals nothing (fail closed, never an unscoped search)."""
        if not principals:
            return []
        response = self.service.search(self.request_factory(question, top_k), list(principals))
        items = _response_hits(response)
        hits = [self._hit(item) for item in items]
        chunks = [self.chunk_reader(self.service, item, principals) for item in items]
        return self._with_rank_scores(question, hits, chunks)

    def verify_negative_result(self, question: str, principals: Sequence[str] | None = None) -> dict[str, Any]:
        """The corpora's verdict on the firm's documents: found, weak (its best hit is weak) or nothing relevant."""
        hits = self.query(question, top_k=NEGATIVE_CHECK_TOP_K, principals=principals)
        signature = getattr(self.embedder, "signature", "")
        threshold = self.negative_threshold or negative_threshold_for(signature)
        cosines = [finite(h.get("rank_score")) for h in hits]
        strong = [h for h, c in zip(hits, cosines, strict=True) if c >= threshold]
        best = max(cosines, default=None)
        null = calibration_for(signature).null_cosine
        verdict, weak_from = cosine_verdict(best, threshold, null), weak_cosine(threshold, null)
        if verdict == FOUND:
            reason = f"{len(strong)} document hit(s) at cosine >= {threshold:.2f} (best {best:.3f})"
        elif best is None:
            reason = "no document the caller may see matches"
        else:
            reason = f"no document hit at cosine >= {threshold:.2f} (best {best:.3f}; weak from {weak_from:.2f})"
        return {
            "safe_to_answer_negative": verdict == NOTHING_RELEVANT,
            "verdict": verdict,
            "reason": reason,
            "results": strong,
            "strong_result_count": len(strong),
        }

    def _hit(self, item: Any) -> dict[str, Any]:
        text = str(_field(item, "text", "excerpt", "snippet", "chunk_text") or "")
        document_id = _field(item, "document_id")
        return {
            "text": text,
            "score": float(_field(item, "score") or 0.0),
            "metadata": {
                "corpus_id": self.corpus_id,
                "container_id": document_id,
                "section_id": None,
                "chunk_index_in_section": _field(item, "chunk_index", "ordinal"),
                "text_hash": hashlib.sha256(f"{_field(item, 'chunk_id')}\n{text}".encode()).hexdigest(),
                "document_id": document_id,
                "document_version_id": _field(item, "document_version_id", "version_id"),
                "chunk_id": _field(item, "chunk_id"),
                "project_id": _field(item, "project_id"),
                "title": _field(item, "title", "document_title"),
                "citation": _citation(item),
            },
            "retrieval_kinds": list(_field(item, "retrieval_kinds", "legs") or ["firm_index"]),
            "corpus_id": self.corpus_id,
        }

    def _with_rank_scores(
        self, question: str, hits: list[dict[str, Any]], chunks: Sequence[str | None]
    ) -> list[dict[str, Any]]:
        """rank_score = cosine of question and the whole chunk with the shared embedder (never RRF).

        The corpora score their whole units; a firm hit scored on its 320-character excerpt would be
        compared on less text (and on the part around the words that matched). A chunk that cannot
        be read falls back to the hit's text; metadata.scored_on says which was scored.
        """
        if self.embedder is None or not hits:
            return hits
        texts = [chunk or hit["text"] or " " for hit, chunk in zip(hits, chunks, strict=True)]
        for hit, chunk, value in zip(hits, chunks, cosines(self.embedder, question, texts), strict=True):
            hit["rank_score"] = float(value)
            hit["metadata"]["scored_on"] = "chunk" if chunk else "text"
        return hits


def _citation(item: Any) -> dict[str, Any] | None:
    """The firm hit's full citation (project, document, version, source objects, excerpt) as /v1/search
    shows it: a lawyer reading a federated answer must be able to open the very version that was cited."""
    citation = _field(item, "citation")
    if citation is None or isinstance(citation, Mapping):
        return citation
    return citation.model_dump(mode="json")


def _response_hits(response: Any) -> list[Any]:
    if response is None:
        return []
    hits = _field(response, "hits")
    return list(hits if hits is not None else response)


# ------------------------------------------------------------------ registry


@dataclass
class CorpusRegistry:
    """Registered corpora (SQL) and, when given, the firm's index; retrievers opened lazily."""

    settings: Settings
    sessions: sessionmaker[Session]
    embedder: Embedder
    firm: FirmIndexCorpus | None = None
    only: Sequence[str] | None = None
    weights: HybridWeights | None = None
    _specs: dict[str, CorpusSpec] | None = field(default=None, init=False)
    _retrievers: dict[str, Any] = field(default_factory=dict, init=False)
    _indexes: list[SearchIndex] = field(default_factory=list, init=False)

    def available(self) -> list[str]:
        ids = list(self._load_specs())
        return [c for c in ids if self.only is None or c in self.only]

    def spec(self, corpus_id: str) -> CorpusSpec:
        specs = self._load_specs()
        if corpus_id not in specs:
            raise UnknownCorpus(corpus_id)
        return specs[corpus_id]

    def retriever(self, corpus_id: str) -> Any:
        if corpus_id not in self._retrievers:
            self._retrievers[corpus_id] = self._open_retriever(self.spec(corpus_id))
        return self._retrievers[corpus_id]

    def always_selected(self) -> list[str]:
        """Asked for every question, outside the corpus cap: the firm's index (spec/amendments.md 5)."""
        return [self.firm.corpus_id] if self.firm is not None and self.firm.corpus_id in self.available() else []

    def cannot_answer(self, corpus_id: str) -> str | None:
        """Why the corpus cannot answer a question now, or None when it can."""
        problem = self._problem_opening(self.spec(corpus_id))
        return None if problem is None else str(problem)

    def refresh(self) -> None:
        self._specs = None

    def close(self) -> None:
        for index in self._indexes:
            index.close()
        self._indexes.clear()
        self._retrievers.clear()

    def _load_specs(self) -> dict[str, CorpusSpec]:
        if self._specs is None:
            with self.sessions() as session:
                rows = session.scalars(select(Corpus).order_by(Corpus.id)).all()
                specs = {row.id: CorpusSpec.from_row(row) for row in rows}
            if self.firm is not None:
                specs[self.firm.corpus_id] = self._firm_spec(self.firm.corpus_id)
            self._specs = specs
        return self._specs

    def _firm_spec(self, corpus_id: str) -> CorpusSpec:
        # The embedder's signature, as the corpora carry it (index_signature adds the identifier
        # extractor's version, which made the firm look incomparable to every corpus).
        embedding = self.settings.embedding
        return CorpusSpec(
            id=corpus_id,
            kind=FIRM_KIND,
            index_name=self.settings.retrieval.index_name,
            embedding_signature=embedder_signature(embedding.label(), self.settings.effective_embedding_dimensions),
            metric=index_metric(self.settings),
            title="Kanzlei-Wissensindex",
            public=False,
        )

    def _is_firm(self, spec: CorpusSpec) -> bool:
        return self.firm is not None and spec.id == self.firm.corpus_id

    def _problem_opening(self, spec: CorpusSpec) -> CorpusEmbeddingMismatch | CorpusIndexMissing | None:
        """What opening the corpus's retriever would fail with (checked without opening), or None."""
        if self._is_firm(spec) or spec.id in self._retrievers:
            return None
        if spec.embedding_signature != self.embedder.signature:
            return CorpusEmbeddingMismatch(
                f"corpus {spec.id} was indexed with {spec.embedding_signature} but questions are embedded with "
                f"{self.embedder.signature}: reload it with `ki corpus load {spec.id}` (or configure that embedder), "
                "or remove it"
            )
        # Checked before opening: OpenSearch's ensure() would create an empty index under the name.
        if not corpus_index_exists(self.settings, spec.index_name):
            return CorpusIndexMissing(
                f"corpus {spec.id} has no index {spec.index_name}: reload it with `ki corpus load {spec.id}`"
            )
        return None

    def _open_retriever(self, spec: CorpusSpec) -> Any:
        if self._is_firm(spec):
            return self.firm
        problem = self._problem_opening(spec)
        if problem is not None:
            raise problem
        index = open_index(self.settings, index_name=spec.index_name, read_only=True)
        index.ensure()
        self._indexes.append(index)
        return CorpusRetriever(
            spec.id,
            index=index,
            units=UnitStore(self.sessions, spec.id),
            embedder=self.embedder,
            containers=spec.containers,
            default_container=spec.default_container,
            weights=self.weights or weights_from_settings(self.settings),
            law_prior_dir=Path(self.settings.state_dir) / "law-prior",
            reranker=offline_ranker(self.settings.retrieval),
        )

    # ------------------------------------------------------------ checks

    def assert_consistent_embedding(self) -> str | None:
        """A warning text when scores of the corpora are not comparable, else None."""
        specs = [self._load_specs()[c] for c in self.available()]
        signatures = {s.embedding_signature for s in specs} | {self.embedder.signature}
        metrics = {s.metric for s in specs}
        problems = []
        if len(signatures) > 1:
            others = [s for s in specs if s.embedding_signature != self.embedder.signature]
            listed = ", ".join(f"{s.id}={s.embedding_signature}" for s in others)
            problems.append(
                f"embedding signatures differ (query embedder {self.embedder.signature}; {listed}); "
                "a corpus of another embedder is not asked until it is reloaded"
            )
        if len(metrics) > 1:
            problems.append("distance metrics differ (" + ", ".join(f"{s.id}={s.metric}" for s in specs) + ")")
        if not problems:
            return None
        return "scores of the corpora are not comparable: " + "; ".join(problems)

    def diagnostics(self) -> dict[str, Any]:
        return {
            "corpora": [self._described(self._load_specs()[c]) for c in self.available()],
            "query_embedder": self.embedder.signature,
            "embedding_warning": self.assert_consistent_embedding(),
        }

    def _described(self, spec: CorpusSpec) -> dict[str, Any]:
        """The spec, and whether the corpus can answer now (with the reason when not)."""
        try:
            why_not = self.cannot_answer(spec.id)
        except Exception as exc:  # noqa: BLE001 - a listing must show the corpus the check failed on
            why_not = f"cannot be checked: {type(exc).__name__}: {exc}"
        return {**asdict(spec), "can_answer_now": why_not is None, "cannot_answer_because": why_not}


def weights_from_settings(settings: Settings) -> HybridWeights:
    retrieval = settings.retrieval
    return HybridWeights(
        lexical=retrieval.weight_lexical,
        semantic=retrieval.weight_semantic,
        identifier=retrieval.weight_identifier,
        rrf_k=retrieval.fusion_rrf_k,
        law_prior=retrieval.law_prior_strength,
    )


def cosines(embedder: Embedder, question: str, texts: Iterable[str]) -> np.ndarray:
    """Plain cosine of question and texts with one embedder (both sides unit vectors)."""
    texts = list(texts)
    if not texts:
        return np.zeros(0, dtype=np.float32)
    return embedder.embed_passages(texts) @ embedder.embed_query(question)
