"""Citations in a query, through the whole search (issue 39's leftovers): `-§ 573c BGB` and
`-(§ 573c BGB)` hide every document citing § 573c BGB (a part of it included), `-Az. 5 U 12/21` and
`-Az.5U12/21` every one citing that file number, `norm:§§ 573, 574` finds documents citing either
section in any law, `norm:§§ 573-575 BGB` any section of the range, and `norm:DSGVO` the act or any
article of it. Run end to end
(query parsed, scope compiled in SQL, legs, verification, count) on SQLite + embedded and on
PostgreSQL + the OpenSearch node, against the meanings written out by hand in the contract suite.
"""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ki_core.identifiers import extract
from ki_core.search.types import IndexChunk
from ki_query.types import SearchRequest
from tests.conftest import create_database, drop_database
from tests.ki_core.search.backends import OPENSEARCH_URL, store_beside_index
from tests.ki_core.search.test_query_constraint import CITING, MEANINGS, expected_versions
from tests.ki_query.test_result_set_depth import CALLER, CORPUS, DIMENSIONS, DepthWorld, Row, searchable

# Each citing sentence after eight different BGB Absätze: 56 documents, each cited norm in eight.
PER_SENTENCE = 8
STORES = [("sqlite", "embedded"), *([("postgresql", "opensearch")] if OPENSEARCH_URL else [])]


def rows() -> list[Row]:
    """A real Absatz, then a sentence citing a norm or a file number; identifiers as the extractor reads them."""
    sentences = [parts[0] for parts in CITING.values()]
    with gzip.open(CORPUS, "rt", encoding="utf-8") as lines:
        absaetze = [json.loads(line)["text"] for line, _ in zip(lines, range(len(sentences) * PER_SENTENCE), strict=False)]
    texts = [f"{absatz} {sentences[n % len(sentences)]}" for n, absatz in enumerate(absaetze)]
    return [Row(text, "zitate", None, tuple(dict.fromkeys(i.normalized for i in extract(text)))) for text in texts]


@pytest.fixture(scope="module", params=STORES, ids=["-".join(pair) for pair in STORES])
def citation_world(
    request: pytest.FixtureRequest, sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DepthWorld]:
    database, backend = request.param
    name = f"ki_cite_{uuid.uuid4().hex[:12]}" if database == "postgresql" else None
    url = create_database(name, template=request.getfixturevalue("pg_template")) if name else None
    root = tmp_path_factory.mktemp("citations")
    try:
        with store_beside_index(backend, sqlite_template, root, DIMENSIONS, database_url=url) as (session, index):
            yield searchable(session, index, rows())
    finally:
        if name is not None:
            drop_database(name)


def meant(world: DepthWorld, query: str) -> set[str]:
    """The documents the hand-written meaning holds for, by SQL id."""
    chunks = [
        IndexChunk(chunk_id=n, text=row.text, embedding=(0.0,), project_id=row.project, document_id=str(n),
                   document_version_id=str(n), identifiers=row.identifiers)
        for n, row in enumerate(world.rows)
    ]  # fmt: skip
    return {world.documents[int(n)] for n in expected_versions(MEANINGS[query], chunks)}


@pytest.mark.parametrize("query", MEANINGS)
def test_the_search_shows_and_counts_exactly_the_documents_the_citation_means(
    citation_world: DepthWorld, query: str
) -> None:
    expected = meant(citation_world, query)
    assert expected and len(expected) < len(citation_world.rows), query
    response = citation_world.service.search(SearchRequest(query=query, limit=len(citation_world.rows)), CALLER)
    assert {hit.citation.document.id for hit in response.hits} == expected
    assert (response.total, response.total_is_estimate) == (len(expected), False)
