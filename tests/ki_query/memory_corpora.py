"""Small real corpora for the federation tests: statute excerpts held in memory.

`MemoryRetriever` scores by the share of the question's words (>= 4 letters) found in a
chunk, so the tests read like the spec and need no index. The variants differ only in
the `query` signature or behaviour the federation must cope with.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from ki_core.identifiers import normalize_law

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "statutes-excerpt.jsonl"
_WORD = re.compile(r"\w{4,}")


def fixture_records(*laws: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines() if line]
    return [r for r in rows if not laws or normalize_law(r["law"]) in laws]


def words(text: str) -> set[str]:
    return {w.casefold() for w in _WORD.findall(text)}


def record_hit(record: dict[str, Any], *, score: float, kinds: list[str], with_hash: bool = True) -> dict[str, Any]:
    container = normalize_law(record["law"])
    metadata = {
        "container_id": container,
        "section_id": record["section"],
        "subsection": record["subsection"],
        "chunk_index_in_section": 0,
        "record_id": record["id"],
    }
    if with_hash:
        metadata["text_hash"] = hashlib.sha256(record["text"].encode()).hexdigest()
    return {"text": record["text"], "score": score, "metadata": metadata, "retrieval_kinds": kinds}


class MemoryRetriever:
    """query / get_units / verify_negative_result over fixture records."""

    def __init__(self, records: list[dict[str, Any]], *, scale: float = 1.0, negative_threshold: float = 0.5):
        self.records = records
        self.scale = scale
        self.negative_threshold = negative_threshold
        self.calls: list[dict[str, Any]] = []

    def query(self, question: str, top_k: int = 8, where: dict | None = None, fetch_k: int | None = None) -> list[dict]:
        self.calls.append({"top_k": top_k, "where": where, "fetch_k": fetch_k})
        return self._ranked(question, top_k, where)

    def _ranked(self, question: str, top_k: int, where: dict | None = None) -> list[dict]:
        asked = words(question)
        scored = []
        for record in self.records:
            if where and where.get("container_id") not in (None, normalize_law(record["law"])):
                continue
            overlap = len(asked & words(record["text"])) / max(1, len(asked))
            if overlap > 0:
                scored.append(record_hit(record, score=round(overlap * self.scale, 6), kinds=["lexical"]))
        scored.sort(key=lambda h: h["score"], reverse=True)
        return scored[:top_k]

    def get_units(self, section_id: str, container: str | None = None, subsection: str | None = None, max_chunks: int = 3):
        found = [
            r for r in self.records
            if r["section"] == section_id
            and (container is None or normalize_law(r["law"]) == container)
            and (subsection is None or r["subsection"] == subsection)
        ]
        return [record_hit(r, score=1.0, kinds=["section_lookup"]) for r in found[:max_chunks]]

    def verify_negative_result(self, question: str) -> dict[str, Any]:
        strong = [h for h in self._ranked(question, 20) if h["score"] >= self.negative_threshold]
        return {
            "safe_to_answer_negative": not strong,
            "reason": f"{len(strong)} hits above {self.negative_threshold}" if strong else "nothing robust",
            "results": strong,
        }


class KeywordOnlyRetriever(MemoryRetriever):
    """Declares only top_k: the federation must not pass anything else."""

    def query(self, question: str, top_k: int = 8) -> list[dict]:  # type: ignore[override]
        self.calls.append({"top_k": top_k})
        return self._ranked(question, top_k)


class KwargsRetriever(MemoryRetriever):
    """Takes **kwargs: receives every keyword the caller gave."""

    def query(self, question: str, **kwargs: Any) -> list[dict]:  # type: ignore[override]
        self.calls.append(dict(kwargs))
        return self._ranked(question, kwargs.get("top_k", 8), kwargs.get("where"))


class BasicKeywordsRetriever(MemoryRetriever):
    """Says **kwargs but rejects everything beyond top_k, where, fetch_k (first TypeError fallback)."""

    def query(self, question: str, **kwargs: Any) -> list[dict]:  # type: ignore[override]
        extra = set(kwargs) - {"top_k", "where", "fetch_k"}
        if extra:
            raise TypeError(f"query() got unexpected keyword arguments {sorted(extra)}")
        self.calls.append(dict(kwargs))
        return self._ranked(question, kwargs.get("top_k", 8), kwargs.get("where"))


class TopKOnlyRetriever(MemoryRetriever):
    """Rejects everything but top_k at call time (second TypeError fallback)."""

    def query(self, question: str, **kwargs: Any) -> list[dict]:  # type: ignore[override]
        if set(kwargs) != {"top_k"}:
            raise TypeError(f"query() takes only top_k, got {sorted(kwargs)}")
        self.calls.append(dict(kwargs))
        return self._ranked(question, kwargs["top_k"])


class BrokenRetriever(MemoryRetriever):
    def query(self, question: str, top_k: int = 8, where: dict | None = None, fetch_k: int | None = None) -> list[dict]:
        raise ConnectionError("index node unreachable")

    def get_units(self, *args: Any, **kwargs: Any) -> list[dict]:
        raise ConnectionError("index node unreachable")

    def verify_negative_result(self, question: str) -> dict[str, Any]:
        raise ConnectionError("index node unreachable")


class NoLookupRetriever:
    """A corpus without address lookups (like the firm's index)."""

    def __init__(self, records: list[dict[str, Any]]):
        self.inner = MemoryRetriever(records)

    def query(self, question: str, top_k: int = 8) -> list[dict]:
        return self.inner.query(question, top_k)


class FixedHitsRetriever:
    """Returns the given hits verbatim (for fusion and quota cases with exact scores)."""

    def __init__(self, hits: list[dict[str, Any]], units: dict[str, list[dict]] | None = None):
        self.hits = hits
        self.units = units or {}
        self.unit_calls: list[tuple] = []

    def query(self, question: str, top_k: int = 8) -> list[dict]:
        return [dict(h) for h in self.hits]

    def get_units(self, section_id: str, container: str | None = None, subsection: str | None = None, max_chunks: int = 3):
        self.unit_calls.append((section_id, container, subsection, max_chunks))
        return [dict(h) for h in self.units.get(f"{container}|{section_id}", [])][:max_chunks]


class Spec:
    def __init__(self, corpus_id: str, default_container: str | None = None, containers: tuple[str, ...] = ()):
        self.id = corpus_id
        self.default_container = default_container
        self.containers = containers
        self.title = None


class MemoryRegistry:
    """available / spec / retriever / diagnostics / assert_consistent_embedding over given retrievers."""

    def __init__(self, retrievers: dict[str, Any], *, defaults: dict[str, str] | None = None,
                 containers: dict[str, tuple[str, ...]] | None = None, warning: str | None = None):
        self.retrievers = retrievers
        self.specs = {
            c: Spec(c, (defaults or {}).get(c), (containers or {}).get(c, ())) for c in retrievers
        }
        self.warning = warning

    def available(self) -> list[str]:
        return list(self.retrievers)

    def spec(self, corpus_id: str) -> Spec:
        return self.specs[corpus_id]

    def retriever(self, corpus_id: str) -> Any:
        return self.retrievers[corpus_id]

    def diagnostics(self) -> dict[str, Any]:
        return {"corpora": list(self.retrievers)}

    def assert_consistent_embedding(self) -> str | None:
        return self.warning
