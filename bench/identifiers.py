"""Quality and speed of ki_core.identifiers.

    .venv/bin/python bench/identifiers.py tests/fixtures/identifiers-dev.jsonl
    .venv/bin/python bench/identifiers.py tests/fixtures/identifiers/classes-test.jsonl --errors --repeat 5

Quality: per record, the (kind, normalized) multiset found is matched against
the labelled one; precision, recall and F1 per kind and micro-averaged, the
same micro F1 per group of the file, plus the negatives (records labelled with
nothing) where something was reported.
Speed: characters per second of `extract` over the `text` field of the
decision texts and of the statute Absätze (../shared/data/statutes: many short
texts, where the cost per call counts), best and median of several
repetitions, by wall clock and by CPU time of this (single-threaded) process.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ki_core.identifiers import extract

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DECISIONS = REPO.parent / "shared" / "data" / "decisions" / "decisions.jsonl"
DEFAULT_STATUTES = REPO.parent / "shared" / "data" / "statutes"
KINDS = ("statute", "case_number", "ecli", "register_number", "eu_reference")


@dataclass
class Score:
    tp: Counter[str] = field(default_factory=Counter)
    fp: Counter[str] = field(default_factory=Counter)
    fn: Counter[str] = field(default_factory=Counter)
    negatives: int = 0
    negatives_reported: list[str] = field(default_factory=list)
    errors: list[tuple[str, list[tuple[str, str]], list[tuple[str, str]]]] = field(default_factory=list)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def statute_texts(directory: Path) -> list[str]:
    """The `text` of every Absatz in the gzipped JSONL files of a statutes directory."""
    texts = []
    for path in sorted(directory.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in f if line.strip()]
    return texts


def score(records: list[dict]) -> Score:
    result = Score()
    for record in records:
        context = record.get("context") or {}
        found = extract(record["text"], context_law=context.get("law"), context_section=context.get("section"))
        got = Counter((i.kind, i.normalized) for i in found)
        expected = Counter((e["kind"], e["normalized"]) for e in record["expected"])
        for key in got | expected:
            hit = min(got[key], expected[key])
            result.tp[key[0]] += hit
            result.fp[key[0]] += got[key] - hit
            result.fn[key[0]] += expected[key] - hit
        if not expected:
            result.negatives += 1
            if got:
                result.negatives_reported.append(record["text"])
        if got != expected:
            result.errors.append((record["text"], sorted((expected - got).elements()), sorted((got - expected).elements())))
    return result


def prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def quality_table(result: Score) -> str:
    rows = [f"{'kind':<16} {'tp':>5} {'fp':>5} {'fn':>5} {'precision':>10} {'recall':>8} {'F1':>7}"]
    for kind in KINDS:
        tp, fp, fn = result.tp[kind], result.fp[kind], result.fn[kind]
        p, r, f = prf(tp, fp, fn)
        rows.append(f"{kind:<16} {tp:>5} {fp:>5} {fn:>5} {p:>10.3f} {r:>8.3f} {f:>7.3f}")
    tp, fp, fn = sum(result.tp.values()), sum(result.fp.values()), sum(result.fn.values())
    p, r, f = prf(tp, fp, fn)
    rows.append(f"{'overall (micro)':<16} {tp:>5} {fp:>5} {fn:>5} {p:>10.3f} {r:>8.3f} {f:>7.3f}")
    rows.append(f"negatives reported: {len(result.negatives_reported)} of {result.negatives}")
    return "\n".join(rows)


def group_table(records: list[dict]) -> str:
    """Micro F1 per `group` of the labelled file: a class of strings can fail while the kinds look fine."""
    rows = [f"{'group':<24} {'strings':>7} {'tp':>5} {'fp':>5} {'fn':>5} {'F1':>7}"]
    for group in sorted({r.get("group", "") for r in records}):
        result = score([r for r in records if r.get("group", "") == group])
        tp, fp, fn = sum(result.tp.values()), sum(result.fp.values()), sum(result.fn.values())
        strings = sum(1 for r in records if r.get("group", "") == group)
        rows.append(f"{group:<24} {strings:>7} {tp:>5} {fp:>5} {fn:>5} {prf(tp, fp, fn)[2]:>7.3f}")
    return "\n".join(rows)


def throughput(texts: list[str], repeat: int) -> str:
    """Wall-clock and CPU time of `extract`; CPU time is the one-core figure when other work shares the machine."""
    chars = sum(len(t) for t in texts)
    extract("warm up: § 1 BGB")  # loads the law and court tables once
    wall, cpu = [], []
    found = 0
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        found = sum(len(extract(t)) for t in texts)
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    rows = [f"{len(texts)} texts, {chars:,} characters, {found} identifiers per pass, {repeat} passes"]
    timings = {
        "wall best": min(wall),
        "wall median": statistics.median(wall),
        "cpu best": min(cpu),
        "cpu median": statistics.median(cpu),
    }
    for name, seconds in timings.items():
        rows.append(f"{name:<12} {chars / seconds:>12,.0f} chars/s  {chars / seconds / 1e6:6.2f} MB/s")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("labelled", type=Path, help="JSONL with {text, expected: [{kind, normalized}], context?}")
    parser.add_argument("--decisions", type=Path, default=DEFAULT_DECISIONS, help="JSONL with a `text` field")
    parser.add_argument("--statutes", type=Path, default=DEFAULT_STATUTES, help="directory of *.jsonl.gz Absätze")
    parser.add_argument("--repeat", type=int, default=5, help="timed passes over the decisions")
    parser.add_argument("--errors", action="store_true", help="list every record that does not match")
    args = parser.parse_args(argv)

    records = read_jsonl(args.labelled)
    result = score(records)
    print(f"quality on {args.labelled}")
    print(quality_table(result))
    print(group_table(records))
    for text in result.negatives_reported:
        print(f"  negative reported: {text[:100]!r}")
    if args.errors:
        for text, missing, extra in result.errors:
            print(f"- {text[:120]!r}\n    missing {missing}\n    extra   {extra}")
    if args.decisions.is_file():
        print(f"\nthroughput on {args.decisions}")
        print(throughput([r["text"] for r in read_jsonl(args.decisions)], args.repeat))
    else:
        print(f"\nno decisions file at {args.decisions}: throughput skipped", file=sys.stderr)
    if args.statutes.is_dir():
        print(f"\nthroughput on {args.statutes}")
        print(throughput(statute_texts(args.statutes), args.repeat))
    else:
        print(f"\nno statutes directory at {args.statutes}: throughput skipped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
