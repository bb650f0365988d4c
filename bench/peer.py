"""The side-by-side bench against LanceDB, with ki's bare index asked what the product asks.

../shared/tools/peer-bench/ki_vs_lancedb.py (read-only, outside this repository) times ki's
full search, ki's bare `multi_search` and LanceDB hybrid on the same chunks and vectors. Its
`ki_bare` asks 50 hits per leg, the depth a first page of 10 needed before amendment 2;
since then every ranked search asks RANKED_LEG_DEPTH per leg whatever the page (one ranking
for all pages), so "full / bare" compares like with like only when the bare call asks the
same. This runner sets that one constant and passes every argument through; LanceDB's side
keeps its own depths (--lance-depths, default 50 and 10).

    .venv/bin/python bench/peer.py --work /tmp/peer --peer-python /tmp/peervenv/bin/python
    (add --database-url postgresql+psycopg://... for the same cells on PostgreSQL)

The peer venv comes from ../shared/tools/peer-bench/setup.sh; LanceDB is never a dependency
of this project.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from ki_query.retrieval import RANKED_LEG_DEPTH

DEFAULT_SCRIPT = Path(__file__).resolve().parents[2] / "shared" / "tools" / "peer-bench" / "ki_vs_lancedb.py"


def peer_bench_module(path: Path):
    """The bench script as a module, so its depth constant can be set before main() runs."""
    if not path.exists():
        sys.exit(f"{path} not found: set KI_PEER_BENCH to ki_vs_lancedb.py")
    spec = importlib.util.spec_from_file_location("ki_vs_lancedb", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(module)
    return module


def main() -> int:
    module = peer_bench_module(Path(os.environ.get("KI_PEER_BENCH", DEFAULT_SCRIPT)))
    print(f"peer bench: ki_bare asks {RANKED_LEG_DEPTH} per leg (the script's default: {module.KI_DEPTH})",
          file=sys.stderr)
    module.KI_DEPTH = RANKED_LEG_DEPTH
    sys.argv[0] = str(module.__file__)
    return module.main() or 0


if __name__ == "__main__":
    raise SystemExit(main())
