"""One retriever over several corpora (spec/federation.md).

Callers talk to `FederatedRetriever.query()` exactly as to a single corpus retriever
and read the same plain hit dicts. Three mechanisms keep a small corpus from losing
the similarity contest against a large one, all supplied from outside: a per-corpus
quota, mandatory fetches (anchors) and reference following (Verweise).

A provider or a corpus that fails never breaks retrieval: the step it feeds is skipped
with one warning line naming the exception type and message.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from ki_query.federation.ranking import Hit, fuse, named_corpus_first, quota_cut

log = logging.getLogger(__name__)

DEFAULT_TOP_K = 8
ANCHOR_MAX_CHUNKS = 2
VERWEIS_MAX_CHUNKS = 1
# Deliberately mid-scale: measured on chain cases, 0.97 cost ten points of chain coverage
# because a cited norm ranked high REPLACES a found one within a fixed result budget.
VERWEIS_SCORE = 0.50
ANCHOR_KINDS = ("norm_anchor", "section_lookup")
VERWEIS_KINDS = ("verweis",)
# The keywords a retriever that rejected our call is retried with (spec step 1).
BASIC_QUERY_KEYWORDS = ("top_k", "where", "fetch_k")
NO_FINDINGS_REASON = "the broad control retrieval found no robust hits in any corpus"


@dataclass(frozen=True)
class Address:
    """A norm by metadata: corpus, container (law or contract), section, subsection."""

    corpus_id: str
    section_id: str
    container_id: str | None = None
    subsection: str | None = None
    max_chunks: int | None = None

    def describe(self) -> str:
        parts = [self.container_id, self.section_id, f"Abs. {self.subsection}" if self.subsection else None]
        return f"{self.corpus_id}: " + " ".join(p for p in parts if p)


Router = Callable[[str, list[str]], Sequence[str]]
AnchorProvider = Callable[[str], Sequence[Address]]
VerweisProvider = Callable[[list[Hit], list[str]], Sequence[Address]]
NamedCorpora = Callable[[str, list[str]], Sequence[str]]


class CorpusRegistryLike(Protocol):
    """What the federation needs of a registry (ki_query.federation.registry.CorpusRegistry is one)."""

    def available(self) -> list[str]: ...

    def spec(self, corpus_id: str) -> Any: ...

    def retriever(self, corpus_id: str) -> Any: ...

    def diagnostics(self) -> dict[str, Any]: ...

    def assert_consistent_embedding(self) -> str | None: ...


@dataclass(frozen=True)
class Selection:
    available: list[str]
    routed: list[str]
    required: list[str]
    selected: list[str]
    anchor_targets: list[Address]

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["anchor_targets"] = [asdict(a) for a in self.anchor_targets]
        return data


def provider_name(provider: object | None) -> str | None:
    if provider is None:
        return None
    return getattr(provider, "name", None) or getattr(provider, "__name__", None) or type(provider).__name__


def accepted_kwargs(function: Callable[..., Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords `function` declares, or all of them when it takes **kwargs."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return dict(kwargs)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return dict(kwargs)
    names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in kwargs.items() if k in names}


def tag_hits(hits: Iterable[Hit] | None, corpus_id: str) -> list[Hit]:
    """Copies tagged with corpus_id (and metadata.corpus_id where unset)."""
    tagged = []
    for hit in hits or ():
        metadata = dict(hit.get("metadata") or {})
        metadata.setdefault("corpus_id", corpus_id)
        kinds = list(hit.get("retrieval_kinds") or ())
        tagged.append({**hit, "metadata": metadata, "retrieval_kinds": kinds, "corpus_id": corpus_id})
    return tagged


def warn_skipped(step: str, exc: BaseException) -> None:
    log.warning("federation: %s skipped: %s: %s", step, type(exc).__name__, exc)


class FederatedRetriever:
    """Searches the selected corpora, fetches anchors and cited norms, fuses, cuts with a quota."""

    def __init__(
        self,
        registry: CorpusRegistryLike,
        *,
        router: Router | None = None,
        anchors: AnchorProvider | None = None,
        verweise: VerweisProvider | None = None,
        named_corpora: NamedCorpora | None = None,
        max_corpora_per_query: int = 4,
        min_hits_per_corpus: int = 2,
        min_ratio: float = 0.25,
        max_verweis_normen: int = 3,
        max_final_results: int | None = None,
    ):
        self.registry = registry
        self.router = router
        self.anchors = anchors
        self.verweise = verweise
        self.named_corpora = named_corpora
        self.max_corpora_per_query = max_corpora_per_query
        self.min_hits_per_corpus = min_hits_per_corpus
        self.min_ratio = min_ratio
        self.max_verweis_normen = max_verweis_normen
        self.max_final_results = max_final_results
        self._warn_if_scores_incomparable()

    def _warn_if_scores_incomparable(self) -> None:
        """A ranking problem, not an outage: log it and keep serving."""
        try:
            warning = self.registry.assert_consistent_embedding()
        except Exception as exc:  # noqa: BLE001 - start-up must not fail on a diagnostic
            warn_skipped("embedding consistency check", exc)
            return
        if warning:
            log.warning("federation: %s", warning)

    # ------------------------------------------------------------ selection

    def explain_selection(self, question: str) -> dict[str, Any]:
        return self.select(question).as_dict()

    def select(self, question: str) -> Selection:
        available = self._available()
        if not available:
            return Selection([], [], [], [], [])
        routed = self._routed(question, available)
        targets = self._anchor_targets(question)
        required = list(dict.fromkeys(a.corpus_id for a in targets if a.corpus_id in available))
        cap = max(self.max_corpora_per_query, len(required))
        selected = (required + [c for c in routed if c not in required])[:cap]
        return Selection(available, routed, required, selected, targets)

    def _available(self) -> list[str]:
        try:
            return list(self.registry.available())
        except Exception as exc:  # noqa: BLE001 - no corpus is an empty result, not an error
            warn_skipped("corpus registry", exc)
            return []

    def _routed(self, question: str, available: list[str]) -> list[str]:
        if self.router is None:
            return list(available)
        try:
            answer = list(self.router(question, list(available)))
        except Exception as exc:  # noqa: BLE001 - spec: a provider error skips its step
            warn_skipped("router", exc)
            return list(available)
        routed = [c for c in dict.fromkeys(answer) if c in available]
        return routed or list(available)

    def _anchor_targets(self, question: str) -> list[Address]:
        if self.anchors is None:
            return []
        try:
            return list(self.anchors(question))
        except Exception as exc:  # noqa: BLE001
            warn_skipped("anchor provider", exc)
            return []

    # ---------------------------------------------------------------- query

    def query(self, question: str, **kwargs: Any) -> list[Hit]:
        selection = self.select(question)
        if not selection.selected:
            return []
        hits: list[Hit] = []
        for corpus_id in selection.selected:
            hits += self._query_corpus(corpus_id, question, kwargs)
        for address in selection.anchor_targets:
            if address.corpus_id in selection.selected:
                hits += self._fetch_anchor(address)
        fused = fuse(hits)
        fused = self._follow_references(fused, selection.selected)
        limit = kwargs.get("max_final_results") or self.max_final_results or kwargs.get("top_k") or DEFAULT_TOP_K
        cut = quota_cut(fused, limit, min_per_corpus=self.min_hits_per_corpus, min_ratio=self.min_ratio)
        return self._named_corpus_first(question, cut, selection.selected)

    def _query_corpus(self, corpus_id: str, question: str, kwargs: Mapping[str, Any]) -> list[Hit]:
        try:
            retriever = self.registry.retriever(corpus_id)
            call_kwargs = self._kwargs_for(corpus_id, kwargs)
            return tag_hits(self._call_query(retriever, question, call_kwargs), corpus_id)
        except Exception as exc:  # noqa: BLE001 - one failing corpus must not silence the others
            warn_skipped(f"corpus {corpus_id}", exc)
            return []

    def _kwargs_for(self, corpus_id: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """A where filter on container_id reaches only the corpus whose default container it is."""
        call = {k: v for k, v in kwargs.items() if k != "max_final_results"}
        call.setdefault("top_k", DEFAULT_TOP_K)
        where = call.get("where")
        if isinstance(where, Mapping) and where.get("container_id") is not None:
            if where["container_id"] != self._default_container(corpus_id):
                call.pop("where")
        return call

    def _default_container(self, corpus_id: str) -> str | None:
        return getattr(self.registry.spec(corpus_id), "default_container", None)

    @staticmethod
    def _call_query(retriever: Any, question: str, call: dict[str, Any]) -> Any:
        try:
            return retriever.query(question, **accepted_kwargs(retriever.query, call))
        except TypeError:
            pass
        basic = {k: call[k] for k in BASIC_QUERY_KEYWORDS if call.get(k) is not None}
        try:
            return retriever.query(question, **basic)
        except TypeError:
            return retriever.query(question, top_k=call.get("top_k") or DEFAULT_TOP_K)

    # ------------------------------------------------------ mandatory fetches

    def _fetch_anchor(self, address: Address) -> list[Hit]:
        units = self._get_units(address, address.container_id, ANCHOR_MAX_CHUNKS, step="norm anchor")
        if units is None:
            return []
        if not units:
            log.warning(
                "federation: norm anchor matched nothing: corpus %s, container %s, section %s",
                address.corpus_id, address.container_id, address.section_id,
            )  # fmt: skip
        return [{**hit, "retrieval_kinds": _with_kinds(hit, ANCHOR_KINDS)} for hit in units]

    def _get_units(self, address: Address, container: str | None, default_max: int, *, step: str) -> list[Hit] | None:
        """Hits at the address, or None when the retriever has no get_units or the lookup failed."""
        try:
            retriever = self.registry.retriever(address.corpus_id)
            get_units = getattr(retriever, "get_units", None)
            if get_units is None:
                return None
            units = get_units(
                address.section_id,
                container=container,
                subsection=address.subsection,
                max_chunks=address.max_chunks or default_max,
            )
            return tag_hits(units, address.corpus_id)
        except Exception as exc:  # noqa: BLE001
            warn_skipped(f"{step} {address.describe()}", exc)
            return None

    def _follow_references(self, fused: list[Hit], selected: list[str]) -> list[Hit]:
        """Fetch the norms the best hits cite, at a mid score, and fuse again."""
        if self.verweise is None or self.max_verweis_normen <= 0 or not fused:
            return fused
        try:
            targets = list(self.verweise(list(fused), list(selected)))
        except Exception as exc:  # noqa: BLE001
            warn_skipped("reference following (verweise provider)", exc)
            return fused
        fetched: list[Hit] = []
        for address in list(dict.fromkeys(targets))[: self.max_verweis_normen]:
            if address.corpus_id not in selected:
                continue
            container = address.container_id or self._safe_default_container(address.corpus_id)
            units = self._get_units(address, container, VERWEIS_MAX_CHUNKS, step="reference")
            fetched += [
                {**hit, "score": VERWEIS_SCORE, "rank_score": VERWEIS_SCORE, "retrieval_kinds": list(VERWEIS_KINDS)}
                for hit in units or ()
            ]
        return fuse([*fused, *fetched]) if fetched else fused

    def _safe_default_container(self, corpus_id: str) -> str | None:
        try:
            return self._default_container(corpus_id)
        except Exception as exc:  # noqa: BLE001
            warn_skipped(f"default container of {corpus_id}", exc)
            return None

    # ----------------------------------------------------------- named first

    def _named_corpus_first(self, question: str, hits: list[Hit], queried: list[str]) -> list[Hit]:
        if self.named_corpora is None or len(hits) < 2:
            return hits
        try:
            named = list(self.named_corpora(question, list(queried)))
        except Exception as exc:  # noqa: BLE001
            warn_skipped("named corpus first", exc)
            return hits
        return named_corpus_first(hits, named, queried)

    # ------------------------------------------------ negative verification

    def verify_negative_result(self, question: str, **kwargs: Any) -> dict[str, Any]:
        """Is it safe to answer that the corpora say nothing about this?"""
        checked: list[str] = []
        blocking: list[tuple[str, str]] = []
        results: list[Hit] = []
        for corpus_id in self.select(question).selected:
            verdict = self._verify_corpus(corpus_id, question, kwargs)
            if verdict is None:
                continue
            checked.append(corpus_id)
            results += tag_hits(verdict.get("results"), corpus_id)
            if not verdict.get("safe_to_answer_negative", True):
                blocking.append((corpus_id, str(verdict.get("reason") or "robust hits found")))
        reason = " | ".join(f"{c}: {r}" for c, r in blocking) if blocking else NO_FINDINGS_REASON
        return {
            "safe_to_answer_negative": not blocking,
            "reason": reason,
            "results": fuse(results),
            "strong_result_count": len(blocking),
            "corpora_checked": checked,
            "corpora_with_findings": [c for c, _ in blocking],
        }

    def _verify_corpus(self, corpus_id: str, question: str, kwargs: Mapping[str, Any]) -> Mapping[str, Any] | None:
        try:
            verify = getattr(self.registry.retriever(corpus_id), "verify_negative_result", None)
            if verify is None:
                return None
            try:
                return verify(question, **kwargs)
            except TypeError:
                return verify(question)
        except Exception as exc:  # noqa: BLE001
            warn_skipped(f"negative-result check of {corpus_id}", exc)
            return None

    # ---------------------------------------------------------- diagnostics

    def diagnostics(self) -> dict[str, Any]:
        try:
            data = dict(self.registry.diagnostics())
        except Exception as exc:  # noqa: BLE001
            warn_skipped("registry diagnostics", exc)
            data = {"error": f"{type(exc).__name__}: {exc}"}
        data.update(
            federated=True,
            router=provider_name(self.router) or "all corpora",
            min_hits_per_corpus=self.min_hits_per_corpus,
            anchors_configured=self.anchors is not None,
        )
        return data


def _with_kinds(hit: Hit, kinds: Iterable[str]) -> list[str]:
    held = list(hit.get("retrieval_kinds") or ())
    return held + [k for k in kinds if k not in held]

