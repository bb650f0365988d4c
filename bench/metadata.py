"""Accuracy of the rule-based metadata extractor on labelled firm documents.

    .venv/bin/python bench/metadata.py
    .venv/bin/python bench/metadata.py path/to/held-out --misses

The folder holds plain-text documents and a `labels.jsonl` with, per file,
`file`, `title`, `doc_date` (ISO or null) and `language`; the rule for what
the expected values are is in tests/fixtures/firm-documents/README.md. Per
field: the share of documents where the extractor's value is the label, and
the misses (file, expected, got). Titles are compared ignoring case, runs of
white space and the kind of dash; a null date is right only when none is found.
tests/ki_workers/stages/test_metadata_corpus.py holds the figures to a threshold.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ki_workers.stages.metadata import DocumentMetadata, RuleBasedExtractor

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = REPO / "tests" / "fixtures" / "firm-documents"
FIELDS = ("title", "doc_date", "language")


@dataclass(frozen=True)
class Miss:
    file: str
    expected: str | None
    got: str | None


@dataclass
class FieldScore:
    correct: int = 0
    misses: list[Miss] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.correct + len(self.misses)

    @property
    def share(self) -> float:
        return self.correct / self.total if self.total else 0.0


def read_labels(corpus: Path) -> list[dict]:
    lines = (corpus / "labels.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def comparable(name: str, value: str | None) -> str | None:
    """A title differs from its label only in what a reader does not notice: case, spacing, dash."""
    if value is None or name != "title":
        return value
    value = re.sub(r"[‐‑‒–—]", "-", value)
    return " ".join(value.split()).casefold().rstrip(".:")


def extracted(metadata: DocumentMetadata, name: str) -> str | None:
    value = getattr(metadata, name)
    return value.isoformat() if name == "doc_date" and value else value


def score_corpus(corpus: Path = DEFAULT_CORPUS) -> dict[str, FieldScore]:
    extractor = RuleBasedExtractor()
    scores = {name: FieldScore() for name in FIELDS}
    for label in read_labels(corpus):
        metadata = extractor.extract((corpus / label["file"]).read_text(encoding="utf-8"))
        for name, score in scores.items():
            got = extracted(metadata, name)
            if comparable(name, got) == comparable(name, label[name]):
                score.correct += 1
            else:
                score.misses.append(Miss(label["file"], label[name], got))
    return scores


def report(scores: dict[str, FieldScore], with_misses: bool) -> str:
    rows = []
    for name, score in scores.items():
        rows.append(f"{name:<9} {score.correct:>3}/{score.total:<3} {score.share:6.1%}")
        if with_misses:
            for miss in score.misses:
                rows.append(f"    {miss.file}\n        expected {miss.expected!r}\n        got      {miss.got!r}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path, nargs="?", default=DEFAULT_CORPUS, help="folder with labels.jsonl")
    parser.add_argument("--misses", action="store_true", help="list every document a field gets wrong")
    args = parser.parse_args(argv)
    print(f"rule-based metadata on {args.corpus}")
    print(report(score_corpus(args.corpus), args.misses))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
