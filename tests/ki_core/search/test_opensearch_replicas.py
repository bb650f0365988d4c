"""One ranking across replicas: on a two-node cluster with a replica of every shard, every page of one
query (each leg of its _msearch, each page of a listing) reads the same shard copies, by its
`preference`; other queries spread over both copies.

Two copies of a shard score alike only while their segments are alike (deleted documents count in BM25
until a merge removes them), so a query whose pages read different copies may repeat or skip hits.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ki_core.config import OpenSearchSettings, RetrievalSettings
from ki_core.search.index import IndexOp
from ki_core.search.types import Leg, MultiSearchRequest, SearchFilters
from tests.conftest import service_unavailable
from tests.ki_core.search.conftest import DIMS, EVERYTHING, FIXTURE_CHUNKS, OPENSEARCH_URL, unit_vector
from tests.ki_core.search.opensearch_cluster import TwoNodeCluster, distribution_home, start_two_node_cluster

if not OPENSEARCH_URL:
    pytest.skip("KI_TEST_OPENSEARCH_URL is not set: no OpenSearch to test against", allow_module_level=True)

from ki_core.search.opensearch import OpenSearchIndex, make_client  # noqa: E402

QUERIES = ["Miete Vertrag Kündigung", "Schadensersatz Pflicht", "Frist Zahlung", "Mangel Haftung Vermieter"]
PAGES = 4


@pytest.fixture(scope="module")
def cluster() -> Iterator[TwoNodeCluster]:
    home = distribution_home()
    if home is None:
        service_unavailable("an unpacked OpenSearch distribution (make services; KI_TEST_OPENSEARCH_HOME)", "not found")
    cluster = start_two_node_cluster(home, Path(tempfile.mkdtemp(prefix="ki-replicas-")))
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def replicated(cluster: TwoNodeCluster) -> Iterator[OpenSearchIndex]:
    """The fixture chunks in one shard with one replica, a copy on each node; some rewritten, so the
    copies hold deleted documents as a live index does."""
    settings = OpenSearchSettings(hosts=[cluster.url], number_of_shards=1, number_of_replicas=1)
    index = OpenSearchIndex(make_client(settings), alias="ki-replicas", dimensions=DIMS, signature="hashing:replicas",
                            retrieval=RetrievalSettings(), opensearch=settings)  # fmt: skip
    index.ensure()
    index.bulk(IndexOp(chunk) for chunk in FIXTURE_CHUNKS)
    index.refresh()
    index.bulk(IndexOp(chunk) for chunk in FIXTURE_CHUNKS[::3])
    index.refresh()
    deadline = time.monotonic() + 120
    while index.client.cluster.health(index=index.alias)["status"] != "green":
        assert time.monotonic() < deadline, index.client.cat.shards(index=index.alias, format="json")
        time.sleep(0.5)
    yield index
    index.close()


def queries_per_copy(index: OpenSearchIndex) -> dict[str, int]:
    """Query phases each node's copy of the shard has run (the index's shard-level search stats)."""
    stats = index.client.indices.stats(index=index.alias, metric="search", level="shards")
    [shards] = [entry["shards"] for entry in stats["indices"].values()]
    return {copy["routing"]["node"]: copy["search"]["query_total"] for copy in shards["0"]}


def copies_read(index: OpenSearchIndex, run) -> set[str]:
    before = queries_per_copy(index)
    run()
    after = queries_per_copy(index)
    return {node for node, total in after.items() if total > before.get(node, 0)}


def test_the_index_has_a_copy_of_its_shard_on_each_node(replicated: OpenSearchIndex) -> None:
    assert len(queries_per_copy(replicated)) == 2


def test_every_page_of_one_query_reads_one_copy_and_ranks_alike(replicated: OpenSearchIndex) -> None:
    read_by_query = {}
    for query in QUERIES:
        request = MultiSearchRequest(query_text=query, query_vector=unit_vector(query), scope=EVERYTHING, size=20,
                                     principals=("anna", "group:miete"))  # fmt: skip
        rankings = []
        read = copies_read(replicated, lambda r=request: rankings.extend(replicated.multi_search(r) for _ in range(PAGES)))
        assert len(read) == 1, f"the pages of {query!r} read {read}"
        for leg in (Leg.LEXICAL, Leg.SEMANTIC):
            assert len({tuple(result.hits(leg).chunk_ids.tolist()) for result in rankings}) == 1
        read_by_query[query] = read.pop()
    # Not one copy for everything: other queries (other preferences) reach the other copy too.
    assert len(set(read_by_query.values())) == 2, read_by_query


def test_every_page_of_a_listing_reads_one_copy(replicated: OpenSearchIndex) -> None:
    """A listing is one hit per version (nine in the fixture): three pages of three, each version once."""
    pages = []
    read = copies_read(replicated, lambda: pages.extend(
        replicated.search_filter(EVERYTHING, SearchFilters(), size=3, offset=offset) for offset in (0, 3, 6)
    ))  # fmt: skip
    assert len(read) == 1
    listed = [hit.document_version_id for page in pages for hit in page]
    assert len(listed) == len(set(listed)) == len({chunk.document_version_id for chunk in FIXTURE_CHUNKS})
