"""The exact requests OpenSearchIndex sends (no node here: a recording connection answers)."""

from __future__ import annotations

from datetime import date

import pytest

from ki_core.config import OpenSearchSettings, RetrievalSettings
from ki_core.search.index import DeleteOp, IndexOp, UpdateAccessOp
from ki_core.search.opensearch import (
    OpenSearchIndex,
    cosine_from_knn_score,
    scope_clause,
    signature_index_name,
)
from ki_core.search.types import (
    AccessProjection,
    BulkFailure,
    FilterHit,
    IndexChunk,
    IndexDimensionMismatch,
    IndexMappingMismatch,
    Leg,
    LegHit,
    MultiSearchRequest,
    ScopeFilter,
    SearchBackendError,
    SearchFilters,
)
from tests.ki_core.search.recording_connection import Script, recording_client

ALIAS = "ki-chunks"
SIGNATURE = "hashing:test:3"
CONCRETE = signature_index_name(ALIAS, SIGNATURE)
SOURCE = ["chunk_id", "document_id", "document_version_id", "project_id", "version_status", "chunk_kind", "identifiers"]
SCOPE = ScopeFilter(
    project_ids=frozenset({"p2", "p1"}),
    excluded_document_ids=frozenset({"d9"}),
    document_ids=frozenset({"d5"}),
)
SCOPE_CLAUSE = {
    "bool": {
        "should": [
            {"bool": {"filter": [{"terms": {"project_id": ["p1", "p2"]}}], "must_not": [{"terms": {"document_id": ["d9"]}}]}},
            {"terms": {"document_id": ["d5"]}},
        ],
        "minimum_should_match": 1,
    }
}


@pytest.fixture
def script() -> Script:
    return Script()


def make_index(script: Script, dimensions: int = 3, **retrieval: object) -> OpenSearchIndex:
    return OpenSearchIndex(
        recording_client(script),
        alias=ALIAS,
        dimensions=dimensions,
        signature=SIGNATURE,
        retrieval=RetrievalSettings(**retrieval),
        opensearch=OpenSearchSettings(number_of_shards=2, number_of_replicas=1),
    )


def sent(script: Script) -> list[tuple[str, str]]:
    return [(request.method, request.path) for request in script.sent]


# ------------------------------------------------------------------ mapping

EXPECTED_PROPERTIES = {
    "chunk_id": {"type": "long"},
    "chunk_kind": {"type": "keyword"},
    "clause_type": {"type": "keyword"},
    "doc_date": {"type": "date", "format": "strict_date"},
    "doc_type": {"type": "keyword"},
    "doc_type_ancestors": {"type": "keyword"},
    "document_id": {"type": "keyword"},
    "document_version_id": {"type": "keyword"},
    "embedding": {
        "type": "knn_vector",
        "dimension": 3,
        "method": {
            "name": "hnsw",
            "engine": "lucene",
            "space_type": "cosinesimil",
            "parameters": {"m": 16, "ef_construction": 128},
        },
    },
    "courts": {"type": "keyword"},
    "identifier_values": {"type": "keyword", "norms": True, "index_options": "freqs"},
    "identifiers": {"type": "keyword"},
    "identifiers_text": {"type": "text", "analyzer": "ki_identifier"},
    "language": {"type": "keyword"},
    "matter_id": {"type": "keyword"},
    "meta": {"type": "object", "enabled": False},
    "project_id": {"type": "keyword"},
    "text": {"type": "text", "analyzer": "ki_german"},
    "version_status": {"type": "keyword"},
}


def test_ensure_creates_the_signature_index_with_the_alias_and_the_spec_mapping(script: Script) -> None:
    script.reply("HEAD", f"/{ALIAS}", status=404).reply("PUT", f"/{CONCRETE}", {"acknowledged": True})
    script.reply("PUT", f"/{CONCRETE}-access", {"acknowledged": True})
    make_index(script).ensure()
    assert sent(script) == [("HEAD", f"/{ALIAS}"), ("PUT", f"/{CONCRETE}-access"), ("PUT", f"/{CONCRETE}")]
    assert script.sent[1].body == {  # the access projection: one small document per version, no vector
        "settings": {"index": {"number_of_shards": 1, "number_of_replicas": 1}},
        "mappings": {"dynamic": False, "properties": {
            "document_id": {"type": "keyword"}, "document_version_id": {"type": "keyword"},
            "allowed_principals": {"type": "keyword"}, "denied_principals": {"type": "keyword"},
            "access_version": {"type": "integer"},
        }},
        "aliases": {f"{ALIAS}-access": {}},
    }  # fmt: skip
    assert script.sent[2].body == {
        "settings": {
            "index": {"knn": True, "number_of_shards": 2, "number_of_replicas": 1},
            "analysis": {
                "tokenizer": {
                    "ki_identifier": {
                        "type": "pattern",
                        "pattern": r"[\p{L}\p{N}](?:[\p{L}\p{N}/.:\-]*[\p{L}\p{N}])?|§+",
                        "group": 0,
                    },
                    "ki_german": {"type": "pattern", "pattern": r"[^\p{L}\p{N}]+"},
                },
                "filter": {
                    "ki_german_long": {"type": "length", "max": 63},
                    "ki_german_stop": {"type": "stop", "stopwords": "_german_"},
                    "ki_german_stemmer": {"type": "snowball", "language": "German"},
                },
                "analyzer": {
                    "ki_identifier": {"type": "custom", "tokenizer": "ki_identifier", "filter": ["lowercase"]},
                    "ki_german": {
                        "type": "custom",
                        "tokenizer": "ki_german",
                        "filter": ["ki_german_long", "lowercase", "ki_german_stop", "ki_german_stemmer"],
                    },
                },
            },
        },
        "mappings": {"dynamic": False, "_source": {"excludes": ["embedding"]}, "properties": EXPECTED_PROPERTIES},
        "aliases": {ALIAS: {}},
    }


def test_hnsw_parameters_come_from_the_retrieval_settings(script: Script) -> None:
    script.reply("HEAD", f"/{ALIAS}", status=404).reply("PUT", f"/{CONCRETE}").reply("PUT", f"/{CONCRETE}-access")
    make_index(script, vector_engine="faiss", vector_space_type="innerproduct", hnsw_m=32, hnsw_ef_construction=256).ensure()
    method = script.sent[2].body["mappings"]["properties"]["embedding"]["method"]
    assert method == {
        "name": "hnsw", "engine": "faiss", "space_type": "innerproduct", "parameters": {"m": 32, "ef_construction": 256},
    }  # fmt: skip


def test_ensure_adds_only_the_missing_fields_to_the_live_index(script: Script) -> None:
    live = {k: v for k, v in EXPECTED_PROPERTIES.items() if k not in ("identifiers_text", "clause_type")}
    script.reply("HEAD", f"/{ALIAS}").reply("GET", f"/{ALIAS}/_mapping", {CONCRETE: {"mappings": {"properties": live}}})
    script.reply("PUT", f"/{CONCRETE}/_mapping", {"acknowledged": True}).reply("HEAD", f"/{ALIAS}-access")
    make_index(script).ensure()
    assert script.sent[-2].body == {
        "properties": {
            "clause_type": {"type": "keyword"},
            "identifiers_text": {"type": "text", "analyzer": "ki_identifier"},
        }
    }


def test_ensure_with_a_complete_mapping_changes_nothing(script: Script) -> None:
    script.reply("HEAD", f"/{ALIAS}")
    script.reply("GET", f"/{ALIAS}/_mapping", {CONCRETE: {"mappings": {"properties": EXPECTED_PROPERTIES}}})
    script.reply("HEAD", f"/{ALIAS}-access")
    make_index(script).ensure()
    assert sent(script) == [("HEAD", f"/{ALIAS}"), ("GET", f"/{ALIAS}/_mapping"), ("HEAD", f"/{ALIAS}-access")]


def test_ensure_gives_an_index_built_before_the_projection_index_its_companion(script: Script) -> None:
    """Behind the alias: `<concrete>-access` with the alias `<alias>-access`, nothing else changes."""
    script.reply("HEAD", f"/{ALIAS}")
    script.reply("GET", f"/{ALIAS}/_mapping", {CONCRETE: {"mappings": {"properties": EXPECTED_PROPERTIES}}})
    script.reply("HEAD", f"/{ALIAS}-access", status=404).reply("HEAD", f"/_alias/{ALIAS}")
    script.reply("GET", f"/_alias/{ALIAS}", {CONCRETE: {"aliases": {ALIAS: {}}}}).reply("PUT", f"/{CONCRETE}-access")
    make_index(script).ensure()
    assert sent(script)[-1] == ("PUT", f"/{CONCRETE}-access")
    assert script.sent[-1].body["aliases"] == {f"{ALIAS}-access": {}}


def test_ensure_refuses_a_live_index_of_another_dimension(script: Script) -> None:
    live = {**EXPECTED_PROPERTIES, "embedding": {**EXPECTED_PROPERTIES["embedding"], "dimension": 768}}
    script.reply("HEAD", f"/{ALIAS}").reply("GET", f"/{ALIAS}/_mapping", {CONCRETE: {"mappings": {"properties": live}}})
    with pytest.raises(IndexDimensionMismatch, match=r"768-dimensional.*produces 3.*ki reindex"):
        make_index(script).ensure()
    assert [r.method for r in script.sent] == ["HEAD", "GET"]


def test_signature_index_names_are_legal_and_distinct() -> None:
    name = signature_index_name("knowledge-index-chunks-v1", "gateway:Text-Embedding-3-small:1536")
    assert name.startswith("knowledge-index-chunks-v1--gateway-text-embedding-3-small-1536-")
    assert name == name.lower() and not set(name) & set(' "*\\<|,>/?:#')
    assert name != signature_index_name("knowledge-index-chunks-v1", "gateway:text-embedding-3-small:1536")


# ----------------------------------------------------------- alias handling


def test_rebuild_creates_a_bare_index_and_swap_moves_the_alias_then_deletes_the_old(script: Script) -> None:
    old, new = f"{ALIAS}--old", f"{ALIAS}--new"
    for _ in range(2):
        script.reply("HEAD", f"/_alias/{ALIAS}").reply("GET", f"/_alias/{ALIAS}", {old: {"aliases": {ALIAS: {}}}})
    script.reply("PUT", f"/{new}").reply("PUT", f"/{new}-access").reply("HEAD", f"/{old}-access")
    script.reply("POST", "/_aliases", {"acknowledged": True}).reply("DELETE", f"/{old},{old}-access")
    index = make_index(script)
    fresh = index.rebuild_into(new)
    assert fresh.alias == new and fresh.access_alias == f"{new}-access"
    assert sent(script)[2:4] == [("PUT", f"/{new}-access"), ("PUT", f"/{new}")]
    assert "aliases" not in script.sent[2].body and "aliases" not in script.sent[3].body
    # A bulk load: no periodic refresh and no replica building its own graphs (end_bulk_load restores both).
    assert script.sent[3].body["settings"]["index"]["refresh_interval"] == "-1"
    assert script.sent[3].body["settings"]["index"]["number_of_replicas"] == 0
    index.swap_alias(new)
    assert sent(script)[-2:] == [("POST", "/_aliases"), ("DELETE", f"/{old},{old}-access")]
    assert script.sent[-2].body == {"actions": [
        {"add": {"index": new, "alias": ALIAS}}, {"add": {"index": f"{new}-access", "alias": f"{ALIAS}-access"}},
        {"remove": {"index": old, "alias": ALIAS}}, {"remove": {"index": f"{old}-access", "alias": f"{ALIAS}-access"}},
    ]}  # fmt: skip


def test_end_of_a_bulk_load_restores_the_refresh_interval_and_the_configured_replicas(script: Script) -> None:
    script.reply("PUT", f"/{ALIAS}/_settings").reply("POST", f"/{ALIAS},{ALIAS}-access/_refresh")
    make_index(script).end_bulk_load()
    assert script.sent[0].body == {"index": {"refresh_interval": None, "number_of_replicas": 1}}


def test_swap_replaces_a_pre_alias_index_of_the_same_name_atomically(script: Script) -> None:
    script.reply("HEAD", f"/_alias/{ALIAS}", status=404).reply("HEAD", f"/{ALIAS}").reply("HEAD", f"/{ALIAS}-access")
    script.reply("POST", "/_aliases", {"acknowledged": True})
    make_index(script).swap_alias("ki-chunks--new")
    assert script.sent[-1].body == {"actions": [
        {"add": {"index": "ki-chunks--new", "alias": ALIAS}}, {"add": {"index": "ki-chunks--new-access", "alias": f"{ALIAS}-access"}},
        {"remove_index": {"index": ALIAS}}, {"remove_index": {"index": f"{ALIAS}-access"}},
    ]}  # fmt: skip


def test_rebuild_refuses_the_live_index(script: Script) -> None:
    script.reply("HEAD", f"/_alias/{ALIAS}").reply("GET", f"/_alias/{ALIAS}", {CONCRETE: {"aliases": {ALIAS: {}}}})
    with pytest.raises(ValueError, match="live index"):
        make_index(script).rebuild_into(CONCRETE)


# ------------------------------------------------------------------- writes

CHUNK = IndexChunk(
    chunk_id=42,
    text="Die Kündigung ist spätestens am dritten Werktag eines Kalendermonats zulässig.",
    embedding=(0.6, 0.0, 0.8),
    project_id="p1",
    document_id="d1",
    document_version_id="v1",
    matter_id="m1",
    doc_type="contract.lease.residential",
    doc_type_ancestors=("contract", "contract.lease", "contract.lease.residential"),
    version_status="executed",
    language="de",
    doc_date=date(2021, 3, 1),
    chunk_kind="clause",
    clause_type="clause.termination",
    identifiers=("§ 573c BGB", "VIII ZR 123/20"),
    allowed_principals=("group:miete",),
    denied_principals=("user:x",),
    access_version=2,
    meta={"source_object_id": "so-1", "kind": "clause", "locus": "§ 4"},
)


def test_bulk_sends_one_request_of_index_update_and_delete_lines(script: Script) -> None:
    """The chunk lines carry no access projection; each version's projection is one document of the
    projection index after them, the same for a written chunk's version and for an access change."""
    script.reply("POST", f"/{ALIAS}/_bulk", {"errors": False, "items": []})
    projection = AccessProjection(
        document_id="d2", document_version_id="v2", chunk_ids=(43, 44), allowed_principals=("group:neu",), denied_principals=(),
        access_version=3,
    )  # fmt: skip
    make_index(script).bulk([IndexOp(CHUNK), UpdateAccessOp(projection), DeleteOp(7)])
    assert sent(script) == [("POST", f"/{ALIAS}/_bulk")]
    assert script.sent[0].body == [
        {"index": {"_id": "42"}},
        {
            "chunk_id": 42,
            "text": CHUNK.text,
            "embedding": [0.6, 0.0, 0.8],
            "project_id": "p1",
            "document_id": "d1",
            "document_version_id": "v1",
            "matter_id": "m1",
            "doc_type": "contract.lease.residential",
            "doc_type_ancestors": ["contract", "contract.lease", "contract.lease.residential"],
            "version_status": "executed",
            "language": "de",
            "doc_date": "2021-03-01",
            "chunk_kind": "clause",
            "clause_type": "clause.termination",
            "identifiers": ["§ 573c BGB", "VIII ZR 123/20"],
            "identifiers_text": "§ 573c BGB VIII ZR 123/20",
            "identifier_values": ["§ 573c BGB", "VIII ZR 123/20"],
            "courts": ["bgh"],
            "meta": {"source_object_id": "so-1", "kind": "clause", "locus": "§ 4"},
        },
        {"delete": {"_id": "7"}},
        {"index": {"_index": f"{ALIAS}-access", "_id": "v1"}},
        {"document_id": "d1", "document_version_id": "v1", "allowed_principals": ["group:miete"],
         "denied_principals": ["user:x"], "access_version": 2},
        {"index": {"_index": f"{ALIAS}-access", "_id": "v2"}},
        {"document_id": "d2", "document_version_id": "v2", "allowed_principals": ["group:neu"],
         "denied_principals": [], "access_version": 3},
    ]  # fmt: skip


def test_bulk_leaves_out_null_fields(script: Script) -> None:
    script.reply("POST", f"/{ALIAS}/_bulk", {"errors": False, "items": []})
    bare = IndexChunk(chunk_id=1, text="t", embedding=(1.0, 0.0, 0.0), project_id="p", document_id="d",
                      document_version_id="v")  # fmt: skip
    make_index(script).bulk([IndexOp(bare)])
    assert set(script.sent[0].body[1]) == {
        "chunk_id", "text", "embedding", "project_id", "document_id", "document_version_id", "doc_type_ancestors",
        "version_status", "chunk_kind", "identifiers", "identifiers_text", "identifier_values", "courts", "meta",
    }  # fmt: skip


def test_a_partial_bulk_failure_names_the_failed_chunk_ids_and_a_failed_projection_its_versions_chunks(script: Script) -> None:
    script.reply(
        "POST",
        f"/{ALIAS}/_bulk",
        {
            "errors": True,
            "items": [
                {"index": {"_id": "42", "status": 201, "result": "created"}},
                {"index": {"_id": "901", "status": 400, "error": {
                    "type": "mapper_parsing_exception", "reason": "Vector dimension mismatch. Expected: 3, Given: 4"}}},
                {"delete": {"_id": "7", "status": 404, "result": "not_found"}},
                {"index": {"_id": "v1", "status": 201, "result": "created"}},
                {"index": {"_id": "v2", "status": 429, "error": {
                    "type": "es_rejected_execution_exception", "reason": "queue full"}}},
            ],
        },
    )  # fmt: skip
    other = CHUNK.model_copy(update={"chunk_id": 901})
    projection = AccessProjection(document_id="d2", document_version_id="v2", chunk_ids=(50, 51), allowed_principals=(),
                                  denied_principals=(), access_version=1)  # fmt: skip
    with pytest.raises(BulkFailure) as failure:
        make_index(script).bulk([IndexOp(CHUNK), IndexOp(other), DeleteOp(7), UpdateAccessOp(projection)])
    assert failure.value.failed == {
        901: "mapper_parsing_exception: Vector dimension mismatch. Expected: 3, Given: 4",
        50: "access projection: es_rejected_execution_exception: queue full",
        51: "access projection: es_rejected_execution_exception: queue full",
    }


def test_delete_document_refreshes_then_deletes_by_query(script: Script) -> None:
    both = f"/{ALIAS},{ALIAS}-access"
    script.reply("POST", f"{both}/_refresh").reply("POST", f"/{ALIAS}/_delete_by_query", {"deleted": 3, "failures": []})
    script.reply("POST", f"/{ALIAS}-access/_delete_by_query", {"deleted": 1, "failures": []})
    make_index(script).delete_document("d1")
    assert sent(script) == [("POST", f"{both}/_refresh"), ("POST", f"/{ALIAS}/_delete_by_query"),
                            ("POST", f"/{ALIAS}-access/_delete_by_query")]  # fmt: skip
    assert script.sent[1].params == {"conflicts": "proceed"}
    assert script.sent[1].body == script.sent[2].body == {"query": {"term": {"document_id": "d1"}}}


# ------------------------------------------------------------------- filters


@pytest.mark.parametrize(
    ("scope", "clause"),
    [
        (ScopeFilter(project_ids=frozenset({"p1"})), {"bool": {"should": [
            {"bool": {"filter": [{"terms": {"project_id": ["p1"]}}]}}], "minimum_should_match": 1}}),
        (ScopeFilter(project_ids=frozenset({"p1"}), excluded_document_ids=frozenset({"d2", "d1"})), {"bool": {"should": [
            {"bool": {"filter": [{"terms": {"project_id": ["p1"]}}],
                      "must_not": [{"terms": {"document_id": ["d1", "d2"]}}]}}], "minimum_should_match": 1}}),
        (ScopeFilter(document_ids=frozenset({"d3"})), {"bool": {"should": [
            {"terms": {"document_id": ["d3"]}}], "minimum_should_match": 1}}),
        (SCOPE, SCOPE_CLAUSE),
        (ScopeFilter.nothing(), {"match_none": {}}),
        (ScopeFilter(), {"match_none": {}}),
    ],
    ids=["project", "project minus exclusions", "documents", "all three", "match_none", "empty"],
)  # fmt: skip
def test_the_compact_scope_becomes_one_bool_clause(scope: ScopeFilter, clause: dict) -> None:
    assert scope_clause(scope) == clause


ALL_FILTERS = SearchFilters(
    project_id="p1", matter_id="m1", doc_type="contract.lease", version_status="final", language="de",
    date_from=date(2020, 1, 1), date_to=date(2020, 12, 31), clause_type="clause.termination", chunk_kind="clause",
)  # fmt: skip
ALL_FILTER_CLAUSES = [
    SCOPE_CLAUSE,
    {"term": {"project_id": "p1"}},
    {"term": {"matter_id": "m1"}},
    {"term": {"doc_type_ancestors": "contract.lease"}},
    {"term": {"version_status": "final"}},
    {"term": {"language": "de"}},
    {"term": {"clause_type": "clause.termination"}},
    {"term": {"chunk_kind": "clause"}},
    {"range": {"doc_date": {"gte": "2020-01-01", "lte": "2020-12-31"}}},
]


# ---------------------------------------------------------------- msearch


def leg_response(*hits: tuple[str, float, dict]) -> dict:
    return {"status": 200, "hits": {"hits": [{"_id": i, "_score": s, "_source": src} for i, s, src in hits]}}


def source(chunk_id: int, **extra: object) -> dict:
    return {"chunk_id": chunk_id, "document_id": "d1", "document_version_id": "v1", "project_id": "p1",
            "version_status": "final", "chunk_kind": "chunk", **extra}  # fmt: skip


def one_preference(lines: list[dict]) -> str:
    """The `preference` of the header lines (every other line is a body), removed from them: one value."""
    found = {line.pop("preference") for line in lines[::2]}
    assert len(found) == 1, found
    return found.pop()


def preference_of(script: Script, request: MultiSearchRequest) -> str:
    script.reply("POST", "/_msearch", {"responses": [leg_response() for _ in request.legs_to_send()]})
    make_index(script).multi_search(request)
    return one_preference(script.sent[-1].body)


def test_every_leg_and_page_of_one_query_reads_one_shard_copy_and_other_queries_may_read_others(script: Script) -> None:
    """preference = stable hash of (query, principals, index slice): the same on every header line and
    for every page (the leg depth does not change it), another for another query, caller or slice."""
    base = MultiSearchRequest(
        query_text="Kündigung VIII ZR 123/20", query_vector=(0.6, 0.0, 0.8), scope=SCOPE, filters=ALL_FILTERS,
        size=50, identifier_terms=(("VIII ZR 123/20", 2.0),), principals=("anna", "group:miete"),
    )
    first = preference_of(script, base)
    assert preference_of(script, base) == first
    assert preference_of(script, base.model_copy(update={"size": 400})) == first
    others = {
        preference_of(script, base.model_copy(update=change))
        for change in ({"query_text": "Kündigung"}, {"principals": ("bernd",)}, {"scope": ScopeFilter(project_ids=frozenset({"p1"}))},
                       {"filters": SearchFilters()})
    }  # fmt: skip
    assert first not in others and len(others) == 4
    assert first == "ki" + first[2:] and len(first) == 26 and not first.startswith("_")


def test_pages_of_a_filter_listing_carry_one_preference(script: Script) -> None:
    for offset in (0, 10, 20):
        script.reply("POST", f"/{ALIAS}/_search", {"hits": {"hits": []}, "_shards": {"total": 1, "successful": 1}})
        make_index(script).search_filter(SCOPE, ALL_FILTERS, size=10, offset=offset)
    preferences = {request.params.get("preference") for request in script.sent}
    assert len(preferences) == 1 and preferences.pop().startswith("ki")


def test_one_msearch_carries_the_three_legs_under_the_same_strict_filter(script: Script) -> None:
    script.reply(
        "POST",
        "/_msearch",
        {"responses": [
            leg_response(("42", 7.5, source(42)), ("43", 2.25, source(43))),
            leg_response(("43", 0.9, source(43))),
            leg_response(("42", 3.0, source(42, identifiers=["VIII ZR 123/20"]))),
        ]},
    )  # fmt: skip
    request = MultiSearchRequest(
        query_text="Kündigung VIII ZR 123/20", query_vector=(0.6, 0.0, 0.8), scope=SCOPE, filters=ALL_FILTERS, size=50,
        identifier_terms=(("VIII ZR 123/20", 2.0),),
    )
    result = make_index(script).multi_search(request)
    assert sent(script) == [("POST", "/_msearch")]
    assert one_preference(script.sent[0].body).startswith("ki")
    assert script.sent[0].body == [
        {"index": ALIAS, "allow_partial_search_results": False},
        {"size": 50, "_source": SOURCE, "query": {"bool": {
            "must": [{"match": {"text": {"query": "Kündigung VIII ZR 123/20"}}}], "filter": ALL_FILTER_CLAUSES}}},
        {"index": ALIAS, "allow_partial_search_results": False},
        {"size": 50, "_source": SOURCE, "query": {"knn": {"embedding": {
            "vector": [0.6, 0.0, 0.8], "k": 50, "filter": {"bool": {"filter": ALL_FILTER_CLAUSES}}}}}},
        {"index": ALIAS, "allow_partial_search_results": False},
        {"size": 50, "_source": SOURCE, "query": {"bool": {
            "should": [{"term": {"identifier_values": {"value": "VIII ZR 123/20", "boost": 2.0}}}],
            "minimum_should_match": 1, "filter": ALL_FILTER_CLAUSES}},
         "sort": [{"_score": {"order": "desc"}}, {"chunk_id": {"order": "asc"}}]},
    ]  # fmt: skip
    assert result.hits(Leg.LEXICAL) == (
        LegHit(chunk_id=42, document_id="d1", document_version_id="v1", project_id="p1", version_status="final",
               chunk_kind="chunk", score=7.5, rank=0),
        LegHit(chunk_id=43, document_id="d1", document_version_id="v1", project_id="p1", version_status="final",
               chunk_kind="chunk", score=2.25, rank=1),
    )  # fmt: skip
    assert result.hits(Leg.SEMANTIC)[0].score == 0.9
    assert result.hits(Leg.IDENTIFIER)[0].identifiers == ("VIII ZR 123/20",)


def test_match_none_sends_only_the_semantic_leg_with_a_match_none_filter(script: Script) -> None:
    script.reply("POST", "/_msearch", {"responses": [leg_response()]})
    request = MultiSearchRequest(query_text="Kündigung", query_vector=(1.0, 0.0, 0.0), scope=ScopeFilter.nothing(), size=8)
    result = make_index(script).multi_search(request)
    one_preference(script.sent[0].body)
    assert script.sent[0].body == [
        {"index": ALIAS, "allow_partial_search_results": False},
        {"size": 8, "_source": SOURCE, "query": {"knn": {"embedding": {
            "vector": [1.0, 0.0, 0.0], "k": 8, "filter": {"bool": {"filter": [{"match_none": {}}]}}}}}},
    ]  # fmt: skip
    assert result.legs == {Leg.SEMANTIC: ()}


def test_no_request_when_no_leg_can_match(script: Script) -> None:
    request = MultiSearchRequest(query_text="x", query_vector=None, scope=ScopeFilter.nothing(), size=8)
    assert make_index(script).multi_search(request).legs == {}
    assert script.sent == []


def test_a_failed_leg_raises_naming_the_leg(script: Script) -> None:
    failed = {"status": 400, "error": {"type": "search_phase_execution_exception", "reason": "all shards failed"}}
    script.reply("POST", "/_msearch", {"responses": [failed]})
    # A failed k-NN leg looks whether `ki reindex` swapped in an index of another dimension: not here.
    script.reply("GET", f"/{ALIAS}/_mapping", {CONCRETE: {"mappings": {"properties": EXPECTED_PROPERTIES}}})
    request = MultiSearchRequest(query_text="", query_vector=(1.0, 0.0, 0.0), scope=SCOPE, size=8)
    with pytest.raises(SearchBackendError, match="semantic leg.*all shards failed"):
        make_index(script).multi_search(request)


def test_a_failed_knn_leg_on_an_index_rebuilt_for_another_embedder_says_restart(script: Script) -> None:
    failed = {"status": 400, "error": {"type": "illegal_argument_exception", "reason": "dimension mismatch"}}
    script.reply("POST", "/_msearch", {"responses": [failed]})
    live = {**EXPECTED_PROPERTIES, "embedding": {**EXPECTED_PROPERTIES["embedding"], "dimension": 768}}
    script.reply("GET", f"/{ALIAS}/_mapping", {CONCRETE: {"mappings": {"properties": live}}})
    request = MultiSearchRequest(query_text="", query_vector=(1.0, 0.0, 0.0), scope=SCOPE, size=8)
    with pytest.raises(IndexDimensionMismatch, match=r"768-dimensional.*ki reindex.*restart"):
        make_index(script).multi_search(request)


def test_an_http_error_becomes_a_search_backend_error(script: Script) -> None:
    script.reply("POST", "/_msearch", {"error": "boom"}, status=500)
    request = MultiSearchRequest(query_text="x", query_vector=None, scope=SCOPE, size=8)
    with pytest.raises(SearchBackendError, match="msearch"):
        make_index(script).multi_search(request)


# ------------------------------------------------------- filter search, count


def test_search_filter_sorts_by_date_collapses_versions_and_pages(script: Script) -> None:
    script.reply("POST", f"/{ALIAS}/_search", {"hits": {"hits": [
        {"_id": "42", "_source": {**source(42), "doc_date": "2021-03-01"}},
        {"_id": "50", "_source": {**source(50, document_version_id="v2")}},
    ]}})  # fmt: skip
    hits = make_index(script).search_filter(SCOPE, SearchFilters(chunk_kind="clause"), 20, offset=40)
    assert script.sent[0].body == {
        "size": 20,
        "from": 40,
        "_source": [*SOURCE[:-1], "doc_date"],
        "query": {"bool": {"filter": [SCOPE_CLAUSE, {"term": {"chunk_kind": "clause"}}]}},
        "sort": [
            {"doc_date": {"order": "desc", "missing": "_last"}},
            {"document_version_id": {"order": "asc"}},
            {"chunk_id": {"order": "asc"}},
        ],
        "collapse": {"field": "document_version_id"},
    }
    assert hits[0] == FilterHit(chunk_id=42, document_id="d1", document_version_id="v1", project_id="p1",
                                version_status="final", chunk_kind="chunk", doc_date=date(2021, 3, 1))  # fmt: skip
    assert hits[1].doc_date is None


def test_search_filter_under_match_none_sends_nothing(script: Script) -> None:
    assert make_index(script).search_filter(ScopeFilter.nothing(), SearchFilters(), 10) == []
    assert script.sent == []


def test_count_sends_the_filter_or_nothing(script: Script) -> None:
    script.reply("POST", f"/{ALIAS}/_count", {"count": 5}).reply("POST", f"/{ALIAS}/_count", {"count": 99})
    index = make_index(script)
    assert index.count(SCOPE, SearchFilters(language="de")) == 5
    assert index.count() == 99
    assert script.sent[0].body == {"query": {"bool": {"filter": [SCOPE_CLAUSE, {"term": {"language": "de"}}]}}}
    assert script.sent[1].body is None


def test_stored_fields_read_the_source_without_text_and_vector_and_the_versions_projection(script: Script) -> None:
    """The projection document wins over the fields an index built before it keeps on its chunks."""
    source_doc = {**source(42), "doc_date": "2021-03-01", "allowed_principals": ["group:old"], "access_version": 1}
    script.reply("POST", f"/{ALIAS}/_mget", {"docs": [{"found": True, "_id": "42", "_source": source_doc}]})
    projection = {"allowed_principals": ["group:a"], "denied_principals": ["bob"], "access_version": 4}
    script.reply("POST", f"/{ALIAS}-access/_mget", {"docs": [{"found": True, "_id": source_doc["document_version_id"],
                                                             "_source": projection}]})  # fmt: skip
    fields = make_index(script).stored_fields(42)
    assert script.sent[0].params == {"_source_excludes": "embedding,text,identifiers_text"}
    assert script.sent[1].body == {"ids": [source_doc["document_version_id"]]}
    assert fields is not None
    assert (fields["doc_date"], fields["allowed_principals"], fields["denied_principals"], fields["access_version"]) == (
        date(2021, 3, 1), ("group:a",), ("bob",), 4)
    assert fields["identifiers"] == () and fields["meta"] == {}


# ------------------------------------------------------------------ scores


@pytest.mark.parametrize("space_type", ["cosinesimil", "innerproduct", "l2"])
@pytest.mark.parametrize("cosine", [-0.8, -0.1, 0.0, 0.35, 0.99])
def test_the_knn_score_transform_is_undone_for_unit_vectors(space_type: str, cosine: float) -> None:
    # The OpenSearch "Spaces" table: cosinesimil (2 - d) / 2 with d = 1 - cos; innerproduct
    # ip + 1 for ip > 0 else 1 / (1 - ip); l2 1 / (1 + d) with d = |x - y|^2 = 2 - 2 cos.
    score = {
        "cosinesimil": (2 - (1 - cosine)) / 2,
        "innerproduct": cosine + 1 if cosine > 0 else 1 / (1 - cosine),
        "l2": 1 / (1 + (2 - 2 * cosine)),
    }[space_type]
    assert cosine_from_knn_score(score, space_type) == pytest.approx(cosine)


def test_the_index_converts_with_its_configured_space(script: Script) -> None:
    assert make_index(script).cosine(0.75) == pytest.approx(0.5)


def test_open_index_builds_the_opensearch_backend_from_settings_without_a_request() -> None:
    from ki_core.config import Settings
    from ki_core.identifiers import EXTRACTOR_VERSION
    from ki_core.search.index import SearchIndex, open_index

    settings = Settings(
        search={"backend": "opensearch", "opensearch": {"hosts": ["http://os.test:9200"]}},
        embedding={"provider": "hashing", "model": "t", "dimensions": 3},
    )
    index = open_index(settings)
    assert isinstance(index, OpenSearchIndex) and isinstance(index, SearchIndex)
    signature = f"hashing model=t/v1 dim=3 norm=l2 ids=v{EXTRACTOR_VERSION}"
    assert (index.alias, index.dimensions, index.signature) == ("knowledge-index-chunks-v1", 3, signature)
    index.close()


def test_ensure_refuses_a_live_index_whose_knn_engine_cannot_filter(script: Script) -> None:
    """An index built by hand (or an old deploy) with nmslib would search past the access filter."""
    embedding = {**EXPECTED_PROPERTIES["embedding"], "method": {**EXPECTED_PROPERTIES["embedding"]["method"], "engine": "nmslib"}}
    live = {**EXPECTED_PROPERTIES, "embedding": embedding}
    script.reply("HEAD", f"/{ALIAS}").reply("GET", f"/{ALIAS}/_mapping", {CONCRETE: {"mappings": {"properties": live}}})
    with pytest.raises(IndexMappingMismatch, match=r"nmslib k-NN engine.*ki reindex"):
        make_index(script).ensure()
    assert [r.method for r in script.sent] == ["HEAD", "GET"]


def test_a_live_index_with_the_old_german_analyzer_is_served_with_a_warning_naming_ki_reindex(
    script: Script, caplog: pytest.LogCaptureFixture
) -> None:
    live = {**EXPECTED_PROPERTIES, "text": {"type": "text", "analyzer": "german"}}
    script.reply("HEAD", f"/{ALIAS}").reply("GET", f"/{ALIAS}/_mapping", {CONCRETE: {"mappings": {"properties": live}}})
    script.reply("HEAD", f"/{ALIAS}-access")
    make_index(script).ensure()
    assert "ki reindex" in caplog.text and "'german'" in caplog.text


def test_a_search_on_a_node_that_accepts_and_never_answers_fails_within_two_seconds() -> None:
    """A hung node (stopped JVM, full GC, dead network path) must not hold a caller: the API answers 503."""
    import socket
    import time

    from ki_core.search.opensearch import make_client
    from ki_core.search.types import SearchBackendError

    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)  # connections are accepted by the kernel, and nobody ever reads or answers
        settings = OpenSearchSettings(hosts=[f"http://127.0.0.1:{hung.getsockname()[1]}"])
        index = OpenSearchIndex(make_client(settings), alias=ALIAS, dimensions=3, signature=SIGNATURE,
                                retrieval=RetrievalSettings(), opensearch=settings)
        request = MultiSearchRequest(query_text="Kündigung", query_vector=(1.0, 0.0, 0.0),
                                     scope=ScopeFilter(project_ids=frozenset(["p1"])), size=8)
        for search in (lambda: index.multi_search(request),
                       lambda: index.search_filter(ScopeFilter(project_ids=frozenset(["p1"])), SearchFilters(), 10)):
            started = time.monotonic()
            with pytest.raises(SearchBackendError):
                search()
            assert time.monotonic() - started < 2.0
