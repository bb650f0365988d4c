"""OpenSearch-only behaviour against a real node (KI_TEST_OPENSEARCH_URL); the contract suite
itself runs on that node through the `backend` fixture's opensearch parameter."""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ki_core.config import OpenSearchSettings, RetrievalSettings
from ki_core.search.index import IndexOp
from ki_core.search.types import Leg, MultiSearchRequest, SearchBackendError, SearchFilters
from tests.conftest import service_unavailable
from tests.ki_core.search.conftest import DIMS, EVERYTHING, FIXTURE_CHUNKS, OPENSEARCH_URL, unit_vector
from tests.ki_core.search.opensearch_cluster import TwoNodeCluster, distribution_home, start_two_node_cluster

if not OPENSEARCH_URL:
    pytest.skip("KI_TEST_OPENSEARCH_URL is not set: no OpenSearch node to test against", allow_module_level=True)

from ki_core.search.opensearch import (  # noqa: E402
    OpenSearchIndex,
    index_settings,
    make_client,
    mapping_properties,
)

SETTINGS = OpenSearchSettings(hosts=[OPENSEARCH_URL], number_of_replicas=0)


@pytest.fixture
def alias() -> Iterator[str]:
    name = f"ki-live-{uuid.uuid4().hex[:10]}"
    yield name
    client = make_client(SETTINGS)
    names = sorted(client.indices.get(index=f"{name}*"))
    if names:
        client.indices.delete(index=",".join(names))
    client.close()


def live_index(alias: str, signature: str = "hashing:live") -> OpenSearchIndex:
    return OpenSearchIndex(make_client(SETTINGS), alias=alias, dimensions=DIMS, signature=signature,
                           retrieval=RetrievalSettings(), opensearch=SETTINGS)  # fmt: skip


def test_ensure_creates_the_signature_index_behind_the_alias(alias: str) -> None:
    index = live_index(alias)
    index.ensure()
    [concrete] = index.alias_targets()
    assert concrete.startswith(f"{alias}--hashing-live-")
    index.ensure()
    assert index.alias_targets() == [concrete]


def test_a_bulk_of_many_requests_in_flight_writes_every_chunk_and_keeps_a_delete_after_its_write(alias: str) -> None:
    """Two requests in flight (opensearch.bulk_concurrency, BULK_BATCH_ITEMS each); a chunk written in the first
    request and deleted in the third stays deleted: repeated ids go one request at a time, in order."""
    from ki_core.search.contract import DeleteOp

    index = live_index(alias)
    index.ensure()
    template = FIXTURE_CHUNKS[0]
    chunks = [template.model_copy(update={"chunk_id": 10_000 + n}) for n in range(1_200)]
    index.bulk(IndexOp(chunk) for chunk in chunks)
    index.refresh()
    assert index.count() == 1_200
    index.bulk([*(IndexOp(c) for c in chunks[:1_100]), DeleteOp(chunks[0].chunk_id), DeleteOp(chunks[1].chunk_id)])
    index.refresh()
    assert index.count() == 1_198 and index.stored_fields(chunks[0].chunk_id) is None


def test_missing_fields_are_added_to_a_live_index(alias: str) -> None:
    client = make_client(SETTINGS)
    properties = mapping_properties(RetrievalSettings(), DIMS)
    partial = {k: v for k, v in properties.items() if k not in ("clause_type", "language")}
    body = {"settings": index_settings(SETTINGS), "mappings": {"dynamic": False, "properties": partial}}
    client.indices.create(index=alias, body=body)
    live_index(alias).ensure()
    live = client.indices.get_mapping(index=alias)[alias]["mappings"]["properties"]
    assert live["clause_type"] == {"type": "keyword"} and live["language"] == {"type": "keyword"}


def test_rebuild_and_swap_serve_the_new_index_through_the_alias(alias: str) -> None:
    old = live_index(alias)
    old.ensure()
    [old_name] = old.alias_targets()
    fresh = old.rebuild_into(f"{alias}--rebuilt")
    settings = old.client.indices.get_settings(index=f"{alias}--rebuilt")[f"{alias}--rebuilt"]["settings"]["index"]
    assert (settings["refresh_interval"], settings["number_of_replicas"]) == ("-1", "0")
    fresh.bulk(IndexOp(chunk) for chunk in FIXTURE_CHUNKS)
    fresh.end_bulk_load()
    settings = old.client.indices.get_settings(index=f"{alias}--rebuilt")[f"{alias}--rebuilt"]["settings"]["index"]
    assert "refresh_interval" not in settings and settings["number_of_replicas"] == str(SETTINGS.number_of_replicas)
    old.swap_alias(f"{alias}--rebuilt")
    assert old.alias_targets() == [f"{alias}--rebuilt"]
    assert not old.client.indices.exists(index=old_name)
    request = MultiSearchRequest(query_text="Verträge", query_vector=None, scope=EVERYTHING, size=10)
    assert old.multi_search(request).hits(Leg.LEXICAL)


# ------------------------------------------------------------------ shards on two nodes


@pytest.fixture(scope="module")
def two_node_cluster() -> Iterator[TwoNodeCluster]:
    home = distribution_home()
    if home is None:
        service_unavailable("an unpacked OpenSearch distribution (make services; KI_TEST_OPENSEARCH_HOME)", "not found")
    # Not under pytest's tmp dir: the node's own user must be able to enter it.
    cluster = start_two_node_cluster(home, Path(tempfile.mkdtemp(prefix="ki-shards-")))
    try:
        yield cluster
    finally:
        cluster.close()


def place_shards(client, index: str, on_first: set[int], first: str, second: str) -> None:
    """Shards in on_first on the first node, the others on the second; then wait for green."""
    # A move needs started shards. (Polled: opensearch-py takes a `timeout` param as its own.)
    deadline = time.monotonic() + 60
    while client.cluster.health(index=index)["status"] != "green" and time.monotonic() < deadline:
        time.sleep(0.5)
    for row in client.cat.shards(index=index, format="json"):
        shard, node = int(row["shard"]), row["node"]
        target = first if shard in on_first else second
        if node != target:
            client.cluster.reroute(body={"commands": [
                {"move": {"index": index, "shard": shard, "from_node": node, "to_node": target}}
            ]})  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = client.cat.shards(index=index, format="json")
        if all(r["state"] == "STARTED" and r["node"] == (first if int(r["shard"]) in on_first else second) for r in rows):
            return
        time.sleep(0.5)
    raise AssertionError(f"shards of {index} did not move: {client.cat.shards(index=index, format='json')}")


def test_a_search_that_loses_shards_raises_naming_the_index_never_a_short_list(two_node_cluster: TwoNodeCluster) -> None:
    settings = OpenSearchSettings(hosts=[two_node_cluster.url], number_of_shards=3, number_of_replicas=0)
    index = OpenSearchIndex(make_client(settings), alias="ki-shards", dimensions=DIMS, signature="hashing:shards",
                            retrieval=RetrievalSettings(), opensearch=settings)  # fmt: skip
    index.ensure()
    [concrete] = index.alias_targets()
    # Keep this index's shards where the test puts them (rebalancing would undo the placement).
    index.client.indices.put_settings(index=concrete, body={"index.routing.rebalance.enable": "none"})
    place_shards(index.client, concrete, on_first={0}, first="node-1", second="node-2")
    index.bulk(IndexOp(chunk) for chunk in FIXTURE_CHUNKS)
    index.refresh()
    request = MultiSearchRequest(query_text="Miete Vertrag", query_vector=unit_vector("Miete"), scope=EVERYTHING,
                                 size=len(FIXTURE_CHUNKS))  # fmt: skip
    whole = index.multi_search(request)
    assert len(whole.hits(Leg.SEMANTIC)) == len(FIXTURE_CHUNKS)
    assert index.count() == len(FIXTURE_CHUNKS)

    two_node_cluster.stop_node("node-2")  # two of three shards are gone

    with pytest.raises(SearchBackendError, match=r"on index ki-shards .*missing shards") as failed:
        index.multi_search(request)
    assert concrete in str(failed.value)
    with pytest.raises(SearchBackendError, match=r"ki-shards"):
        index.search_filter(EVERYTHING, SearchFilters(), size=10)
    with pytest.raises(SearchBackendError, match=r"ki-shards"):
        index.count()
    index.close()


def test_german_text_is_cut_into_the_same_terms_as_the_embedded_backend(alias: str) -> None:
    """Lexical ranking means the same on both backends only if both analyze text alike."""
    from ki_core.search.text_index import german_analyzer

    index = live_index(alias)
    index.ensure()
    text = ("Die Abtretung des Mietverhältnisses nach dem Bürgerlichen Gesetzbuch; Verträge über 2,5 Grundstücke "
            "kündigt der Vermieter schriftlich, die Kündigungsfrist beträgt drei Monate")  # fmt: skip
    analyzed = index.client.indices.analyze(index=alias, body={"field": "text", "text": text})
    assert [token["token"] for token in analyzed["tokens"]] == german_analyzer().analyze(text)
