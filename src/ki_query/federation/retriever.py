"""One retriever over several corpora (spec/federation.md).

Callers talk to `FederatedRetriever.query()` exactly as to a single corpus retriever
and read the same plain hit dicts. Three mechanisms keep a small corpus from losing
the similarity contest against a large one, all supplied from outside: a per-corpus
quota, mandatory fetches (anchors) and reference following (Verweise).

A provider or a corpus that fails never breaks retrieval: the step it feeds is skipped
with one warning line naming the exception type and message, and a note in the
selection explanation. Providers may answer with plain dicts (the spec's address shape):
their answers are read into the typed form at this boundary, entry by entry.

Amended (spec/amendments.md 5): the firm's own index is never dropped by the corpus
cap, and a corpus that cannot answer now (another embedder, no index) takes no slot.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Protocol, TypeVar

from pydantic import Field, TypeAdapter, ValidationError, field_validator
from pydantic.dataclasses import dataclass as typed_dataclass

from ki_query.federation.errors import check_question
from ki_query.federation.ranking import (
    FOUND,
    NOTHING_RELEVANT,
    UNKNOWN,
    WEAK,
    Hit,
    combined_verdict,
    corpus_verdict,
    fuse,
    hit_rank,
    named_corpus_first,
    quota_cut,
    weighed,
)

log = logging.getLogger(__name__)

DEFAULT_TOP_K = 8
# spec/federation.md, corpus quota: "No limit (None or <= 0): return all hits." All fused hits, but
# bounded: asked for everything from many corpora at a large top_k, a caller (an answer composer
# filling an LLM context) would get thousands of chunks of up to 1,200 characters each. 500 holds
# the largest ordinary request whole: max_corpora_per_query (4) plus the firm's index at the
# surfaces' largest top_k (100), so the cap bites only past that.
ALL_HITS_CAP = 500
ANCHOR_MAX_CHUNKS = 2
VERWEIS_MAX_CHUNKS = 1
# Deliberately mid-scale: measured on chain cases, 0.97 cost ten points of chain coverage
# because a cited norm ranked high REPLACES a found one within a fixed result budget.
# A cited norm enters at this fraction of the best fused hit's level: half-way between an unrelated
# text and the best one found, which is the literal 0.50 where the best hit is identical (1.0).
# A fixed 0.50 sat above nearly every found hit on e5's scale (where an answer's level is 0.3-0.6)
# and cost 0.005-0.015 nDCG@10 on the own sets without winning a query (issue 44).
VERWEIS_SCORE = 0.50
ANCHOR_KINDS = ("norm_anchor", "section_lookup")
VERWEIS_KINDS = ("verweis",)
# The keywords a retriever that rejected our call is retried with (spec step 1).
BASIC_QUERY_KEYWORDS = ("top_k", "where", "fetch_k")
NO_FINDINGS_REASON = "the broad control retrieval found no robust hits in any corpus"
NOTHING_CHECKED_REASON = "no corpus could be checked (none selected, or none has a negative check), so nothing is known"
CHECK_FAILED_REASON = "its check failed, so nothing is known of it"
NOT_ROUTED = "not routed: the question names other corpora"

T = TypeVar("T")


@typed_dataclass(frozen=True)
class Address:
    """A norm by metadata: corpus, container (law or contract), section, subsection."""

    corpus_id: str
    section_id: str
    container_id: str | None = None
    subsection: str | None = None
    max_chunks: Annotated[int, Field(ge=1)] | None = None

    @field_validator("subsection", mode="before")
    @classmethod
    def _plain_subsection(cls, value: object) -> object:
        """'' is no subsection; an Absatz given as a number (2) is the string '2'."""
        if value == "":
            return None
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    def describe(self) -> str:
        parts = [self.container_id, self.section_id, f"Abs. {self.subsection}" if self.subsection else None]
        return f"{self.corpus_id}: " + " ".join(p for p in parts if p)


# How provider answers are read at the boundary: an Address or a dict of its fields; a corpus id.
ADDRESS: TypeAdapter[Address] = TypeAdapter(Address)
CORPUS_ID: TypeAdapter[str] = TypeAdapter(str)

Router = Callable[[str, list[str]], Sequence[str]]
AnchorProvider = Callable[[str], Sequence[Address | Mapping[str, Any]]]
VerweisProvider = Callable[[list[Hit], list[str]], Sequence[Address | Mapping[str, Any]]]
NamedCorpora = Callable[[str, list[str]], Sequence[str]]
CorpusWeights = Callable[[str, list[str]], Mapping[str, float]]


class CorpusRegistryLike(Protocol):
    """What the federation needs of a registry (ki_query.federation.registry.CorpusRegistry is one).

    Two more methods are read when a registry has them: `cannot_answer(corpus_id) -> str | None`
    (why a corpus cannot answer now; it is then not selected) and `always_selected() -> list[str]`
    (corpora asked for every question outside the corpus cap: the firm's index).
    """

    def available(self) -> list[str]: ...

    def spec(self, corpus_id: str) -> Any: ...

    def retriever(self, corpus_id: str) -> Any: ...

    def diagnostics(self) -> dict[str, Any]: ...

    def assert_consistent_embedding(self) -> str | None: ...


@dataclass(frozen=True)
class Selection:
    """available: registered and able to answer now; left_out: corpus -> why it is not queried."""

    available: list[str]
    routed: list[str]
    required: list[str]
    selected: list[str]
    anchor_targets: list[Address]
    always_selected: list[str] = field(default_factory=list)
    left_out: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CandidateCut:
    """How a query's fused candidates were cut: the cap, the limit asked (None: none), how many
    candidates there were and how many were returned. A caller that asked for everything (or for
    more than the cap) and got `cap` of more candidates must be told: cut_at_cap."""

    cap: int
    limit: int | None
    candidates: int
    returned: int

    @staticmethod
    def effective(limit: int | None) -> int:
        return ALL_HITS_CAP if limit is None else min(limit, ALL_HITS_CAP)

    @property
    def cut_at_cap(self) -> bool:
        return (self.limit is None or self.limit > self.cap) and self.candidates > self.cap

    def describe(self) -> str:
        asked = "no limit given" if self.limit is None else f"limit {self.limit} is above the cap"
        return f"{asked}: {self.candidates} fused candidates cut at the candidate cap {self.cap}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cut_at_cap": self.cut_at_cap}


@dataclass
class Trace:
    """One query's selection, how its candidates were cut and the steps it skipped, for explain_selection()."""

    question: str
    selection: Selection | None = None
    skipped: list[str] = field(default_factory=list)
    candidates: CandidateCut | None = None
    corpus_weights: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        assert self.selection is not None
        cut = {"candidates": self.candidates.as_dict()} if self.candidates is not None else {}
        weights = {"corpus_weights": dict(self.corpus_weights)} if self.corpus_weights else {}
        return {**self.selection.as_dict(), "skipped": list(self.skipped), **cut, **weights}


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


def listed(answer: object, what: str) -> list[Any]:
    """A provider's or retriever's answer as a list; TypeError when it is no list at all."""
    if answer is None:
        return []
    if isinstance(answer, (str, bytes, Mapping)) or not isinstance(answer, Iterable):
        raise TypeError(f"expected a list of {what}, got {type(answer).__name__}")
    return list(answer)


def typed_entries(answer: object, adapter: TypeAdapter[T], what: str) -> tuple[list[T], list[str]]:
    """The answer's entries in the typed form, and a one-line problem for each entry that is not one."""
    entries: list[T] = []
    problems: list[str] = []
    for position, entry in enumerate(listed(answer, what)):
        try:
            entries.append(adapter.validate_python(entry))
        except ValidationError as exc:
            reasons = "; ".join(f"{'.'.join(map(str, e['loc'])) or what}: {e['msg']}" for e in exc.errors())
            problems.append(f"entry {position} ({type(entry).__name__}): {reasons}")
    return entries, problems


def tag_hits(hits: object, corpus_id: str) -> list[Hit]:
    """Copies tagged with corpus_id (and metadata.corpus_id where unset); TypeError on garbage."""
    tagged = []
    for position, hit in enumerate(listed(hits, "hit dicts")):
        metadata = hit.get("metadata") if isinstance(hit, Mapping) else None
        if not isinstance(hit, Mapping) or not isinstance(metadata or {}, Mapping):
            raise TypeError(f"hit {position} is not a hit dict with a metadata mapping: {type(hit).__name__}")
        metadata = dict(metadata or {})
        metadata.setdefault("corpus_id", corpus_id)
        kinds = list(hit.get("retrieval_kinds") or ())
        tagged.append({**hit, "metadata": metadata, "retrieval_kinds": kinds, "corpus_id": corpus_id})
    return tagged


def verweis_level(fused: Sequence[Hit]) -> float:
    """Where a cited norm enters: VERWEIS_SCORE times the best fused hit's level (0.50 below an identical text)."""
    return VERWEIS_SCORE * min(1.0, max(0.0, hit_rank(fused[0]))) if fused else VERWEIS_SCORE


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
        scale: Callable[[list[Hit]], list[Hit]] | None = None,
        quota_floor: float = 0.0,
        corpus_weights: CorpusWeights | None = None,
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
        # Puts each corpus's hits on one scale before fusion (ranking.Calibration); None: already on one.
        self.scale = scale
        # The level a corpus's best hit must reach, beside min_ratio, to be rescued by the quota.
        self.quota_floor = quota_floor
        # question, selected corpora -> weight of each corpus's levels (corpus_prior.CorpusPrior); unnamed: 1.0.
        self.corpus_weights = corpus_weights
        # Per thread: one instance may serve concurrent requests.
        self._traces = threading.local()
        self._warn_if_scores_incomparable()

    def _warn_if_scores_incomparable(self) -> None:
        """A ranking problem, not an outage: log it and keep serving."""
        try:
            warning = self.registry.assert_consistent_embedding()
        except Exception as exc:  # noqa: BLE001 - start-up must not fail on a diagnostic
            self._skip("embedding consistency check", exc)
            return
        if warning:
            log.warning("federation: %s", warning)

    # ------------------------------------------------------------ warnings and the trace

    def _note(self, message: str) -> None:
        """One warning line, also kept for the explanation of the query under way."""
        log.warning("federation: %s", message)
        trace = getattr(self._traces, "current", None)
        if trace is not None:
            trace.skipped.append(message)

    def _skip(self, step: str, exc: BaseException) -> None:
        self._note(f"{step} skipped: {type(exc).__name__}: {exc}")

    @contextmanager
    def _tracing(self, question: str) -> Iterator[Trace]:
        trace, outer = Trace(question), getattr(self._traces, "current", None)
        self._traces.current = trace
        try:
            yield trace
        finally:
            self._traces.current = outer
            self._traces.last = trace

    def _provider(self, step: str, call: Callable[[], object], adapter: TypeAdapter[T], what: str) -> list[T]:
        """A provider's answer in the typed form: a raise or a non-list skips the step, a bad entry itself."""
        try:
            entries, problems = typed_entries(call(), adapter, what)
        except Exception as exc:  # noqa: BLE001 - spec: a provider error skips its step
            self._skip(step, exc)
            return []
        if problems:
            self._note(f"{step}: {len(problems)} unreadable {what} skipped: {' | '.join(problems)}")
        return entries

    # ------------------------------------------------------------ selection

    def explain_selection(self, question: str) -> dict[str, Any]:
        """After query() of the same question in this thread: that query's selection and skipped steps."""
        last = getattr(self._traces, "last", None)
        if last is not None and last.question == question and last.selection is not None:
            return last.as_dict()
        with self._tracing(question) as trace:
            trace.selection = self.select(question)
        return trace.as_dict()

    def select(self, question: str) -> Selection:
        registered = self._registered()
        left_out = self._unanswerable(registered)
        available = [c for c in registered if c not in left_out]
        if not available:
            return Selection([], [], [], [], [], left_out=left_out)
        always = [c for c in self._always_selected() if c in available]
        routed = self._routed(question, available)
        targets = self._anchor_targets(question)
        required = list(dict.fromkeys(a.corpus_id for a in targets if a.corpus_id in available))
        capped = [c for c in dict.fromkeys(required + routed) if c not in always]
        cap = max(self.max_corpora_per_query, len([c for c in required if c not in always]))
        selected = capped[:cap] + always
        over_cap = f"over the corpus cap (max_corpora_per_query {self.max_corpora_per_query})"
        left_out |= {c: over_cap for c in capped[cap:]}
        left_out |= {c: NOT_ROUTED for c in available if c not in selected and c not in left_out}
        return Selection(available, routed, required, selected, targets, always, left_out)

    def _registered(self) -> list[str]:
        try:
            return list(self.registry.available())
        except Exception as exc:  # noqa: BLE001 - no corpus is an empty result, not an error
            self._skip("corpus registry", exc)
            return []

    def _unanswerable(self, corpus_ids: list[str]) -> dict[str, str]:
        """corpus -> why it cannot answer now (another embedder, no index); such a corpus takes no slot."""
        check = getattr(self.registry, "cannot_answer", None)
        reasons: dict[str, str] = {}
        for corpus_id in corpus_ids if check is not None else ():
            try:
                reason = check(corpus_id)
            except Exception as exc:  # noqa: BLE001 - a corpus that cannot be checked cannot answer either
                self._skip(f"answerability check of {corpus_id}", exc)
                reason = f"cannot be checked: {type(exc).__name__}: {exc}"
            if reason:
                reasons[corpus_id] = str(reason)
        return reasons

    def _always_selected(self) -> list[str]:
        always = getattr(self.registry, "always_selected", None)
        if always is None:
            return []
        return self._provider("always-selected corpora", always, CORPUS_ID, "corpus ids")

    def _routed(self, question: str, available: list[str]) -> list[str]:
        if self.router is None:
            return list(available)
        answer = self._provider("router", lambda: self.router(question, list(available)), CORPUS_ID, "corpus ids")
        routed = [c for c in dict.fromkeys(answer) if c in available]
        return routed or list(available)

    def _anchor_targets(self, question: str) -> list[Address]:
        if self.anchors is None:
            return []
        return self._provider("anchor provider", lambda: self.anchors(question), ADDRESS, "addresses")

    # ---------------------------------------------------------------- query

    def query(self, question: str, **kwargs: Any) -> list[Hit]:
        check_question(question)
        with self._tracing(question) as trace:
            selection = trace.selection = self.select(question)
            if not selection.selected:
                return []
            hits: list[Hit] = []
            weights = trace.corpus_weights = self._weights(question, selection.selected)
            for corpus_id in selection.selected:
                hits += weighed(self._query_corpus(corpus_id, question, kwargs), weights.get(corpus_id, 1.0))
            for address in selection.anchor_targets:
                if address.corpus_id in selection.selected:
                    hits += self._fetch_anchor(address)
            fused = self._follow_references(fuse(hits), selection.selected)
            asked = self._asked_limit(kwargs)
            cut = quota_cut(
                fused, CandidateCut.effective(asked), min_per_corpus=self.min_hits_per_corpus,
                min_ratio=self.min_ratio, floor=self.quota_floor,
            )
            trace.candidates = CandidateCut(ALL_HITS_CAP, asked, len(fused), len(cut))
            if trace.candidates.cut_at_cap:
                self._note(trace.candidates.describe())
            return self._named_corpus_first(question, cut, selection.selected)

    def _asked_limit(self, kwargs: Mapping[str, Any]) -> int | None:
        """max_final_results, else top_k; None when none is given (or it is <= 0): all fused hits."""
        given = (kwargs.get("max_final_results"), self.max_final_results, kwargs.get("top_k"))
        limit = next((value for value in given if value is not None), None)
        return None if limit is None or limit <= 0 else limit

    def _weights(self, question: str, selected: list[str]) -> dict[str, float]:
        """Each corpus's weight for this question; a provider that fails or answers garbage weighs none."""
        if self.corpus_weights is None or len(selected) < 2:
            return {}
        try:
            answer = dict(self.corpus_weights(question, list(selected)))
            return {str(c): min(1.0, max(0.0, float(w))) for c, w in answer.items() if c in selected}
        except Exception as exc:  # noqa: BLE001 - spec: a provider error skips its step
            self._skip("corpus weights", exc)
            return {}

    def _query_corpus(self, corpus_id: str, question: str, kwargs: Mapping[str, Any]) -> list[Hit]:
        try:
            retriever = self.registry.retriever(corpus_id)
            call_kwargs = self._kwargs_for(corpus_id, kwargs)
            hits = tag_hits(self._call_query(retriever, question, call_kwargs), corpus_id)
            return self.scale(hits) if self.scale is not None else hits
        except Exception as exc:  # noqa: BLE001 - one failing corpus must not silence the others
            self._skip(f"corpus {corpus_id}", exc)
            return []

    def _kwargs_for(self, corpus_id: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """A where filter on container_id reaches only the corpus whose default container it is."""
        call = dict(kwargs)
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
            self._note(
                f"norm anchor matched nothing: corpus {address.corpus_id}, container {address.container_id}, "
                f"section {address.section_id}"
            )
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
            self._skip(f"{step} {address.describe()}", exc)
            return None

    def _follow_references(self, fused: list[Hit], selected: list[str]) -> list[Hit]:
        """Fetch the norms the best hits cite, half-way below the best hit (verweis_level), and fuse again."""
        if self.verweise is None or self.max_verweis_normen <= 0 or not fused:
            return fused
        targets = self._provider(
            "reference following (verweise provider)", lambda: self.verweise(list(fused), list(selected)),
            ADDRESS, "addresses",
        )  # fmt: skip
        fetched: list[Hit] = []
        level = verweis_level(fused)
        for address in list(dict.fromkeys(targets))[: self.max_verweis_normen]:
            if address.corpus_id not in selected:
                continue
            container = address.container_id or self._safe_default_container(address.corpus_id)
            units = self._get_units(address, container, VERWEIS_MAX_CHUNKS, step="reference")
            fetched += [
                {**hit, "score": level, "rank_score": level, "retrieval_kinds": list(VERWEIS_KINDS)}
                for hit in units or ()
            ]
        return fuse([*fused, *fetched]) if fetched else fused

    def _safe_default_container(self, corpus_id: str) -> str | None:
        try:
            return self._default_container(corpus_id)
        except Exception as exc:  # noqa: BLE001
            self._skip(f"default container of {corpus_id}", exc)
            return None

    # ----------------------------------------------------------- named first

    def _named_corpus_first(self, question: str, hits: list[Hit], queried: list[str]) -> list[Hit]:
        if self.named_corpora is None or len(hits) < 2:
            return hits
        named = self._provider(
            "named corpus first", lambda: self.named_corpora(question, list(queried)), CORPUS_ID, "corpus ids"
        )
        return named_corpus_first(hits, named, queried)

    # ------------------------------------------------ negative verification

    def verify_negative_result(self, question: str, **kwargs: Any) -> dict[str, Any]:
        """Is it safe to answer that the corpora say nothing about this?

        verdict: found / weak / nothing relevant (ranking.combined_verdict), or unknown when a
        corpus's check failed and nothing was found elsewhere: then it is never safe.
        """
        check_question(question)
        checked: list[str] = []
        failed: list[str] = []
        statuses: list[str] = []
        findings: list[tuple[str, str, str]] = []  # (corpus, its verdict, its reason) where found or weak
        results: list[Hit] = []
        with self._tracing(question) as trace:
            trace.selection = self.select(question)
            for corpus_id in trace.selection.selected:
                verdict = self._verify_corpus(corpus_id, question, kwargs)
                if verdict is None:
                    continue
                status = corpus_verdict(verdict)
                if status == UNKNOWN:
                    failed.append(corpus_id)
                    continue
                checked.append(corpus_id)
                statuses.append(status)
                results += verdict["results"]
                if status != NOTHING_RELEVANT:
                    findings.append((corpus_id, status, str(verdict.get("reason") or status)))
        status = combined_verdict(statuses, any_failed=bool(failed))
        return {
            "safe_to_answer_negative": status == NOTHING_RELEVANT,
            "verdict": status,
            "reason": verdict_reason(status, findings, failed),
            "results": fuse(results),
            "strong_result_count": len(findings),
            "corpora_checked": checked,
            "corpora_with_findings": [c for c, _, _ in findings],
            "corpora_failed": failed,
        }

    def _verify_corpus(self, corpus_id: str, question: str, kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
        """The corpus's verdict with its results tagged; None when it has no check, unknown when it failed."""
        try:
            verify = getattr(self.registry.retriever(corpus_id), "verify_negative_result", None)
            if verify is None:
                return None
            try:
                verdict = verify(question, **kwargs)
            except TypeError:
                verdict = verify(question)
            if not isinstance(verdict, Mapping):
                raise TypeError(f"expected a verdict mapping, got {type(verdict).__name__}")
            return {**verdict, "results": tag_hits(verdict.get("results"), corpus_id)}
        except Exception as exc:  # noqa: BLE001
            self._skip(f"negative-result check of {corpus_id}", exc)
            return {"verdict": UNKNOWN, "safe_to_answer_negative": False, "results": []}

    # ---------------------------------------------------------- diagnostics

    def diagnostics(self) -> dict[str, Any]:
        try:
            data = dict(self.registry.diagnostics())
        except Exception as exc:  # noqa: BLE001
            self._skip("registry diagnostics", exc)
            data = {"error": f"{type(exc).__name__}: {exc}"}
        data.update(
            federated=True,
            router=provider_name(self.router) or "all corpora",
            min_hits_per_corpus=self.min_hits_per_corpus,
            anchors_configured=self.anchors is not None,
            corpus_weights=provider_name(self.corpus_weights),
        )
        return data


def verdict_reason(status: str, findings: Sequence[tuple[str, str, str]], failed: Sequence[str]) -> str:
    """The reason of a federated verdict, in the spec's form "corpus: reason" joined by " | ", and never
    against the verdict: found leads with the corpora that found, weak names only weak corpora,
    unknown names the corpora that failed (or says that none was checked), nothing relevant says so."""
    if status == NOTHING_RELEVANT:
        return NO_FINDINGS_REASON
    order = {FOUND: 0, WEAK: 1}
    listed = [f"{c}: {r}" for c, _, r in sorted(findings, key=lambda f: order.get(f[1], 2))]
    if status == UNKNOWN:
        listed = [f"{c}: {CHECK_FAILED_REASON}" for c in failed] + listed
        return " | ".join(listed) if failed else " | ".join([NOTHING_CHECKED_REASON, *listed])
    return " | ".join(listed + [f"{c}: {CHECK_FAILED_REASON}" for c in failed])


def _with_kinds(hit: Hit, kinds: Iterable[str]) -> list[str]:
    held = list(hit.get("retrieval_kinds") or ())
    return held + [k for k in kinds if k not in held]
