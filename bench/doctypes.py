"""Accuracy of the document-type decision, per type, on the demo and on the labelled set.

    .venv/bin/python bench/doctypes.py
    .venv/bin/python bench/doctypes.py --misses

The labelled set is tests/fixtures/doctypes/labels.jsonl (60 files that are
not the demo; its README says where each comes from and what a label means).
The demo's expected types are the ones examples/demo.json declares, with its
three court decisions as the Urteil or Beschluss they are. A type is right
when it is the label or a narrower node under it (a `contract.lease` for a
`contract`), never a broader one (a bare `decision` for an Urteil is wrong).
tests/ki_workers/stages/test_doctypes_corpus.py holds the figures to 100 % and 90 %.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ki_core.models.ontology import OntologyKind
from ki_core.ontology import load_ontology
from ki_workers.sources.local_fs import load_manifest
from ki_workers.stages.convert import convert
from ki_workers.stages.metadata import classify_doc_type, decided_doc_type

REPO = Path(__file__).resolve().parent.parent
LABELLED = REPO / "tests" / "fixtures" / "doctypes"
EXAMPLES = REPO / "examples"
# demo.json declares "decision"; the file names and the demo README say which kind each is.
DEMO_DECISIONS = {
    "03_rechtsprechung/lg-berlin_2006-03-16_urteil.txt": "doc_type:decision.judgment",
    "03_rechtsprechung/bverwg_2001-07-17_beschluss.txt": "doc_type:decision.order",
    "02_rechtsprechung/bag_1966-01-28_urteil.txt": "doc_type:decision.judgment",
}


@dataclass(frozen=True)
class Case:
    """One document to type: its text, the title its source gives, what it declares, what it is."""

    name: str
    text: str
    title: str | None
    declared: str | None
    expected: str


@dataclass
class TypeScore:
    correct: int = 0
    misses: list[tuple[str, str | None]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.correct + len(self.misses)


def is_right(expected: str, got: str | None) -> bool:
    """The label itself or a node below it."""
    return got is not None and got in load_ontology().nodes and expected in load_ontology().ancestors(got)


def labelled_cases(corpus: Path = LABELLED) -> Iterator[Case]:
    for line in (corpus / "labels.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            label = json.loads(line)
            yield Case(label["file"], (corpus / label["file"]).read_text(encoding="utf-8"), None, None, label["doc_type"])


def demo_cases(examples: Path = EXAMPLES) -> Iterator[Case]:
    """The demo's files as ingest sees them: converted text and the manifest's title."""
    ontology = load_ontology()
    for project in json.loads((examples / "demo.json").read_text(encoding="utf-8"))["projects"]:
        folder = examples / project["folder"]
        manifest, _ = load_manifest(folder)
        for path, declared in project["doc_types"].items():
            converted = convert((folder / path).read_bytes(), filename=path)
            resolved = ontology.resolve(OntologyKind.DOC_TYPE, declared)
            expected = DEMO_DECISIONS.get(path, resolved)
            yield Case(path, converted.text, manifest.entry_for(path).title or converted.title, resolved, expected)


def score(cases: Iterator[Case], *, declared: bool = True) -> dict[str, TypeScore]:
    """Per expected type: the type ingest decides (`declared`: with what the source declares, as
    the metadata stage weighs it; else the rules on the text and the title alone)."""
    scores: dict[str, TypeScore] = {}
    for case in cases:
        got = classify_doc_type(case.text, case.title)
        got = decided_doc_type(case.declared, got) if declared else got
        entry = scores.setdefault(case.expected, TypeScore())
        if is_right(case.expected, got):
            entry.correct += 1
        else:
            entry.misses.append((case.name, got))
    return scores


def accuracy(scores: dict[str, TypeScore]) -> float:
    total = sum(s.total for s in scores.values())
    return sum(s.correct for s in scores.values()) / total if total else 0.0


def report(title: str, scores: dict[str, TypeScore], with_misses: bool) -> str:
    correct, total = sum(s.correct for s in scores.values()), sum(s.total for s in scores.values())
    rows = [f"{title}: {correct}/{total} {accuracy(scores):.1%}"]
    for node, entry in sorted(scores.items()):
        rows.append(f"  {node:<36} {entry.correct:>3}/{entry.total:<3} {entry.correct / entry.total:6.1%}")
        if with_misses:
            rows += [f"      {name}: got {got!r}" for name, got in entry.misses]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--misses", action="store_true", help="list every document typed wrong")
    args = parser.parse_args(argv)
    print(report("demo, declared types applied", score(demo_cases()), args.misses))
    print(report("demo, rules alone", score(demo_cases(), declared=False), args.misses))
    print(report("labelled set", score(labelled_cases()), args.misses))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
