"""The identifier leg alone on a loaded statutes corpus: pasted references and bare law names.

Run where the corpus was loaded (`ki corpus load statutes ...`, embedded backend), with the same
KI_* settings. Prints the leg's precision@1 for ten pasted statute references (the unit of the
cited section first) and how many chunks a bare law name matches, for the whole-value leg and for
the token OR the leg used before (amendments.md 1), rebuilt here on the same tantivy field.

    python bench/identifier_leg.py
"""

from __future__ import annotations

from sqlalchemy import select
from tantivy import Occur, Query

from ki_core.config import load_settings
from ki_core.db import engine_from_settings, session_factory
from ki_core.identifiers import query_identifier_terms
from ki_core.models.corpora import Corpus
from ki_core.search import open_index
from ki_core.search.embedded import EmbeddedIndex
from ki_core.search.types import Leg, MultiSearchRequest, ScopeFilter

PASTED = [
    ("§ 573c Abs. 1 BGB", "§ 573c"), ("§ 573c BGB", "§ 573c"), ("§ 626 Abs. 1 BGB", "§ 626"),
    ("Art. 3 Abs. 1 GG", "Art. 3"), ("§ 91 ZPO", "§ 91"), ("§ 280 Abs. 1 BGB", "§ 280"),
    ("§ 13 SGB V", "§ 13"), ("Art. 14 GG", "Art. 14"), ("§ 823 Abs. 1 BGB", "§ 823"), ("§ 1004 BGB", "§ 1004"),
]  # fmt: skip
LAW_NAMES = ["Kündigung nach BGB", "Anspruch nach ZPO", "Grundrechte GG"]
DEPTH = 2500


def token_or_leg(index: EmbeddedIndex, query: str) -> tuple[list[int], int]:
    """The old leg: any of the query's identifier tokens, BM25 (ranked ids, total matches)."""
    tokens = index.text.identifier.analyze(query)
    if not tokens:
        return [], 0
    field = "identifiers_text"
    matcher = Query.boolean_query(
        [(Occur.Should, Query.term_query(index.text.schema, field, token, index_option="freq")) for token in tokens]
    )
    searcher = index.text.index.searcher()
    found = searcher.search(Query.boolean_query([(Occur.Must, matcher)]), DEPTH, count=True)
    return searcher.fast_field_values("chunk_id", [address for _, address in found.hits]), found.count


def whole_value_leg(index: EmbeddedIndex, query: str) -> tuple[list[int], int]:
    everything = ScopeFilter(project_ids=frozenset(index.table.project_ids()))
    request = MultiSearchRequest(query_text="", query_vector=None, scope=everything, size=DEPTH,
                                 identifier_terms=query_identifier_terms(query))  # fmt: skip
    hits = index.multi_search(request).hits(Leg.IDENTIFIER)
    return hits.chunk_ids.tolist(), len(hits)


def first_is(index: EmbeddedIndex, chunk_ids: list[int], section: str) -> bool:
    fields = index.stored_fields(chunk_ids[0]) if chunk_ids else None
    return fields is not None and section in fields["document_version_id"]


def main() -> int:
    settings = load_settings()
    sessions = session_factory(engine_from_settings(settings))
    with sessions() as session:
        corpus = session.scalar(select(Corpus).where(Corpus.id == "statutes"))
    if corpus is None:
        raise SystemExit("no corpus 'statutes' here: run `ki corpus load statutes ...` first")
    index = open_index(settings, index_name=corpus.index_name, read_only=True)
    if not isinstance(index, EmbeddedIndex):
        raise SystemExit("this bench reads the embedded backend's tantivy field (search.backend embedded)")
    index.ensure()
    print(f"corpus index: {index.count():,} chunks")
    for name, leg in (("token OR (before)", token_or_leg), ("whole values (now)", whole_value_leg)):
        good = sum(first_is(index, leg(index, query)[0], section) for query, section in PASTED)
        matched = ", ".join(f"{q!r} {leg(index, q)[1]:,}" for q in LAW_NAMES)
        print(f"{name}: precision@1 {good}/{len(PASTED)} pasted references; chunks matched by {matched}")
    index.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
