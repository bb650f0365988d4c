"""Start-up time of the `ki` command line: best-of-N wall clock of a few cheap invocations.

    .venv/bin/python bench/cli_startup.py
    .venv/bin/python bench/cli_startup.py --repeat 10 --ki .venv/bin/ki

The goal is <= 1 s for each on an idle machine; the load average is printed
before and after because a busy shared machine inflates every number.
Best-of-N, not the mean: the minimum is the run least disturbed by other work.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_KI = Path(sys.executable).with_name("ki")
COMMANDS = (["--help"], ["--version"], ["config", "--help"], ["config", "show", "--json"])


def wall_seconds(argv: list[str]) -> float:
    """One run's wall clock; a non-zero exit is an error, a failing command is not a start-up time."""
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    return time.perf_counter() - started


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ki", type=Path, default=DEFAULT_KI, help="The ki executable (default: next to this python).")
    parser.add_argument("--repeat", type=int, default=5, help="Runs per command; the best is reported.")
    args = parser.parse_args()
    print(f"load average before: {load_average()}")
    for command in COMMANDS:
        best = min(wall_seconds([str(args.ki), *command]) for _ in range(args.repeat))
        print(f"ki {' '.join(command):<22} best of {args.repeat}: {best:.3f} s")
    print(f"load average after:  {load_average()}")


if __name__ == "__main__":
    main()
