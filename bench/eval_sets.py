"""Build development query sets (xref, heading) from the statute corpus itself, never from the dev queries.

    python bench/eval_sets.py statutes tests/fixtures/eval/statutes-generated.jsonl ../shared/data/statutes/*.jsonl.gz
    python bench/eval_sets.py extra16 tests/fixtures/eval/extra16-generated.jsonl ../shared/data/statutes-extra/{agg,...}.jsonl.gz

xref: an in-force Absatz citing exactly one § / Art. of a law the set covers (its own law when the
reference names none or "dieses Gesetzes"), the reference masked as […]; relevant = the cited § (grade 2
for a cited Absatz, 1 for the rest); exclude_ids = the citing Absatz. heading: an official heading that
only one § of the covered laws carries (two words or more); relevant = all its in-force Absätze.
Sections that the dev queries cite or target, and their citing Absätze, are left out of both. Seeded:
the same files give the same sets.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
from collections import defaultdict
from pathlib import Path

DEV = Path(__file__).resolve().parents[2] / "shared/data/eval/statute-queries-dev.jsonl"
SEED = 19
REFERENCE = re.compile(
    r"(?P<kind>§|Art\.|Artikel)\s*(?P<num>\d+[a-z]?)(?:\s+(?:Abs\.|Absatz)\s*(?P<abs>\d+[a-z]?))?"
    r"(?:\s+(?:Satz|S\.)\s*\d+)?(?:\s+(?:Nr\.|Nummer)\s*\d+[a-z]?)?(?:\s+(?:Buchstabe|lit\.)\s*[a-z])?"
)
NAMED_LAW = re.compile(r"\s+(?:(?P<abbr>[A-Z][A-Za-z]*[A-Z][A-Za-z]*(?: [IVX]+)?)\b|(?P<genitive>des|der)\s+(?P<next>\S+))")
MASK = "[…]"
# How citations in the text name laws whose record ids use the source's abbreviation.
# The books of the Sozialgesetzbuch are cited in Roman numerals ("SGB II") and stored as "SGB 2".
SGB_BOOKS = ("I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII")
CITED_AS = {f"SGB {roman}": f"SGB {number}" for number, roman in enumerate(SGB_BOOKS, start=1)} | {"WEG": "WoEigG"}
# A record id with the year of its version ("VVG 2008", "BDSG 2018") is cited without it.
VERSION_YEAR = re.compile(r"^(?P<cited>.+) (?:19|20)\d\d$")


def records(paths: list[str]) -> list[dict]:
    return [json.loads(line) for path in paths for line in gzip.open(path, "rt", encoding="utf-8")]


def dev_sections() -> set[tuple[str, str]]:
    """(law, §) of every dev target and citing Absatz: kept out of the generated sets."""
    taken = set()
    for line in DEV.read_text(encoding="utf-8").splitlines():
        query = json.loads(line)
        for record_id in [*query["relevant"], *query["exclude_ids"]]:
            law, section, _ = record_id.split("|")
            taken.add((law, section))
    return taken


def target_law(text: str, end: int, own_law: str, laws: dict[str, str]) -> str | None:
    """The law a reference ending at `end` points to, None when it names one the set does not cover."""
    follow = NAMED_LAW.match(text, end)
    if not follow:
        return own_law
    if follow.group("abbr"):
        return laws.get(follow.group("abbr"))
    if follow.group("next").startswith("dies"):
        return own_law
    return None if follow.group("next")[:1].isupper() else own_law


def xref_queries(recs: list[dict], units: dict, laws: dict[str, str], skip: set) -> list[dict]:
    found = []
    for rec in recs:
        if rec["repealed"] or (rec["law"], rec["section"]) in skip or len(rec["text"]) > 700:
            continue
        refs = list(REFERENCE.finditer(rec["text"]))
        if len(refs) != 1 or "§§" in rec["text"]:
            continue
        ref = refs[0]
        law = target_law(rec["text"], ref.end(), rec["law"], laws)
        section = ("Art. " if ref.group("kind") != "§" else "§ ") + ref.group("num")
        cited = units.get((law, section))
        if not cited or section == rec["section"] or (law, section) in skip:
            continue
        follow = NAMED_LAW.match(rec["text"], ref.end())
        end = follow.end() if follow and follow.group("abbr") else ref.end()
        query = rec["text"][: ref.start()] + MASK + rec["text"][end:]
        relevant = {u["id"]: 2 if ref.group("abs") and u["subsection"] == ref.group("abs") else 1 for u in cited}
        found.append({"type": "xref", "query": query, "target": f"{section} {law}", "relevant": relevant,
                      "exclude_ids": [rec["id"]], "law_scope": law})
    return found


def heading_queries(units: dict, skip: set) -> list[dict]:
    by_heading = defaultdict(list)
    for (law, section), absaetze in units.items():
        heading = (absaetze[0]["heading"] or "").strip()
        if len(heading.split()) >= 2 and "weggefallen" not in heading:
            by_heading[heading.casefold()].append((law, section, heading))
    found = []
    for owners in by_heading.values():
        if len(owners) != 1 or owners[0][:2] in skip:
            continue
        law, section, heading = owners[0]
        found.append({"type": "heading", "query": heading, "target": f"{section} {law}",
                      "relevant": {u["id"]: 1 for u in units[(law, section)]}, "exclude_ids": [], "law_scope": law})
    return found


def spread(queries: list[dict], n: int, rng: random.Random) -> list[dict]:
    """n queries taken round-robin over laws, so a small law is not drowned by a big one."""
    by_law = defaultdict(list)
    for query in queries:
        by_law[query["law_scope"]].append(query)
    for group in by_law.values():
        rng.shuffle(group)
    taken, laws = [], sorted(by_law)
    while len(taken) < n and any(by_law.values()):
        for law in laws:
            if by_law[law] and len(taken) < n:
                taken.append(by_law[law].pop())
    return taken


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("prefix")
    parser.add_argument("out")
    parser.add_argument("files", nargs="+")
    parser.add_argument("--xref", type=int, default=100)
    parser.add_argument("--heading", type=int, default=60)
    args = parser.parse_args()
    recs = records(args.files)
    units = defaultdict(list)
    for rec in recs:
        if not rec["repealed"]:
            units[(rec["law"], rec["section"])].append(rec)
    laws = {law: law for law in {r["law"] for r in recs}}
    laws.update({m["cited"]: law for law in list(laws) if (m := VERSION_YEAR.match(law))})
    laws.update({alias: law for alias, law in CITED_AS.items() if law in laws})
    skip = dev_sections()
    rng = random.Random(SEED)
    chosen = spread(xref_queries(recs, units, laws, skip), args.xref, rng)
    chosen += spread(heading_queries(units, skip), args.heading, rng)
    with open(args.out, "w", encoding="utf-8") as out:
        for n, query in enumerate(chosen):
            out.write(json.dumps({"qid": f"{args.prefix}-{query['type']}-{n:03d}", **query}, ensure_ascii=False) + "\n")
    print(f"{len(chosen)} queries -> {args.out}")


if __name__ == "__main__":
    main()
