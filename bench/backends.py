"""The --backend option of bench/query.py and bench/index.py, and a throwaway OpenSearch index for them.

An OpenSearch run gets its own alias `ki-bench-<random>` (number_of_replicas 0, one shard), opened through
`open_index` from Settings with search.backend "opensearch", and deletes its index at the end, also on an
error, Ctrl-C or SIGTERM. For the bulk figure the bench sets the index's refresh_interval to -1 during the
load and refreshes once after (`bulk_loading`); that is the bench's choice, the product leaves the node's
default (1 s). Nothing here changes src/.
"""

from __future__ import annotations

import argparse
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ki_core.config import Settings
from ki_core.search.index import open_index
from ki_core.search.opensearch import ACCESS_SUFFIX, OpenSearchIndex, signature_index_name

CHOICES = ("embedded", "opensearch", "both")
DEFAULT_OPENSEARCH_URL = "http://127.0.0.1:9200"
# Client timeout: a 500-item _bulk with 384-dim vectors can take a few seconds on a busy 2-core node;
# the product's 10 s default plus retry_on_timeout would resend it and count the chunks twice.
BENCH_TIMEOUT_SECONDS = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=CHOICES, default="embedded",
                        help="search backend(s) to measure; 'both' loads the same data into each")
    parser.add_argument("--opensearch-url", default=DEFAULT_OPENSEARCH_URL,
                        help="OpenSearch node for --backend opensearch|both (security off)")


def selected(args: argparse.Namespace) -> tuple[str, ...]:
    return ("embedded", "opensearch") if args.backend == "both" else (args.backend,)


def terminate_like_ctrl_c() -> None:
    """SIGTERM raises KeyboardInterrupt, so the finally blocks that delete the bench's indices run."""

    def handler(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def opensearch_settings(url: str, dims: int, alias: str) -> Settings:
    """Settings as KI_SEARCH__BACKEND=opensearch would give them, with the bench's alias and the hashing
    embedder's dimension (the bench's vectors), one shard and no replica."""
    return Settings(
        search={
            "backend": "opensearch",
            "opensearch": {"hosts": [url], "number_of_replicas": 0, "number_of_shards": 1,
                           "timeout_seconds": BENCH_TIMEOUT_SECONDS, "query_timeout_seconds": BENCH_TIMEOUT_SECONDS},
        },
        retrieval={"index_name": alias},
        embedding={"provider": "hashing", "model": "bench", "dimensions": dims},
    )


class BenchOpenSearch:
    """An OpenSearchIndex behind a fresh alias; `close()` deletes what it created."""

    def __init__(self, url: str, dims: int) -> None:
        self.alias = f"ki-bench-{uuid.uuid4().hex[:10]}"
        self.settings = opensearch_settings(url, dims, self.alias)
        index = open_index(self.settings)
        assert isinstance(index, OpenSearchIndex)
        self.index: OpenSearchIndex = index
        self.client = index.client
        self.concrete = signature_index_name(self.alias, index.signature)
        self._closed = False

    def ensure(self) -> None:
        self.index.ensure()

    @contextmanager
    def bulk_loading(self) -> Iterator[dict[str, float]]:
        """refresh_interval -1 inside; on leaving, the default again and one refresh (its ms in the dict)."""
        timing: dict[str, float] = {}
        self.client.indices.put_settings(index=self.alias, body={"index": {"refresh_interval": "-1"}})
        try:
            yield timing
        finally:
            self.client.indices.put_settings(index=self.alias, body={"index": {"refresh_interval": None}})
            started = time.perf_counter()
            self.index.refresh()
            timing["refresh_ms"] = (time.perf_counter() - started) * 1000

    def wait_for_merges(self, limit_seconds: float = 300.0) -> float:
        """Seconds until no merge runs (background merges after the load would land in the latencies)."""
        started = time.perf_counter()
        while time.perf_counter() - started < limit_seconds:
            stats = self.client.indices.stats(index=self.alias, metric="merge")
            if stats["_all"]["primaries"]["merges"]["current"] == 0:
                break
            time.sleep(1.0)
        return time.perf_counter() - started

    def stats(self) -> dict[str, int]:
        primaries = self.client.indices.stats(index=self.alias, metric="store,segments,docs")["_all"]["primaries"]
        return {"store_bytes": primaries["store"]["size_in_bytes"], "segments": primaries["segments"]["count"],
                "docs": primaries["docs"]["count"]}

    def clear_caches(self) -> None:
        """Node query (filter bitset) and request caches of the bench's index."""
        self.client.indices.clear_cache(index=self.alias, params={"query": "true", "request": "true"})

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            names = set(self.index.alias_targets()) | {self.concrete}
            names |= {name + ACCESS_SUFFIX for name in names}  # the projection index beside each
            self.client.indices.delete(index=",".join(sorted(names)), params={"ignore_unavailable": "true"})
            print(f"deleted OpenSearch index {', '.join(sorted(names))} (alias {self.alias})", flush=True)
        finally:
            self.index.close()
