"""The statutes corpus's identifier leg matches whole values (issue 44), on both backends.

Each unit carries its own address ("§ 1 Abs. 2 BGB", "§ 1 BGB") and the norms its text
cites. The token match admitted "§ 1 BGB" for 1,968 of the 5,017 BGB units of the full
corpus (every unit with a "§", a "1" and "BGB" among its identifiers); the fixture holds
§ 1 of three laws and § 12 SGB V, which share every token of another's address.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ki_core.config import Settings, load_settings
from ki_core.embedding import HashingEmbedder
from ki_core.identifiers import query_identifier_terms
from ki_core.search.types import Leg, MultiSearchRequest, ScopeFilter, SearchFilters
from ki_query.federation.corpus_loader import UNIT_KIND, drop_corpus_index, load_corpus
from ki_query.federation.corpus_retriever import CorpusRetriever
from ki_query.federation.registry import CorpusRegistry
from tests.ki_core.search.backends import CONTRACT_BACKENDS, OPENSEARCH_URL
from tests.ki_query.federation.test_registry import FIXTURE, sessions  # noqa: F401 (fixture)

EMBEDDER = HashingEmbedder(dimensions=384)


@pytest.fixture(params=CONTRACT_BACKENDS)
def retriever(request: pytest.FixtureRequest, sqlite_url: str, sessions, tmp_path: Path) -> Iterator[CorpusRetriever]:  # noqa: F811
    search = {"backend": request.param,
              "opensearch": {"hosts": [OPENSEARCH_URL or "http://127.0.0.1:9200"], "number_of_replicas": 0}}  # fmt: skip
    settings: Settings = load_settings(state_dir=str(tmp_path / "state"), database={"url": sqlite_url}, search=search,
                                       embedding={"provider": "hashing", "model": "hashing"})  # fmt: skip
    corpus_id = f"ids-{uuid.uuid4().hex[:10]}"  # OpenSearch index names are global on the node
    report = load_corpus(settings, sessions, EMBEDDER, corpus_id, [FIXTURE])
    registry = CorpusRegistry(settings, sessions, EMBEDDER)
    try:
        yield registry.retriever(corpus_id)
    finally:
        registry.close()
        drop_corpus_index(settings, report.index_name)


def identifier_leg(retriever: CorpusRetriever, query: str) -> list[tuple[str, str, str]]:
    """(law, §, record id) of every unit the leg admits, in its order."""
    request = MultiSearchRequest(
        query_text="", query_vector=None, scope=ScopeFilter(project_ids=frozenset({retriever.corpus_id})),
        filters=SearchFilters(chunk_kind=UNIT_KIND), size=500, identifier_terms=query_identifier_terms(query),
    )  # fmt: skip
    hits = retriever.index.multi_search(request).hits(Leg.IDENTIFIER)
    units = retriever.units.by_chunk_ids(hit.chunk_id for hit in hits)
    return [(units[h.chunk_id].container_id, units[h.chunk_id].section_id, units[h.chunk_id].record_id) for h in hits]


@pytest.mark.parametrize(
    ("query", "law", "section", "citing"),
    [("§ 1 BGB", "BGB", "§ 1", set()), ("§ 1 ZPO", "ZPO", "§ 1", set()), ("§ 1 SGB V", "SGB V", "§ 1", set()),
     # "Wirtschaftlichkeitsgebots (§ 12)" in § 2 Abs. 1 SGB V cites it.
     ("§ 12 SGB V", "SGB V", "§ 12", {"SGB 5|§ 2|1"})],
)  # fmt: skip
def test_a_section_admits_its_own_units_and_those_citing_it_never_a_section_of_shared_tokens(
    retriever: CorpusRetriever, query: str, law: str, section: str, citing: set[str]
) -> None:
    admitted = identifier_leg(retriever, query)
    own = {record for container, sec, record in admitted if (container, sec) == (law, section)}
    assert own and {record for *_, record in admitted} == own | citing, admitted


def test_a_paragraph_admits_itself_and_the_units_citing_it_not_its_sibling_paragraphs(
    retriever: CorpusRetriever,
) -> None:
    # Abs. 4: "Eine zum Nachteil des Mieters von Absatz 1 oder 3 abweichende Vereinbarung ..."
    assert {record for *_, record in identifier_leg(retriever, "§ 573c Abs. 1 BGB")} == {"BGB|§ 573c|1", "BGB|§ 573c|4"}
    assert {record for *_, record in identifier_leg(retriever, "§ 573c Abs. 2 BGB")} == {"BGB|§ 573c|2"}
    assert {record for *_, record in identifier_leg(retriever, "§ 573c BGB")} == {f"BGB|§ 573c|{n}" for n in "1234"}
