"""Federated search over the registered corpora and the firm's index: one call for CLI, HTTP and MCP.

`FederatedSearch.from_settings(settings, firm_service=...)` wires the registry, the shipped
providers (law-mention router and named corpora, anchor register from
federation.anchors_file, statute Verweise) and the FederatedRetriever; `ask()` returns
typed hits and the verdict: whether the corpora answer the question (found), touch it (weak),
say nothing about it (nothing relevant), or could not all be checked (unknown). Keep one
instance per process: retrievers and indexes open lazily and stay open.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from ki_core.config import Settings
from ki_core.embedding import Embedder
from ki_query.federation.corpus_prior import CorpusPriors
from ki_query.federation.registry import CorpusRegistry, FirmIndexCorpus, FirmSearchService, UnknownCorpus
from ki_query.federation.providers import AnchorRegister, CorpusMentions, MentionRouter, StatuteVerweise
from ki_query.federation.ranking import FOUND_LEVEL, Hit, VerdictStatus, calibration_for, hit_rank
from ki_query.federation.retriever import ALL_HITS_CAP, VERWEIS_SCORE, FederatedRetriever
from ki_query.types import check_query_length

log = logging.getLogger(__name__)


class FederatedHit(BaseModel):
    """One hit as the surfaces show it: corpus, address, kinds and both scores."""

    model_config = ConfigDict(frozen=True)

    corpus_id: str
    address: str | None
    text: str
    score: float
    rank_score: float | None
    retrieval_kinds: tuple[str, ...]
    metadata: dict[str, Any]

    @classmethod
    def from_hit(cls, hit: dict[str, Any]) -> FederatedHit:
        metadata = dict(hit.get("metadata") or {})
        address = metadata.get("address") or metadata.get("title") or metadata.get("document_id")
        return cls(
            corpus_id=str(hit.get("corpus_id") or metadata.get("corpus_id")),
            address=address,
            text=str(hit.get("text") or ""),
            score=float(hit.get("score") or 0.0),
            rank_score=None if hit.get("rank_score") is None else float(hit["rank_score"]),
            retrieval_kinds=tuple(hit.get("retrieval_kinds") or ()),
            metadata=metadata,
        )


class Verdict(BaseModel):
    """Do the corpora answer the question? From the same broad control retrieval as verify_negative_result.

    found: a corpus holds a hit at the found level or the § the question names; weak: only hits
    at the weak level; nothing relevant: no corpus has either (the one status that makes a
    negative answer safe); unknown: a corpus's check failed and nothing was found elsewhere.
    """

    model_config = ConfigDict(frozen=True)

    status: VerdictStatus
    safe_to_answer_negative: bool
    reason: str
    corpora_checked: list[str] = Field(default_factory=list)
    corpora_with_findings: list[str] = Field(default_factory=list)
    corpora_failed: list[str] = Field(default_factory=list)

    @classmethod
    def from_check(cls, check: dict[str, Any]) -> Verdict:
        return cls(
            status=check["verdict"],
            safe_to_answer_negative=bool(check["safe_to_answer_negative"]),
            reason=str(check["reason"]),
            corpora_checked=list(check.get("corpora_checked") or ()),
            corpora_with_findings=list(check.get("corpora_with_findings") or ()),
            corpora_failed=list(check.get("corpora_failed") or ()),
        )


class CandidateCap(BaseModel):
    """The federation's candidate cap and what it did to this answer: `limit` asked (None: none),
    fused `candidates`, hits `returned`; cut_at_cap when the cap, not the caller's limit, cut the list."""

    model_config = ConfigDict(frozen=True)

    cap: int = ALL_HITS_CAP
    limit: int | None = None
    candidates: int = 0
    returned: int = 0
    cut_at_cap: bool = False


class FederatedAnswer(BaseModel):
    question: str
    hits: list[FederatedHit]
    verdict: Verdict
    candidates: CandidateCap = Field(default_factory=CandidateCap)
    selection: dict[str, Any] | None = None
    diagnostics: dict[str, Any] | None = None


class CitedByStrongHits:
    """The Verweise of the hits at least as strong as a Verweis (VERWEIS_SCORE) only.

    A cited norm is placed at 0.50; read from a weaker hit it would outrank the text that cites
    it, and the references of an off-topic question's hits (which the scale puts near 0) would
    lead its list: "Hundesteuer Kampfhund Hamburg" came back as § 1825 BGB, § 1782 BGB first.
    """

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)

    def __call__(self, hits: list[Hit], corpus_ids: list[str]) -> Any:
        strong = [hit for hit in hits if hit_rank(hit) >= VERWEIS_SCORE]
        return self.inner(strong, corpus_ids) if strong else []


class RestrictedRegistry:
    """A view of a registry that offers only some corpora (`ki ask --corpus`)."""

    def __init__(self, registry: CorpusRegistry, corpus_ids: Sequence[str]):
        for corpus_id in corpus_ids:
            registry.spec(corpus_id)  # raises UnknownCorpus for a typo
        self.registry = registry
        self.corpus_ids = list(corpus_ids)

    def available(self) -> list[str]:
        return [c for c in self.registry.available() if c in self.corpus_ids]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.registry, name)


class FederatedSearch:
    def __init__(self, settings: Settings, registry: CorpusRegistry, *, engine: Engine | None = None):
        self.settings = settings
        self.registry = registry
        self._engine = engine
        self.anchors = AnchorRegister.from_file(settings.federation.anchors_file) if settings.federation.anchors_file else None
        strength = settings.federation.corpus_prior_strength
        floor = settings.federation.corpus_prior_floor
        self.corpus_priors = CorpusPriors(registry, strength, floor) if strength > 0 else None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        firm_service: FirmSearchService | None = None,
        sessions: sessionmaker[Session] | None = None,
        embedder: Embedder | None = None,
    ) -> FederatedSearch:
        from ki_core.db import engine_from_settings, session_factory
        from ki_core.embedding import embedder_from_settings

        engine = None
        if sessions is None:
            engine = engine_from_settings(settings)
            sessions = session_factory(engine)
        embedder = embedder or embedder_from_settings(settings)
        firm = FirmIndexCorpus(firm_service, embedder=embedder) if firm_service is not None else None
        return cls(settings, CorpusRegistry(settings, sessions, embedder, firm=firm), engine=engine)

    def retriever(self, corpora: Sequence[str] | None = None, **overrides: Any) -> FederatedRetriever:
        """A FederatedRetriever over all corpora, or only the named ones; `overrides` replace its
        settings or providers (`ki eval --federated` turns anchors, Verweise, quota off one by one)."""
        registry: Any = RestrictedRegistry(self.registry, corpora) if corpora else self.registry
        mentions = CorpusMentions.from_registry(registry)
        firm_id = self.registry.firm.corpus_id if self.registry.firm else None
        config = self.settings.federation
        wiring: dict[str, Any] = {
            "router": MentionRouter(mentions, always=[firm_id] if firm_id else ()),
            "anchors": self.anchors,
            "verweise": CitedByStrongHits(StatuteVerweise.from_registry(registry)),
            "named_corpora": mentions,
            "max_corpora_per_query": config.max_corpora_per_query,
            "min_hits_per_corpus": config.min_hits_per_corpus,
            "min_ratio": config.min_ratio,
            "max_verweis_normen": config.max_verweis_normen,
            "scale": calibration_for(self.registry.embedder.signature),
            "quota_floor": FOUND_LEVEL,
            "corpus_weights": self.corpus_priors,
        }
        return FederatedRetriever(registry, **{**wiring, **overrides})

    def ask(
        self,
        question: str,
        principals: Sequence[str],
        *,
        corpora: Sequence[str] | None = None,
        top_k: int = 8,
        explain: bool = False,
    ) -> FederatedAnswer:
        """Federated hits and the verdict for the caller; statute corpora are public, the firm's index
        needs principals. The verdict costs one more retrieval per corpus (query embeddings are cached)."""
        check_query_length(question, self.settings.retrieval.max_query_chars)
        federation = self.retriever(corpora)
        hits = federation.query(question, top_k=top_k, principals=list(principals))
        explained = federation.explain_selection(question)
        candidates = CandidateCap(**explained.get("candidates", {"limit": top_k}))
        selection = explained if explain else None
        verdict = Verdict.from_check(federation.verify_negative_result(question, principals=list(principals)))
        return FederatedAnswer(
            question=question,
            hits=[FederatedHit.from_hit(h) for h in hits],
            verdict=verdict,
            candidates=candidates,
            selection=selection,
            diagnostics={**federation.diagnostics(), "scale": self._scale_diagnostics()} if explain else None,
        )

    def _scale_diagnostics(self) -> dict[str, Any]:
        calibration = calibration_for(self.registry.embedder.signature)
        return {"embedder": calibration.embedder, "null_cosine": calibration.null_cosine,
                "measured": calibration.measured}

    def close(self) -> None:
        self.registry.close()
        if self._engine is not None:
            self._engine.dispose()


def firm_service_from_settings(settings: Settings) -> Any | None:
    """The firm's RetrievalService for a CLI process, or None when it cannot be built here."""
    try:
        from ki_query.retrieval import retrieval_service_from_settings
    except ImportError as exc:
        log.warning("the firm's index is not searched: %s: %s", type(exc).__name__, exc)
        return None
    try:
        return retrieval_service_from_settings(settings)
    except Exception as exc:  # noqa: BLE001 - no firm index yet must not stop statute search
        log.warning("the firm's index is not searched: %s: %s", type(exc).__name__, exc)
        return None


__all__ = [
    "CandidateCap", "FederatedAnswer", "FederatedHit", "FederatedSearch", "UnknownCorpus", "Verdict", "firm_service_from_settings",
]


class FederatedSearchOnFirstUse:
    """The process's one FederatedSearch (HTTP API, MCP), built on the first question beside its RetrievalService:
    the service is the firm's corpus (searched as each caller) and lends its embedder, so the model loads once."""

    def __init__(self, service: Any) -> None:  # builds (or returns) the RetrievalService
        self._service = service
        self._search: FederatedSearch | None = None

    def __call__(self) -> FederatedSearch:
        if self._search is None:
            firm = self._service()
            self._search = FederatedSearch.from_settings(firm.settings, firm_service=firm, embedder=firm.embedder)
        return self._search
