"""What the identifier leg admits per pasted identifier, against the chunks that carry it (issue 44).

    .venv/bin/python bench/identifier_admitted.py .ki-demo/index
    .venv/bin/python bench/identifier_admitted.py <state>/index/corpus-statutes-<signature> --kind chunk "§ 1 BGB" "§ 2 BGB"

bench/identifier_leg.py measures the leg's precision@1 on a loaded statutes corpus.
Reads an embedded index (its tantivy text index and chunk table) without a signature check.
Each query is run through `query_identifier_terms` and the leg's query, inside the chunk kind
given; a chunk carries a query when its identifier values (each identifier with its
ancestors) hold one of the query's values. `--token-match` adds the match the leg had before
issue 44 (every token of a value among the chunk's identifier tokens, on identifiers_text, and
a paragraph also asking for its section) as a baseline. Without queries, every identifier value
the index holds is pasted once.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

from tantivy import Occur, Query

from ki_core.identifiers import extract, query_identifier_terms
from ki_core.identifiers.whole_values import identifier_values
from ki_core.search.text_index import TextIndex
from ki_core.search.types import SearchFilters


def carried(index_dir: Path, kind: str) -> dict[int, set[str]]:
    """chunk id -> the identifier values it carries, for the live chunks of one kind."""
    with sqlite3.connect(index_dir / "chunks.sqlite3") as db:
        rows = db.execute("SELECT chunk_id, identifiers FROM chunks WHERE alive = 1 AND chunk_kind = ?", (kind,))
        return {chunk_id: set(identifier_values(json.loads(ids))) for chunk_id, ids in rows}


def admitted(text: TextIndex, matcher: Query | None, kind: str) -> set[int]:
    if matcher is None:
        return set()
    return set(text._top(matcher, text.strict_filter(None, SearchFilters(chunk_kind=kind)), 1_000_000, None).chunk_ids)


def token_match(text: TextIndex, query: str) -> Query | None:
    """The leg before issue 44: each value (and a paragraph's section) as all of its tokens."""
    values = set()
    for found in extract(query):
        values.add(found.normalized)
        if found.kind in ("statute", "eu_reference") and found.section and found.law:
            values.add(f"{found.section} {found.law}")
    branches = [
        (Occur.Should, Query.boolean_query([
            (Occur.Must, Query.term_query(text.schema, "identifiers_text", token, index_option="freq"))
            for token in dict.fromkeys(tokens)
        ]))
        for value in sorted(values) if (tokens := text.identifier.analyze(value))
    ]  # fmt: skip
    return Query.boolean_query(branches) if branches else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path, help="an embedded index directory (holding text/ and chunks.sqlite3)")
    parser.add_argument("queries", nargs="*", help="pasted references (default: every value the index holds)")
    parser.add_argument("--kind", default="chunk", help="chunk_kind to count (a corpus's Absätze: chunk)")
    parser.add_argument("--token-match", action="store_true", help="also count the token match it replaced")
    args = parser.parse_intermixed_args()
    text = TextIndex(args.index / "text", writable=False)
    chunks = carried(args.index, args.kind)
    queries = args.queries or sorted(set().union(*chunks.values()))
    print(f"{len(chunks)} chunks of kind {args.kind!r}")
    print("query | admitted | carry it | admitted without carrying" + (" | token match admitted" if args.token_match else ""))
    wrong = 0
    for query in queries:
        values = {value for value, _ in query_identifier_terms(query)}
        carriers = {chunk_id for chunk_id, held in chunks.items() if held & values}
        hits = admitted(text, text.identifier_query(query_identifier_terms(query)), args.kind)
        wrong += len(hits - carriers)
        before = f" | {len(admitted(text, token_match(text, query), args.kind))}" if args.token_match else ""
        print(f"{query} | {len(hits)} | {len(carriers)} | {len(hits - carriers)}{before}")
    print(f"{len(queries)} queries; chunks admitted without carrying a value asked for: {wrong}")


if __name__ == "__main__":
    main()
