"""Choose the search's `match` threshold (issue 39) on one half of bench/data/match_queries.json, report both.

For each query the level of its best semantic hit on the federation's calibrated scale
(ki_query.federation.ranking.Calibration: 0 is an unrelated question's best hit, 1 an identical
text): over the firm's index for the demo queries (searched as --as, who sees both clients), over
the statutes corpus (`ki ask --corpus statutes`) for the statute ones. The threshold STRONG_FROM
is the middle of the widest gap that separates the calibration half's on-topic levels from its
off-topic ones (or, without a clean gap, the level with the fewest errors); NONE_BELOW is half of
it, as the federation's weak level is half its found level. Then both halves are scored with the
chosen values: off-topic "none"/"weak" and on-topic "strong" shares.

    KI_STATE_DIR=<a demo store with the statutes corpus loaded> \\
        .venv/bin/python bench/match_threshold.py [--as anna.berg] [--queries bench/data/match_queries.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from ki_core.config import load_settings
from ki_core.search.types import Leg, MultiSearchRequest
from ki_query.federation.ranking import LOOKUP_KINDS, calibration_for
from ki_query.retrieval import RANKED_LEG_DEPTH, retrieval_service_from_settings

QUERIES = Path(__file__).parent / "data" / "match_queries.json"


def firm_level(service, principal: str, query: str) -> float:
    """The calibrated level of the best semantic hit in the caller's scope (what match_level reads)."""
    scope = service.access.compile_scope([principal]).filter
    vector = tuple(float(x) for x in service.embedder.embed_query(query))
    result = service.index.multi_search(
        MultiSearchRequest(query_text=query, query_vector=vector, scope=scope, size=RANKED_LEG_DEPTH)
    )
    semantic = result.hits(Leg.SEMANTIC)
    if not len(semantic):
        return 0.0
    cosine = getattr(service.index, "cosine", lambda score: score)(float(semantic.scores[0]))
    return calibration_for(service.embedder.signature).level(cosine)


def statutes_level(query: str, principal: str) -> float:
    done = subprocess.run(
        [sys.executable, "-m", "ki.cli", "ask", query, "--as", principal, "--corpus", "statutes", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    hits = json.loads(done.stdout)["hits"]
    levels = [h["rank_score"] or 0.0 for h in hits if not LOOKUP_KINDS.intersection(h["retrieval_kinds"])]
    return max(levels, default=0.0)


def choose(levels: list[tuple[float, str]]) -> float:
    """STRONG_FROM: the middle of the gap between off-topic and on-topic levels, fewest errors first."""
    candidates = sorted({level for level, _ in levels})
    cuts = [(a + b) / 2 for a, b in zip(candidates, candidates[1:], strict=False)] or [0.25]

    def errors(cut: float) -> int:
        return sum((level >= cut) != (kind == "on") for level, kind in levels)

    return min(cuts, key=lambda cut: (errors(cut), -_gap(levels, cut)))


def _gap(levels: list[tuple[float, str]], cut: float) -> float:
    above = [level for level, _ in levels if level >= cut]
    below = [level for level, _ in levels if level < cut]
    return (min(above, default=1.0) - max(below, default=0.0))


def verdict(level: float, strong_from: float) -> str:
    if level < strong_from / 2:
        return "none"
    return "weak" if level < strong_from else "strong"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--as", dest="principal", default="anna.berg")
    parser.add_argument("--queries", type=Path, default=QUERIES)
    args = parser.parse_args(argv)
    rows = json.loads(args.queries.read_text(encoding="utf-8"))["queries"]
    service = retrieval_service_from_settings(load_settings())
    try:
        for row in rows:
            level = (firm_level(service, args.principal, row["q"]) if row["corpus"] == "demo"
                     else statutes_level(row["q"], args.principal))  # fmt: skip
            row["level"] = round(level, 4)
            print(f"{row['half']:<9} {row['kind']:<3} {row['corpus']:<8} {level:5.3f}  {row['q']}", flush=True)
    finally:
        service.close()
    strong_from = choose([(r["level"], r["kind"]) for r in rows if r["half"] == "calibrate"])
    print(f"\nchosen on the calibrate half: STRONG_FROM = {strong_from:.3f}, NONE_BELOW = {strong_from / 2:.3f} "
          f"(embedder {service.embedder.signature})")
    for half in ("calibrate", "report"):
        off = [verdict(r["level"], strong_from) for r in rows if r["half"] == half and r["kind"] == "off"]
        on = [verdict(r["level"], strong_from) for r in rows if r["half"] == half and r["kind"] == "on"]
        off_ok = sum(v in ("none", "weak") for v in off)
        on_ok = sum(v == "strong" for v in on)
        print(f"{half:<9}: off-topic none/weak {off_ok}/{len(off)} ({100 * off_ok / len(off):.0f} %), "
              f"on-topic strong {on_ok}/{len(on)} ({100 * on_ok / len(on):.0f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
