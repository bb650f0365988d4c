"""Build a caselaw query set from the sentences of real decisions (issue 44), never from the dev queries.

    python bench/court_sentences.py tests/fixtures/eval/statutes-courts.jsonl \
        ../shared/data/decisions/decisions.jsonl ../shared/data/statutes/*.jsonl.gz

A query is one sentence of a decision that cites a norm of the corpus's laws, every citation in it
(of any law, the decision's own shorthand "BGB § 613 S 2" and a bare "§ 240 Abs 4 S 1" included)
masked as […]. Labels as the dev set's caselaw type: the cited Absatz grade 2, the other Absätze of
its § grade 1, a § cited as a whole all grade 1; several cited norms all count. A sentence that shares
a run of SHINGLE words with a dev query is left out (the dev file is read for that test only), and so
are sentences shorter than MIN_WORDS words once masked; of masked sentences that repeat, one is kept.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path

from ki_core.identifiers import extract

DEV = Path(__file__).resolve().parents[2] / "shared/data/eval/statute-queries-dev.jsonl"  # from a clone beside shared/
MASK = "[…]"
SHINGLE = 6
MIN_WORDS = 6
MAX_WORDS = 80
# One norm argued over a whole decision (the Genehmigungsfiktion of § 13 SGB V: 20 sentences) would
# otherwise outweigh the rest of the set.
PER_TARGET = 6
# "AP Nr. 7 zu § 322 ZPO" names a reporter's heading, not a norm the court applies.
REPORTER = re.compile(r"\bAP Nr\.? \d+(?: und \d+)? zu\b")
# The record ids of the statute files name the books of the Sozialgesetzbuch by number.
RECORD_LAW = {"SGB V": "SGB 5"}
# "ZPO § 319", "BGB § 613 S 2", "GG Art 80 Abs 1": the law before the norm, as older decisions write it.
LAW_FIRST = re.compile(
    r"\b(?P<law>BGB|ZPO|GG|SGB V|SGG|HGB|UWG|FGG|KostO|GKG)\s+(?P<kind>§|Art\.?)\s*(?P<num>\d+[a-z]?)"
    r"(?:\s+Abs\.?\s*(?P<abs>\d+[a-z]?))?(?:\s+(?:S\.?|Satz)\s*\d+)?(?:\s+Nr\.?\s*\d+)?"
)
# Whatever § or Art. reference is left once the extracted ones are masked (no law named, ranges).
LEFTOVER = re.compile(
    r"(?:§§?|Art\.?|Artikel)\s*\d+[a-z]?(?:\s*(?:Abs\.?|Absatz|S\.?|Satz|Nr\.?|Nrn\.?|Buchst\.?|bis|und|,|-)\s*\d*[a-z]?\)?)*"
    r"(?:\s+(?:[A-Z][A-Za-z]*[A-Z][A-Za-z]*|GG|SGB [IVX]+|Grundgesetz\w*|Sozialgerichtsgesetz\w*))?"
)
# A full stop ends a sentence unless it closes one of these (or a number: "2. Februar", "Abs. 1.").
ABBREVIATIONS = {
    "abs", "nr", "nrn", "vgl", "s", "art", "bzw", "ca", "dr", "rn", "rdn", "bl", "urt", "beschl", "aaO", "aao",
    "i", "v", "m", "d", "a", "z", "b", "u", "st", "rspr", "aufl", "anm", "buchst", "gem", "ff", "f", "bd", "az",
}


def sentences(text: str) -> list[str]:
    """The decision's sentences, paragraph numbers and line breaks dropped."""
    flat = re.sub(r"\s+", " ", re.sub(r"(?m)^\s*\d+\s*$", " ", text))
    # Outline marks after a sentence ("berufen. 5. Der", "(Rn.34) 3.", "Räumungsklage: b) Die") start one.
    flat = re.sub(r"(?<=[.:)]) (?:\d+\.|[a-z]{1,2}\)|[IVX]+\.|\d+\)) (?=[A-ZÄÖÜ])", ". ", flat)
    flat = re.sub(r"\b(?:Leitsatz|Orientierungssatz|Gründe|Tenor) (?:\d+\. )?(?=[A-ZÄÖÜ])", ". ", flat)
    result, start = [], 0
    for match in re.finditer(r"[.!?]\s+(?=[A-ZÄÖÜ(])", flat):
        before = flat[start : match.start()].split()
        last = before[-1].rstrip(".").casefold() if before else ""
        if last.isdigit() or last in ABBREVIATIONS or len(last) == 1:
            continue
        result.append(flat[start : match.start() + 1].strip())
        start = match.end()
    result.append(flat[start:].strip())
    return [s for s in result if s]


def cited_norms(sentence: str, laws: set[str]) -> tuple[list[tuple[str, str, str | None]], list[tuple[int, int]]]:
    """((record law, §, Absatz or None) of the norms of `laws` the sentence cites, spans of every citation)."""
    norms, spans = [], []
    for ident in extract(sentence):
        if ident.kind != "statute":
            continue
        spans.append((ident.start, ident.end))
        if ident.law in laws and ident.section:
            norms.append((RECORD_LAW.get(ident.law, ident.law), ident.section, ident.absatz))
    for match in LAW_FIRST.finditer(sentence):
        spans.append(match.span())
        law = match.group("law")
        if law in laws:
            section = ("§ " if match.group("kind") == "§" else "Art. ") + match.group("num")
            norms.append((RECORD_LAW.get(law, law), section, match.group("abs")))
    return norms, spans


def masked(sentence: str, spans: list[tuple[int, int]]) -> str:
    """Every citation replaced by MASK (overlapping spans merged), then any § or Art. reference left."""
    text, cursor = [], 0
    for start, end in sorted(spans):
        if end <= cursor:
            continue
        text.append(sentence[cursor : max(start, cursor)])
        text.append(MASK)
        cursor = end
    text.append(sentence[cursor:])
    result = LEFTOVER.sub(MASK, "".join(text))
    result = re.sub(rf"(?:{re.escape(MASK)}[\s,;]*(?:i\.\s?V\.\s?m\.|in Verbindung mit|und|,)?\s*)+{re.escape(MASK)}", MASK, result)
    return re.sub(r"\s+", " ", result).strip()


def labels(norms: list[tuple[str, str, str | None]], absaetze: dict[tuple[str, str], list[str]]) -> dict[str, int]:
    relevant: dict[str, int] = {}
    for law, section, absatz in norms:
        for sub in absaetze.get((law, section), []):
            record = f"{law}|{section}|{sub}"
            grade = 2 if absatz is not None and sub == absatz else 1
            relevant[record] = max(relevant.get(record, 0), grade)
    return relevant


def shingles(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.casefold())
    return {tuple(words[i : i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)}


def build(decisions: Path, statute_files: list[str], prefix: str, dev_file: Path = DEV) -> list[dict]:
    absaetze: dict[tuple[str, str], list[str]] = {}
    for path in statute_files:
        for line in gzip.open(path, "rt", encoding="utf-8"):
            record = json.loads(line)
            if not record["repealed"]:
                absaetze.setdefault((record["law"], record["section"]), []).append(record["id"].split("|")[2])
    laws = {law for law, _ in absaetze} | {cited for cited, law in RECORD_LAW.items() if (law, "§ 1") in absaetze}
    dev = set().union(*(shingles(json.loads(line)["query"]) for line in dev_file.read_text(encoding="utf-8").splitlines()))
    queries, seen = [], set()
    for line in decisions.read_text(encoding="utf-8").splitlines():
        decision = json.loads(line)
        for sentence in sentences(decision["text"]):
            norms, spans = cited_norms(sentence, laws)
            relevant = labels(norms, absaetze)
            query = masked(sentence, spans)
            words = len(query.split())
            if REPORTER.search(sentence) or sum(q["target"] == "; ".join(sorted({f"{sec} {law}" for law, sec, _ in norms})) for q in queries) >= PER_TARGET:
                continue
            if not relevant or not MIN_WORDS <= words <= MAX_WORDS or query in seen or shingles(query) & dev:
                continue
            seen.add(query)
            targets = sorted({f"{section} {law}" for law, section, _ in norms})
            queries.append({
                "qid": f"{prefix}-{len(queries):03d}", "type": "caselaw", "query": query, "target": "; ".join(targets),
                "relevant": relevant, "exclude_ids": [], "law_scope": ",".join(sorted({n[0] for n in norms})),
                "decision": decision["doc_id"],
            })  # fmt: skip
    return queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("decisions", type=Path)
    parser.add_argument("statutes", nargs="+")
    parser.add_argument("--prefix", default="statutes-court")
    parser.add_argument("--dev", type=Path, default=DEV, help="The dev queries whose sentences are left out.")
    args = parser.parse_args()
    queries = build(args.decisions, args.statutes, args.prefix, args.dev)
    args.out.write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries), encoding="utf-8")
    print(f"{len(queries)} queries -> {args.out}")


if __name__ == "__main__":
    main()
