"""OpenSearch-only behaviour against a real node (KI_TEST_OPENSEARCH_URL); the contract suite
itself runs on that node through the `backend` fixture's opensearch parameter."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from ki_core.config import OpenSearchSettings, RetrievalSettings
from ki_core.search.index import IndexOp
from ki_core.search.types import Leg, MultiSearchRequest
from tests.ki_core.search.conftest import DIMS, EVERYTHING, FIXTURE_CHUNKS, OPENSEARCH_URL

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
    fresh.bulk(IndexOp(chunk) for chunk in FIXTURE_CHUNKS)
    fresh.refresh()
    old.swap_alias(f"{alias}--rebuilt")
    assert old.alias_targets() == [f"{alias}--rebuilt"]
    assert not old.client.indices.exists(index=old_name)
    request = MultiSearchRequest(query_text="Verträge", query_vector=None, scope=EVERYTHING, size=10)
    assert old.multi_search(request).hits(Leg.LEXICAL)
