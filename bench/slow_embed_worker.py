"""The access-latency bench's embed-worker: `celery worker`, with the hashing embedder slowed down.

BENCH_EMBED_SECONDS_PER_CHUNK seconds per passage stand in for e5 on a busy CPU
(DESIGN.md: ~4 chunks/s on 2 cores) without taking the CPU the other processes
need, so the bench measures queueing, not CPU contention. Started in place of
the Procfile's `celery` by bench/access_latency.py.
"""

from __future__ import annotations

import os
import sys
import time

from celery.__main__ import main

from ki_core import embedding

SECONDS_PER_CHUNK = float(os.environ.get("BENCH_EMBED_SECONDS_PER_CHUNK", "1.0"))
_embed = embedding.HashingEmbedder.embed_passages


def _slowed(self, texts):
    time.sleep(SECONDS_PER_CHUNK * len(texts))
    return _embed(self, texts)


embedding.HashingEmbedder.embed_passages = _slowed

if __name__ == "__main__":
    sys.argv[0] = "celery"
    sys.exit(main())
