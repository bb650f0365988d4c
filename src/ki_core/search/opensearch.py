"""The production backend: one OpenSearch index behind an alias, written by `_bulk`, read by `_msearch`.

Request bodies are built by small pure functions (`index_body`, `filter_clauses`,
`leg_body`, `bulk_lines`, ...) so tests pin them exactly without a node. Reads and
writes go through the alias (retrieval.index_name); the concrete index is named from
the embedding signature, so `ki reindex` can build the next one beside it and swap.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from typing import Any

import orjson
from opensearchpy import OpenSearch
from opensearchpy.exceptions import OpenSearchException, RequestError

from ki_core.config import FILTERING_KNN_ENGINES, OpenSearchSettings, RetrievalSettings
from ki_core.search.contract import (
    IDENTIFIER_TOKEN_PATTERN,
    BulkOperation,
    IndexOp,
    UpdateAccessOp,
    update_access_ops,
)
from ki_core.search.signature import IndexSignature, check_recorded
from ki_core.search.constraint import (
    AnyOf,
    Constraint,
    DateMatch,
    KeywordMatch,
    KeywordPattern,
    KeywordPrefix,
    TextMatch,
    TextPrefix,
    scores_text,
)
from ki_core.search.document_sets import document_search
from ki_core.search.types import (
    DERIVED_KEYWORD_FIELDS,
    FILTER_KEYWORD_FIELDS,
    TERM_FILTER_FIELDS,
    AccessProjection,
    BulkFailure,
    FilterHit,
    IndexChunk,
    IndexDimensionMismatch,
    IndexMappingMismatch,
    Leg,
    check_result_window,
    LegHit,
    LegHits,
    MultiSearchRequest,
    MultiSearchResult,
    ScopeFilter,
    SearchBackendError,
    SearchFilters,
)

log = logging.getLogger(__name__)

# Items per _bulk request: 250 chunks of a 1536-dim embedding are about 4 MB of JSON, far under
# the default http.max_content_length (100 MB). bench/bare_node.py, 2,000 chunks of 384 dims, two
# requests in flight: 500 per request made 81 chunks/s against 131 for parallel_bulk at 250, whose
# smaller requests keep both in flight to the end.
BULK_BATCH_ITEMS = 250
# Chunks per _mget of the reconcile: ~1 KB of stored fields each without text and vector.
MGET_BATCH_IDS = 1_000
# What a leg hit carries back; the embedding is never in a response.
LEG_SOURCE_FIELDS = [
    "chunk_id",
    "document_id",
    "document_version_id",
    "project_id",
    "version_status",
    "chunk_kind",
    "identifiers",
]
FILTER_SOURCE_FIELDS = [*LEG_SOURCE_FIELDS[:-1], "doc_date"]
IDENTIFIER_ANALYZER = "ki_identifier"
# German text as the embedded backend's tantivy analyzer cuts it (text_index.german_analyzer):
# split on anything but letters and digits, drop tokens over 63 characters, lowercase, German
# stop words, Snowball stemmer. The built-in `german` analyzer (light_german stemmer,
# umlaut folding) put lexical nDCG@10 on the dev statute queries 0.016 off the embedded
# backend; this one agrees within 0.001 (Lucene's older Snowball still differs on ~2 % of tokens).
TEXT_ANALYZER = "ki_german"
# What stored_fields returns: IndexChunk's fields without text and vector.
STORED_FIELDS = [name for name in IndexChunk.model_fields if name not in ("text", "embedding")]

_KEYWORD = {"type": "keyword"}
# The filter columns plus the identifier-derived and the inspection-only keyword fields.
_KEYWORD_FIELDS = (*FILTER_KEYWORD_FIELDS, *DERIVED_KEYWORD_FIELDS, "identifiers")
# The access projection (retrieval.md: "for inspection and export only"; the scope that filters is
# compiled in SQL to projects and documents) is one small document per version in a companion index
# `<index>-access` behind the alias `<alias>-access`, never a field of the chunks: a partial update of
# a chunk rewrites the whole document, vector included, into the HNSW graph (bench/bare_node.py (c),
# 1,000 documents on a loaded 2-core node: 32 documents/s by partial updates of their chunks, 3,392
# by projection documents), while an access-only change now writes one tiny document per version
# and leaves every chunk, its vector and its graph node as they were.
ACCESS_SUFFIX = "-access"
ACCESS_FIELDS = ("allowed_principals", "denied_principals", "access_version")
# Versions per page of a boolean query's set (a composite aggregation; search.max_buckets is 65,535).
VERSION_PAGE = 10_000


# opensearch-py logs every failed attempt as a WARNING with its traceback; our calls raise SearchBackendError
# with the same detail. In the api process (MCP's rich log handler) rendering those took seconds per search
# while a node was down, so a 503 came after 10 s instead of at once.
logging.getLogger("opensearch").setLevel(logging.ERROR)


def make_client(settings: OpenSearchSettings, **transport: Any) -> OpenSearch:
    """A client from search.opensearch; `transport` reaches the connection (tests record there)."""
    auth = None
    if settings.username:
        password = settings.password.get_secret_value() if settings.password else ""
        auth = (settings.username, password)
    return OpenSearch(
        hosts=settings.hosts,
        http_auth=auth,
        use_ssl=settings.use_ssl,
        verify_certs=settings.verify_certs,
        ca_certs=settings.ca_certs,
        timeout=settings.timeout_seconds,
        max_retries=settings.max_retries,
        # A refused connection is retried at once; a timeout is not: (max_retries + 1) x timeout kept
        # a search from answering for 40 s while a node hung. A task's own retry covers writes.
        retry_on_timeout=False,
        **transport,
    )


# The `_meta` key of the mapping that names the SQL store filling the index (ki_core.store_identity).
STORE_ID_META = "ki_store_id"
# ...and the one recording what built its vectors and identifiers (ki_core.search.signature).
SIGNATURE_META = "ki_index_signature"
# A search re-reads the recorded signature at most this often (a write always does): after
# `ki reindex` swapped the alias, a process of the old configuration refuses within this time.
SIGNATURE_RECHECK_SECONDS = 2.0


def signature_index_name(base: str, signature: str) -> str:
    """`<base>--<slug>-<hash8>`: readable, a legal index name, distinct per signature."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", signature.lower()).strip("-._")
    digest = hashlib.sha256(signature.encode("utf-8")).hexdigest()[:8]
    return f"{base.lower()}--{slug}-{digest}"


# ----------------------------------------------------------------- index body


def mapping_properties(retrieval: RetrievalSettings, dimensions: int) -> dict[str, Any]:
    """The spec's field table; chunk_id is kept as a field for sorting and reading hits."""
    properties: dict[str, Any] = {
        "chunk_id": {"type": "long"},
        "text": {"type": "text", "analyzer": TEXT_ANALYZER},
        "embedding": {
            "type": "knn_vector",
            "dimension": dimensions,
            "method": {
                "name": "hnsw",
                "engine": retrieval.vector_engine,
                "space_type": retrieval.vector_space_type,
                "parameters": {"m": retrieval.hnsw_m, "ef_construction": retrieval.hnsw_ef_construction},
            },
        },
        "doc_date": {"type": "date", "format": "strict_date"},
        "identifiers_text": {"type": "text", "analyzer": IDENTIFIER_ANALYZER},
        "meta": {"type": "object", "enabled": False},
    }
    properties.update({name: dict(_KEYWORD) for name in _KEYWORD_FIELDS})
    # The identifier leg's BM25, as tantivy's: a value repeated once per identifier it stands for
    # (freqs), weighed by how few values the chunk carries (norms).
    properties["identifier_values"] = {**_KEYWORD, "norms": True, "index_options": "freqs"}
    return dict(sorted(properties.items()))


def index_settings(opensearch: OpenSearchSettings) -> dict[str, Any]:
    return {
        "index": {
            "knn": True,
            "number_of_shards": opensearch.number_of_shards,
            "number_of_replicas": opensearch.number_of_replicas,
        },
        "analysis": {
            "tokenizer": {
                IDENTIFIER_ANALYZER: {"type": "pattern", "pattern": IDENTIFIER_TOKEN_PATTERN, "group": 0},
                TEXT_ANALYZER: {"type": "pattern", "pattern": r"[^\p{L}\p{N}]+"},
            },
            "filter": {
                f"{TEXT_ANALYZER}_long": {"type": "length", "max": 63},
                f"{TEXT_ANALYZER}_stop": {"type": "stop", "stopwords": "_german_"},
                f"{TEXT_ANALYZER}_stemmer": {"type": "snowball", "language": "German"},
            },
            "analyzer": {
                IDENTIFIER_ANALYZER: {"type": "custom", "tokenizer": IDENTIFIER_ANALYZER, "filter": ["lowercase"]},
                TEXT_ANALYZER: {
                    "type": "custom",
                    "tokenizer": TEXT_ANALYZER,
                    "filter": [f"{TEXT_ANALYZER}_long", "lowercase", f"{TEXT_ANALYZER}_stop", f"{TEXT_ANALYZER}_stemmer"],
                },
            },
        },
    }


def index_body(
    retrieval: RetrievalSettings, opensearch: OpenSearchSettings, dimensions: int, alias: str | None
) -> dict[str, Any]:
    """Create-index body. The vector is not kept in _source: nothing reads it back (responses
    exclude it, `ki reindex` takes vectors from SQL, exact scoring reads the vector files), and no
    chunk is ever partially updated (a partial _update re-indexes from _source and would drop it;
    the access projection has its own index): a chunk's stored source shrinks from about 9 KB of
    JSON, mostly the vector, to its text and fields."""
    body: dict[str, Any] = {
        "settings": index_settings(opensearch),
        "mappings": {"dynamic": False, "_source": {"excludes": ["embedding"]},
                     "properties": mapping_properties(retrieval, dimensions)},
    }  # fmt: skip
    if alias:
        body["aliases"] = {alias: {}}
    return body


def access_index_body(opensearch: OpenSearchSettings, alias: str | None) -> dict[str, Any]:
    """The companion index of one chunk index: one document per version, id = version id."""
    keyword = dict(_KEYWORD)
    body: dict[str, Any] = {
        "settings": {"index": {"number_of_shards": 1, "number_of_replicas": opensearch.number_of_replicas}},
        "mappings": {"dynamic": False, "properties": {
            "document_id": keyword, "document_version_id": keyword, "allowed_principals": keyword,
            "denied_principals": keyword, "access_version": {"type": "integer"},
        }},
    }  # fmt: skip
    if alias:
        body["aliases"] = {alias + ACCESS_SUFFIX: {}}
    return body


def live_dimension(properties: dict[str, Any]) -> int | None:
    return properties.get("embedding", {}).get("dimension")


def live_engine(properties: dict[str, Any]) -> str | None:
    return properties.get("embedding", {}).get("method", {}).get("engine")


def missing_properties(live: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """Fields the live mapping lacks: added at start-up; existing fields are never changed."""
    return {name: spec for name, spec in wanted.items() if name not in live}


# -------------------------------------------------------------------- filters

# One `terms` query may list at most index.max_terms_count values (65,536 by default); a longer
# list is split into several clauses of the same meaning (OR for admitted, each a must_not for
# excluded ids), so a scope of any size keeps working.
MAX_TERMS_PER_CLAUSE = 65_536


def terms_clauses(field: str, values: Iterable[str]) -> list[dict[str, Any]]:
    ordered = sorted(values)
    return [
        {"terms": {field: ordered[start : start + MAX_TERMS_PER_CLAUSE]}}
        for start in range(0, len(ordered), MAX_TERMS_PER_CLAUSE)
    ]


def scope_clause(scope: ScopeFilter) -> dict[str, Any]:
    """The compact scope as one clause: (projects minus exclusions) OR listed documents."""
    if scope.match_none:
        return {"match_none": {}}
    should: list[dict[str, Any]] = []
    if scope.project_ids:
        projects: dict[str, Any] = {"filter": terms_clauses("project_id", scope.project_ids)}
        if scope.excluded_document_ids:
            projects["must_not"] = terms_clauses("document_id", scope.excluded_document_ids)
        should.append({"bool": projects})
    should += terms_clauses("document_id", scope.document_ids)
    return {"bool": {"should": should, "minimum_should_match": 1}}


def metadata_clauses(filters: SearchFilters) -> list[dict[str, Any]]:
    clauses: list[dict[str, Any]] = [
        {"term": {field: value}}
        for name, field in TERM_FILTER_FIELDS.items()
        if (value := getattr(filters, name)) is not None
    ]
    if filters.date_from or filters.date_to:
        bounds = {}
        if filters.date_from:
            bounds["gte"] = filters.date_from.isoformat()
        if filters.date_to:
            bounds["lte"] = filters.date_to.isoformat()
        clauses.append({"range": {"doc_date": bounds}})
    return clauses


def filter_clauses(
    scope: ScopeFilter | None, filters: SearchFilters | None, constraint: Constraint | None = None
) -> list[dict[str, Any]]:
    """The strict filter every leg carries: scope first, then the metadata filters, then the query's constraint."""
    clauses = [scope_clause(scope)] if scope is not None else []
    clauses += metadata_clauses(filters) if filters is not None else []
    return clauses + ([constraint_clause(constraint)] if constraint is not None else [])


def constraint_clause(node: Constraint) -> dict[str, Any]:
    """The query language's tree as an OpenSearch query, meaning what TextIndex.constraint_query means."""
    if isinstance(node, TextMatch):
        return {"match_phrase": {"text": {"query": node.text}}}
    if isinstance(node, TextPrefix):
        return {"prefix": {"text": {"value": node.prefix}}}
    if isinstance(node, KeywordMatch):
        return {"terms": {node.field: list(node.values)}} if node.values else {"match_none": {}}
    if isinstance(node, KeywordPrefix):
        return {"prefix": {node.field: {"value": node.prefix}}}
    if isinstance(node, KeywordPattern):
        return {"regexp": {node.field: {"value": node.pattern}}}
    if isinstance(node, DateMatch):
        bounds = {key: day.isoformat() for key, day in (("gte", node.start), ("lte", node.end)) if day}
        return {"range": {"doc_date": bounds}}
    if isinstance(node, AnyOf):
        return {"bool": {"should": [constraint_clause(child) for child in node.any], "minimum_should_match": 1}}
    must = [constraint_clause(child) for child in node.must] or [{"match_all": {}}]
    return {"bool": {"must": must, "must_not": [constraint_clause(child) for child in node.must_not]}}


def version_set_body(
    scope: ScopeFilter, filters: SearchFilters, condition: Constraint, after: dict[str, str] | None = None
) -> dict[str, Any]:
    """The (version, document) pairs of the chunks in scope that satisfy one condition, a page at a
    time (a composite aggregation pages through any number of versions)."""
    composite: dict[str, Any] = {
        "size": VERSION_PAGE,
        "sources": [{"version": {"terms": {"field": "document_version_id"}}},
                    {"document": {"terms": {"field": "document_id"}}}],
    }  # fmt: skip
    if after is not None:
        composite["after"] = after
    return {
        "size": 0,
        "query": {"bool": {"filter": filter_clauses(scope, filters, condition)}},
        "aggs": {"versions": {"composite": composite}},
    }


def version_page(answer: dict[str, Any], index: str) -> dict[str, Any]:
    """One page of a version set's aggregation; an error or a shard missing raises (never a short set)."""
    error = answer.get("error")
    if error is not None:
        reason = f"{error.get('type')}: {error_reason(error)}" if isinstance(error, dict) else str(error)
        raise SearchBackendError(f"a version set on index {index} failed ({answer.get('status')}): {reason}")
    if (failure := shard_failure("a version set", index, answer)) is not None:
        raise failure
    return answer["aggregations"]["versions"]


def _version_header(index: str) -> dict[str, Any]:
    """A version set reaches every shard or fails (a short set would be a wrong count)."""
    return {"index": index, "allow_partial_search_results": False}


# ----------------------------------------------------------------------- legs


def leg_body(leg: Leg, request: MultiSearchRequest) -> dict[str, Any]:
    if request.constraint is not None and leg is Leg.LEXICAL:
        return constrained_lexical_body(request)
    clauses = filter_clauses(request.scope, request.filters, request.constraint)
    body: dict[str, Any] = {"size": request.size, "_source": LEG_SOURCE_FIELDS}
    if leg is Leg.SEMANTIC:
        knn = {"vector": list(request.query_vector or ()), "k": request.size}
        knn["filter"] = {"bool": {"filter": clauses}}
        body["query"] = {"knn": {"embedding": knn}}
        return body
    if leg is Leg.IDENTIFIER:
        body["query"] = {"bool": {"should": identifier_clauses(request.identifier_terms),
                                  "minimum_should_match": 1, "filter": clauses}}  # fmt: skip
        # Equal weights are common (many chunks citing one norm): ties break on chunk id, as embedded.
        body["sort"] = [{"_score": {"order": "desc"}}, {"chunk_id": {"order": "asc"}}]
        return body
    match = {"match": {"text": {"query": request.query_text}}}
    body["query"] = {"bool": {"must": [match], "filter": clauses}}
    return body


def constrained_lexical_body(request: MultiSearchRequest) -> dict[str, Any]:
    """A boolean query's lexical leg: the constraint scored by BM25 (with no text condition in it,
    the set in chunk id order), inside the scope and filters; ties on chunk id, as embedded."""
    assert request.constraint is not None
    scored = constraint_clause(request.constraint) if scores_text(request.constraint) else {"match_all": {}}
    return {
        "size": request.size,
        "_source": LEG_SOURCE_FIELDS,
        "query": {"bool": {"must": [scored], "filter": filter_clauses(request.scope, request.filters, request.constraint)}},
        "sort": [{"_score": {"order": "desc"}}, {"chunk_id": {"order": "asc"}}],
    }


def identifier_clauses(terms: tuple[tuple[str, float], ...]) -> list[dict[str, Any]]:
    """A value matches a chunk that carries it or a reference below it (identifier_values holds
    each value's ancestors), never one whose identifiers merely share its tokens (amendments.md
    1); BM25 times its weight, on a keyword field with norms and freqs (as tantivy's raw field)."""
    return [{"term": {"identifier_values": {"value": value, "boost": weight}}} for value, weight in terms]


def search_preference(index: str, query: str, principals: Iterable[str], clauses: list[dict[str, Any]]) -> str:
    """The `preference` of every search of one query: a stable hash of (query, principals, index
    slice: the index and the filter clauses), so each page of it reads the same shard copies and the
    pages are one ranking (amendments.md 2), while other queries spread over the replicas. Stable
    across processes (sha256, not hash()): page 2 may reach another API worker. Never starts with
    `_`, which would name a built-in preference."""
    slice_ = json.dumps([index, query, sorted(principals), clauses], sort_keys=True, ensure_ascii=False)
    return "ki" + hashlib.sha256(slice_.encode("utf-8")).hexdigest()[:24]


def msearch_lines(index: str, request: MultiSearchRequest) -> list[dict[str, Any]]:
    """One header and body per leg. A leg that cannot search every shard fails whole: a ranking
    over part of the index would be a silently short list. Every header carries one preference."""
    preference = search_preference(
        index, request.query_text, request.principals, filter_clauses(request.scope, request.filters)
    )
    header = {"index": index, "allow_partial_search_results": False, "preference": preference}
    lines: list[dict[str, Any]] = []
    for leg in request.legs_to_send():
        lines += [dict(header), leg_body(leg, request)]
    return lines


def shard_failure(what: str, index: str, response: dict[str, Any]) -> SearchBackendError | None:
    """A response that reached only some shards, as an error naming the index.

    A failed shard is counted in `_shards.failed`, but an unassigned one (its node is gone) only
    shows as `successful + skipped < total` (a count reports `failed: 0` then)."""
    shards = response.get("_shards") or {}
    total = int(shards.get("total") or 0)
    answered = int(shards.get("successful") or 0) + int(shards.get("skipped") or 0)
    if not shards.get("failed") and answered >= total:
        return None
    reasons = sorted(
        {
            f"{(f.get('reason') or {}).get('type')}: {(f.get('reason') or {}).get('reason')}"
            for f in shards.get("failures") or []
        }
    )
    detail = f" ({'; '.join(reasons[:3])})" if reasons else ""
    return SearchBackendError(
        f"{what} on index {index} reached {shards.get('successful', 0)} of {total} shards{detail}; "
        "the index is partly unavailable (see _cluster/health)"
    )


def leg_hits(response: dict[str, Any]) -> LegHits:
    return LegHits.of(
        LegHit(
            chunk_id=int(hit["_id"]),
            document_id=hit["_source"]["document_id"],
            document_version_id=hit["_source"]["document_version_id"],
            project_id=hit["_source"]["project_id"],
            version_status=hit["_source"]["version_status"],
            chunk_kind=hit["_source"]["chunk_kind"],
            identifiers=tuple(hit["_source"].get("identifiers") or ()),
            score=float(hit["_score"]),
            rank=rank,
        )
        for rank, hit in enumerate(response["hits"]["hits"])
    )


def error_reason(error: dict[str, Any]) -> str:
    """The node's most specific reason: its root cause ("too many terms"), else the first reason
    down the caused_by chain (a search rejected for missing shards says why only there)."""
    roots = [f"{r.get('type')}: {r.get('reason')}" for r in error.get("root_cause") or [] if r.get("reason")]
    if roots:
        return "; ".join(dict.fromkeys(roots))
    cause: dict[str, Any] | None = error
    while cause:
        if cause.get("reason"):
            return str(cause["reason"])
        cause = cause.get("caused_by")
    return ""


def transport_detail(exc: OpenSearchException) -> str:
    """Status, error type and the node's own reason, when the response carried them."""
    info = getattr(exc, "info", None)
    error = info.get("error") if isinstance(info, dict) else None
    if isinstance(error, dict):
        return f"{getattr(exc, 'status_code', '?')} {error.get('type')}: {error_reason(error)}"
    return str(exc)


def leg_error(leg: Leg, response: dict[str, Any], index: str = "") -> SearchBackendError | None:
    error = response.get("error")
    if error is None:
        return shard_failure(f"the {leg} leg", index, response)
    if isinstance(error, dict):
        error = f"{error.get('type')}: {error_reason(error)}"
    where = f" on index {index}" if index else ""
    return SearchBackendError(f"the {leg} leg of _msearch failed{where} ({response.get('status')}): {error}")


def cosine_from_knn_score(score: float, space_type: str) -> float:
    """Undo the k-NN plugin's score transform (OpenSearch 'Spaces' table) for federation.

    cosinesimil: score = (1 + cos) / 2. innerproduct: ip + 1 for ip > 0, else 1 / (1 - ip).
    l2 is converted assuming unit vectors (|x - y|^2 = 2 - 2 cos).
    """
    if space_type == "cosinesimil":
        return 2.0 * score - 1.0
    if space_type == "innerproduct":
        return score - 1.0 if score >= 1.0 else 1.0 - 1.0 / score
    if space_type == "l2":
        return 1.0 - (1.0 / score - 1.0) / 2.0
    raise ValueError(f"no cosine for k-NN space type {space_type!r}")


# ---------------------------------------------------------------------- writes


def chunk_document(chunk: IndexChunk, derived: dict[tuple[str, ...], dict[str, Any]] | None = None) -> dict[str, Any]:
    """The _source of one chunk: every field of the spec's table but the access projection, nulls left out.
    `derived` keeps the identifier-derived fields per identifier tuple across the chunks of one request
    (every chunk of a document has its identifiers; deriving them was most of this function's time)."""
    document = chunk.model_dump(exclude_none=True, exclude=_NOT_IN_CHUNK_DOCUMENT)
    document["embedding"] = chunk.embedding
    if chunk.doc_date is not None:
        document["doc_date"] = chunk.doc_date.isoformat()
    cache = {} if derived is None else derived
    if chunk.identifiers not in cache:
        cache[chunk.identifiers] = {"identifiers_text": chunk.identifiers_text,
                                    "identifier_values": chunk.identifier_values, "courts": chunk.courts}  # fmt: skip
    document.update(cache[chunk.identifiers])
    return document


# The access projection (its own index) and the vector (set from the tuple, not copied by model_dump).
_NOT_IN_CHUNK_DOCUMENT = {*ACCESS_FIELDS, "embedding"}


def bulk_body(lines: list[dict[str, Any]]) -> bytes:
    """ndjson of the lines, by orjson (tuples as arrays, a tenth of the stdlib encoder's time)."""
    return b"\n".join(map(orjson.dumps, lines)) + b"\n"


def projection_document(source: AccessProjection | IndexChunk) -> dict[str, Any]:
    """One version's access projection, whole (`delete_document` finds it by its document id); from an
    access-only change or from any written chunk of the version (plain fields: no model per chunk)."""
    return {
        "document_id": source.document_id,
        "document_version_id": source.document_version_id,
        "allowed_principals": list(source.allowed_principals),
        "denied_principals": list(source.denied_principals),
        "access_version": source.access_version,
    }


def bulk_lines(operations: Iterable[BulkOperation], access_index: str) -> list[dict[str, Any]]:
    """_bulk action/source lines; chunk lines address the URL's index (the alias), the projection
    lines `access_index`: one per version, after the chunk lines, the last of the version's operations
    winning. A written chunk and an access-only change write the same whole projection document."""
    lines: list[dict[str, Any]] = []
    projections: dict[str, AccessProjection | IndexChunk] = {}
    derived: dict[tuple[str, ...], dict[str, Any]] = {}
    for op in operations:
        if isinstance(op, IndexOp):
            lines += [{"index": {"_id": str(op.chunk.chunk_id)}}, chunk_document(op.chunk, derived)]
            projections[op.chunk.document_version_id] = op.chunk
        elif isinstance(op, UpdateAccessOp):
            projections[op.projection.document_version_id] = op.projection
        else:
            lines.append({"delete": {"_id": str(op.chunk_id)}})
    for version, source in projections.items():
        lines += [{"index": {"_index": access_index, "_id": version}}, projection_document(source)]
    return lines


def bulk_failures(response: dict[str, Any], chunks_of: dict[str, tuple[int, ...]] | None = None) -> dict[int, str]:
    """Failed items by chunk id; a delete of a missing chunk (404 not_found) is no failure. The last
    len(chunks_of) items are the versions' projections (bulk_lines' order): a failed one counts for
    its version's chunks."""
    if not response.get("errors"):
        return {}
    items = response["items"]
    versions = list(chunks_of or {})
    failed: dict[int, str] = {}
    for position, item in enumerate(items):
        ((_action, result),) = item.items()
        error = result.get("error")
        if not error:
            continue
        reason = f"{error.get('type')}: {error.get('reason')}" if isinstance(error, dict) else str(error)
        projection = position - (len(items) - len(versions))
        if projection >= 0:
            failed.update(dict.fromkeys((chunks_of or {})[versions[projection]], f"access projection: {reason}"))
        else:
            failed[int(result["_id"])] = reason
    return failed


def versions_in(operations: Iterable[BulkOperation]) -> dict[str, tuple[int, ...]]:
    """{version id: its chunk ids} of one request, to name a failed projection's chunks."""
    chunks: dict[str, list[int]] = {}
    for op in operations:
        if isinstance(op, IndexOp):
            chunks.setdefault(op.chunk.document_version_id, []).append(op.chunk.chunk_id)
        elif isinstance(op, UpdateAccessOp):
            chunks.setdefault(op.projection.document_version_id, []).extend(op.projection.chunk_ids)
    return {version: tuple(ids) for version, ids in chunks.items()}


def _chunk_ids_repeat(batches: list[list[BulkOperation]]) -> bool:
    counts = Counter(chunk_id for batch in batches for op in batch for chunk_id in op.chunk_ids)
    return any(count > 1 for count in counts.values())


def _batches(operations: list[BulkOperation], size: int) -> Iterable[list[BulkOperation]]:
    for start in range(0, len(operations), size):
        yield operations[start : start + size]


# --------------------------------------------------------------- filter search


def filter_search_body(
    scope: ScopeFilter, filters: SearchFilters, size: int, offset: int
) -> dict[str, Any]:
    """doc_date descending, one hit per version (collapse), ties on version id then chunk id."""
    return {
        "size": size,
        "from": offset,
        "_source": FILTER_SOURCE_FIELDS,
        "query": {"bool": {"filter": filter_clauses(scope, filters)}},
        "sort": [
            {"doc_date": {"order": "desc", "missing": "_last"}},
            {"document_version_id": {"order": "asc"}},
            {"chunk_id": {"order": "asc"}},
        ],
        "collapse": {"field": "document_version_id"},
    }


def filter_hit(hit: dict[str, Any]) -> FilterHit:
    source = hit["_source"]
    return FilterHit(
        chunk_id=int(hit["_id"]),
        document_id=source["document_id"],
        document_version_id=source["document_version_id"],
        project_id=source["project_id"],
        version_status=source["version_status"],
        chunk_kind=source["chunk_kind"],
        doc_date=source.get("doc_date"),
    )


def stored_fields_from_source(source: dict[str, Any]) -> dict[str, Any]:
    """_source in the shape of the embedded backend's stored fields: tuples, dates, every key."""
    fields = {name: source.get(name) for name in STORED_FIELDS}
    for name in ("doc_type_ancestors", "identifiers", "allowed_principals", "denied_principals"):
        fields[name] = tuple(fields[name] or ())
    fields["doc_date"] = date.fromisoformat(fields["doc_date"]) if fields["doc_date"] else None
    fields["meta"] = fields["meta"] or {}
    fields["access_version"] = fields["access_version"] or 0
    return fields


def count_body(scope: ScopeFilter | None, filters: SearchFilters | None) -> dict[str, Any] | None:
    clauses = filter_clauses(scope, filters)
    return {"query": {"bool": {"filter": clauses}}} if clauses else None


# ---------------------------------------------------------------------- index


class OpenSearchIndex:
    """SearchIndex over an OpenSearch alias. `target` is what reads and writes address."""

    def __init__(
        self,
        client: OpenSearch,
        *,
        alias: str,
        dimensions: int,
        signature: str,
        retrieval: RetrievalSettings,
        opensearch: OpenSearchSettings,
        expected_signature: IndexSignature | None = None,
    ):
        self.client = client
        self.alias = alias
        # The version projections of this index's chunks (ACCESS_SUFFIX); created and swapped with it.
        self.access_alias = alias + ACCESS_SUFFIX
        self.dimensions = dimensions
        self.signature = signature
        self.retrieval = retrieval
        self.opensearch = opensearch
        # What this process embeds with: a new index records it, every read and write checks it (None: unchecked).
        self.expected_signature = expected_signature
        self._signature_checked_at = -SIGNATURE_RECHECK_SECONDS

    def __enter__(self) -> OpenSearchIndex:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------ lifecycle

    def ensure(self) -> None:
        """Create `<alias>--<signature>` with the alias on first start; otherwise verify."""
        if not self._call(self.client.indices.exists, index=self.alias):
            self._create(signature_index_name(self.alias, self.signature), alias=self.alias)
            return
        wanted = mapping_properties(self.retrieval, self.dimensions)
        mappings = self._call(self.client.indices.get_mapping, index=self.alias)
        for concrete, mapping in mappings.items():
            live = mapping.get("mappings", {}).get("properties", {})
            self._check_dimension(concrete, live_dimension(live))
            self._check_engine(concrete, live_engine(live))
            self._warn_on_old_text_analyzer(concrete, live)
            missing = missing_properties(live, wanted)
            if missing:
                self._call(self.client.indices.put_mapping, index=concrete, body={"properties": missing})
        self._ensure_access_index()

    def _create(self, name: str, alias: str | None, bulk_load: bool = False) -> None:
        """The chunk index `name` and its projection index `name-access` (aliases `alias`, `alias-access`)."""
        body = index_body(self.retrieval, self.opensearch, self.dimensions, alias)
        if self.expected_signature is not None:
            body["mappings"]["_meta"] = {SIGNATURE_META: self.expected_signature.model_dump()}
        if bulk_load:
            # While `ki reindex` fills it nobody searches it: no periodic refresh, and no replica (each
            # replica would build its own HNSW graphs of every chunk; one copied from the finished
            # primary's files costs no graph building). end_bulk_load restores both.
            body["settings"]["index"]["refresh_interval"] = "-1"
            body["settings"]["index"]["number_of_replicas"] = 0
        self._create_index(name + ACCESS_SUFFIX, access_index_body(self.opensearch, alias))
        self._create_index(name, body)

    def _create_index(self, name: str, body: dict[str, Any]) -> None:
        try:
            self.client.indices.create(index=name, body=body)
        except RequestError as exc:
            if exc.error != "resource_already_exists_exception":
                raise SearchBackendError(f"creating index {name} failed: {exc}") from exc
        except OpenSearchException as exc:
            raise SearchBackendError(f"creating index {name} failed: {exc}") from exc

    def _ensure_access_index(self) -> None:
        """An index built before the projection moved out of the chunks gets its companion (empty: the
        chunks' own old fields answer `stored_fields` until the version's next write or access change)."""
        if self._call(self.client.indices.exists, index=self.access_alias):
            return
        targets = self.alias_targets()
        if targets:
            self._create_index(targets[0] + ACCESS_SUFFIX, access_index_body(self.opensearch, self.alias))
        else:
            self._create_index(self.access_alias, access_index_body(self.opensearch, None))

    def _raise_if_rebuilt_for_another_embedder(self, error: SearchBackendError) -> None:
        """A failed k-NN leg after `ki reindex` swapped the alias to an index of another dimension:
        say so (this process must restart with the new configuration), never a bare 503."""
        try:
            mappings = self.client.indices.get_mapping(index=self.alias)
        except OpenSearchException:
            return
        for concrete, mapping in mappings.items():
            live = live_dimension(mapping.get("mappings", {}).get("properties", {}))
            if live is not None and live != self.dimensions:
                raise IndexDimensionMismatch(
                    f"index {concrete} (alias {self.alias}) now holds {live}-dimensional vectors, rebuilt by "
                    f"`ki reindex` for another embedder, but this process embeds with {self.signature} "
                    f"({self.dimensions} dimensions): restart it with the configuration the index was rebuilt for"
                ) from error

    def _check_dimension(self, concrete: str, live: int | None) -> None:
        if live is not None and live != self.dimensions:
            raise IndexDimensionMismatch(
                f"index {concrete} (alias {self.alias}) holds {live}-dimensional vectors but the "
                f"embedder {self.signature} produces {self.dimensions}; run `ki reindex` to rebuild "
                "the index for the configured embedder"
            )

    def _warn_on_old_text_analyzer(self, concrete: str, live: dict[str, Any]) -> None:
        """An index built before ki_german still serves (its terms are consistent in themselves),
        but lexical ranking differs from the embedded backend's until `ki reindex` rebuilds it."""
        analyzer = live.get("text", {}).get("analyzer")
        if analyzer is not None and analyzer != TEXT_ANALYZER:
            log.warning(
                "index %s (alias %s) analyzes text with %r, not %r: lexical ranking differs from the "
                "embedded backend's until `ki reindex` rebuilds it", concrete, self.alias, analyzer, TEXT_ANALYZER,
            )

    def _check_engine(self, concrete: str, engine: str | None) -> None:
        """An index built with an engine that cannot filter inside k-NN would search past the scope."""
        if engine is not None and engine not in FILTERING_KNN_ENGINES:
            raise IndexMappingMismatch(
                f"index {concrete} (alias {self.alias}) was built with the {engine} k-NN engine, which cannot "
                f"apply the access filter inside the search; run `ki reindex` with retrieval.vector_engine "
                f"{' or '.join(FILTERING_KNN_ENGINES)}"
            )

    def store_id(self) -> str | None:
        """From the `_meta` of the concrete index behind the alias; None while there is no index."""
        if not self._call(self.client.indices.exists, index=self.alias):
            return None
        mappings = self._call(self.client.indices.get_mapping, index=self.alias)
        found = {m.get("mappings", {}).get("_meta", {}).get(STORE_ID_META) for m in mappings.values()}
        return next(iter(found)) if len(found) == 1 else None

    def claim_store(self, store_id: str) -> None:
        self._put_meta(STORE_ID_META, store_id)

    def recorded_signature(self) -> IndexSignature | None:
        """From the `_meta` of the concrete index behind the alias; None when it has none (or no index)."""
        if not self._call(self.client.indices.exists, index=self.alias):
            return None
        mappings = self._call(self.client.indices.get_mapping, index=self.alias)
        found = [m.get("mappings", {}).get("_meta", {}).get(SIGNATURE_META) for m in mappings.values()]
        return IndexSignature.model_validate(found[0]) if len(found) == 1 and found[0] else None

    def record_signature(self, signature: IndexSignature) -> None:
        self._put_meta(SIGNATURE_META, signature.model_dump())

    def _put_meta(self, key: str, value: Any) -> None:
        """`_meta` is replaced whole by a mapping update: keep the other keys (store id, signature)."""
        mappings = self._call(self.client.indices.get_mapping, index=self.alias)
        for concrete, mapping in mappings.items():
            meta = {**mapping.get("mappings", {}).get("_meta", {}), key: value}
            self._call(self.client.indices.put_mapping, index=concrete, body={"_meta": meta})

    def _check_signature(self, *, writing: bool) -> None:
        """IndexSignatureMismatch when the index behind the alias was built for another configuration."""
        if self.expected_signature is None:
            return
        now = time.monotonic()
        if not writing and now - self._signature_checked_at < SIGNATURE_RECHECK_SECONDS:
            return
        check_recorded(self.recorded_signature(), self.expected_signature)
        self._signature_checked_at = now

    def rebuild_into(self, new_name: str) -> OpenSearchIndex:
        """A new, empty concrete index beside the live one, for `ki reindex` to fill."""
        if new_name in self.alias_targets() or new_name == self.alias:
            raise ValueError(f"{new_name} is the live index behind {self.alias}; choose a new name")
        self._create(new_name, alias=None, bulk_load=True)
        return OpenSearchIndex(
            self.client,
            alias=new_name,
            dimensions=self.dimensions,
            signature=self.signature,
            retrieval=self.retrieval,
            opensearch=self.opensearch,
            expected_signature=self.expected_signature,
        )

    def end_bulk_load(self) -> None:
        """The default refresh interval and the configured replicas again, and one refresh: the index is
        about to go live (its replicas recover from the primary's files while it serves)."""
        body = {"index": {"refresh_interval": None, "number_of_replicas": self.opensearch.number_of_replicas}}
        self._call(self.client.indices.put_settings, index=self.alias, body=body)
        self.refresh()

    def alias_targets(self) -> list[str]:
        """Concrete indices behind the alias; [] when the alias name is itself an index or absent."""
        if not self._call(self.client.indices.exists_alias, name=self.alias):
            return []
        return sorted(self._call(self.client.indices.get_alias, name=self.alias))

    def swap_alias(self, new_name: str) -> None:
        """Point the alias (and its projection alias) at new_name in one atomic _aliases call, then
        delete the old indices."""
        old = self.alias_targets()
        actions: list[dict[str, Any]] = [{"add": {"index": new_name, "alias": self.alias}},
                                         {"add": {"index": new_name + ACCESS_SUFFIX, "alias": self.access_alias}}]  # fmt: skip
        stale = [name for name in old if name != new_name]
        stale += [name + ACCESS_SUFFIX for name in stale if self._call(self.client.indices.exists, index=name + ACCESS_SUFFIX)]
        if old:
            actions += [{"remove": {"index": name, "alias": self.alias}} for name in old if name != new_name]
            actions += [{"remove": {"index": name, "alias": self.access_alias}} for name in stale if name.endswith(ACCESS_SUFFIX)]
        else:
            # A pre-alias index carries the alias's name (and maybe its projection index the
            # projection alias's): remove them in the same atomic call.
            actions += [{"remove_index": {"index": name}} for name in (self.alias, self.access_alias)
                        if self._call(self.client.indices.exists, index=name)]  # fmt: skip
        self._call(self.client.indices.update_aliases, body={"actions": actions})
        if stale:
            self._call(self.client.indices.delete, index=",".join(stale))

    def refresh(self) -> None:
        self._call(self.client.indices.refresh, index=f"{self.alias},{self.access_alias}",
                   params={"ignore_unavailable": "true"})  # fmt: skip

    def close(self) -> None:
        self.client.close()

    # --------------------------------------------------------------- writes

    def bulk(self, operations: Iterable[BulkOperation]) -> None:
        self._check_signature(writing=True)
        failed: dict[int, str] = {}
        for batch_failed in self._bulk_responses(list(_batches(list(operations), BULK_BATCH_ITEMS))):
            failed.update(batch_failed)
        if failed:
            raise BulkFailure(failed)

    def _bulk_responses(self, batches: list[list[BulkOperation]]) -> list[dict[int, str]]:
        """Up to opensearch.bulk_concurrency requests in flight; in order, one at a time, when a chunk
        id is in more than one operation (a write then a delete of it must arrive in that order).
        Each request's failed chunk ids."""
        def send(batch: list[BulkOperation]) -> dict[int, str]:
            response = self._call(self.client.bulk, body=bulk_body(bulk_lines(batch, self.access_alias)), index=self.alias)
            return bulk_failures(response, versions_in(batch))

        workers = min(self.opensearch.bulk_concurrency, len(batches))
        if workers <= 1 or _chunk_ids_repeat(batches):
            return [send(batch) for batch in batches]
        with ThreadPoolExecutor(workers, thread_name_prefix="ki-bulk") as pool:
            return list(pool.map(send, batches))

    def update_access(self, projections: Iterable[AccessProjection]) -> None:
        self.bulk(update_access_ops(projections))

    def delete_document(self, document_id: str) -> None:
        # _delete_by_query only sees refreshed chunks: refresh first so none written just before survives.
        self.refresh()
        response = self._call(
            self.client.delete_by_query,
            index=self.alias,
            body={"query": {"term": {"document_id": document_id}}},
            params={"conflicts": "proceed"},
        )
        if response.get("failures"):
            raise SearchBackendError(f"deleting document {document_id} failed: {response['failures'][:3]}")
        self._call(self.client.delete_by_query, index=self.access_alias,
                   body={"query": {"term": {"document_id": document_id}}},
                   params={"conflicts": "proceed", "ignore_unavailable": "true"})  # fmt: skip

    # ---------------------------------------------------------------- reads

    def multi_search(self, request: MultiSearchRequest) -> MultiSearchResult:
        """A boolean request holds per document version (ki_core.search.document_sets)."""
        return document_search(self.version_sets, self._legs, request)

    def _legs(self, request: MultiSearchRequest) -> MultiSearchResult:
        """The legs in one _msearch; with `collect_versions` the constraint's first page of versions too."""
        legs = request.legs_to_send()
        collect = request.collect_versions and request.constraint is not None and not request.scope.match_none
        if not legs and not collect:
            return MultiSearchResult(legs={})
        self._check_signature(writing=False)
        lines = msearch_lines(self.alias, request)
        if collect:
            lines += [_version_header(self.alias), version_set_body(request.scope, request.filters, request.constraint)]
        response = self._call(self.client.msearch, body=lines, request_timeout=self.opensearch.query_timeout_seconds)
        results: dict[Leg, LegHits] = {}
        for leg, leg_response in zip(legs, response["responses"][: len(legs)], strict=True):
            error = leg_error(leg, leg_response, self.alias)
            if error is not None:
                if leg is Leg.SEMANTIC:
                    self._raise_if_rebuilt_for_another_embedder(error)
                raise error
            results[leg] = leg_hits(leg_response)
        if not collect:
            return MultiSearchResult(legs=results)
        assert request.constraint is not None
        [versions] = self._version_pages(request.scope, request.filters, [request.constraint], [response["responses"][-1]])
        return MultiSearchResult(legs=results, versions=versions)

    def version_sets(
        self, scope: ScopeFilter, filters: SearchFilters, conditions: Sequence[Constraint]
    ) -> list[dict[str, str]]:
        """Per condition, the versions in scope with a chunk that satisfies it (version id -> document
        id): one _msearch for the first page of every condition, another while a set has more."""
        if scope.match_none:
            return [{} for _ in conditions]
        self._check_signature(writing=False)
        return self._version_pages(scope, filters, conditions, None)

    def _version_pages(
        self, scope: ScopeFilter, filters: SearchFilters, conditions: Sequence[Constraint],
        first: list[dict[str, Any]] | None,
    ) -> list[dict[str, str]]:
        """Every page of each condition's versions; `first`: the first pages, already answered."""
        found: list[dict[str, str]] = [{} for _ in conditions]
        pending: dict[int, dict[str, str] | None] = dict.fromkeys(range(len(conditions)))
        answers = first
        while pending:
            if answers is None:
                lines: list[dict[str, Any]] = []
                for position, after in pending.items():
                    lines += [_version_header(self.alias), version_set_body(scope, filters, conditions[position], after)]
                response = self._call(self.client.msearch, body=lines,
                                      request_timeout=self.opensearch.query_timeout_seconds)  # fmt: skip
                answers = response["responses"]
            following: dict[int, dict[str, str] | None] = {}
            for position, answer in zip(list(pending), answers, strict=True):
                versions = version_page(answer, self.alias)
                found[position].update({b["key"]["version"]: b["key"]["document"] for b in versions["buckets"]})
                if len(versions["buckets"]) == VERSION_PAGE and versions.get("after_key"):
                    following[position] = versions["after_key"]
            pending, answers = following, None
        return found

    def search_filter(
        self, scope: ScopeFilter, filters: SearchFilters, size: int, offset: int = 0
    ) -> list[FilterHit]:
        if scope.match_none or size <= 0:
            return []
        check_result_window(offset, size)
        self._check_signature(writing=False)
        body = filter_search_body(scope, filters, size, offset)
        preference = search_preference(self.alias, "", (), body["query"]["bool"]["filter"])
        response = self._call(
            self.client.search, index=self.alias, body=body,
            params={"allow_partial_search_results": "false", "preference": preference},
            request_timeout=self.opensearch.query_timeout_seconds,
        )  # fmt: skip
        if (error := shard_failure("a filter-only listing", self.alias, response)) is not None:
            raise error
        return [filter_hit(hit) for hit in response["hits"]["hits"]]

    def count(self, scope: ScopeFilter | None = None, filters: SearchFilters | None = None) -> int:
        response = self._call(self.client.count, index=self.alias, body=count_body(scope, filters))
        if (error := shard_failure("a count", self.alias, response)) is not None:
            raise error
        return int(response["count"])

    def stored_fields(self, chunk_id: int) -> dict[str, Any] | None:
        """Every indexed field of a chunk except text and vector (inspection and export)."""
        return self.stored_fields_of([chunk_id]).get(chunk_id)

    def stored_fields_of(self, chunk_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        """One `_mget` per MGET_BATCH_IDS chunks, never one GET per chunk."""
        ids = [str(chunk_id) for chunk_id in dict.fromkeys(chunk_ids)]
        found: dict[int, dict[str, Any]] = {}
        for start in range(0, len(ids), MGET_BATCH_IDS):
            response = self._call(
                self.client.mget,
                index=self.alias,
                body={"ids": ids[start : start + MGET_BATCH_IDS]},
                params={"_source_excludes": "embedding,text,identifiers_text"},
            )
            for doc in response["docs"]:
                if doc.get("error"):
                    raise SearchBackendError(f"OpenSearch mget on index {self.alias} failed for {doc['_id']}: {doc['error']}")
                if doc.get("found"):
                    found[int(doc["_id"])] = doc["_source"]
        projections = self._projections({source["document_version_id"] for source in found.values()})
        return {chunk_id: stored_fields_from_source({**source, **projections.get(source["document_version_id"], {})})
                for chunk_id, source in found.items()}  # fmt: skip

    def _projections(self, version_ids: set[str]) -> dict[str, dict[str, Any]]:
        """{version id: its access projection} from the projection index (absent there: nothing)."""
        ids = sorted(version_ids)
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), MGET_BATCH_IDS):
            response = self._call(self.client.mget, index=self.access_alias, body={"ids": ids[start : start + MGET_BATCH_IDS]},
                                  params={"_source_includes": ",".join(ACCESS_FIELDS), "ignore": 404})  # fmt: skip
            for doc in response.get("docs", ()):  # none: no projection index (not yet ensured)
                if doc.get("error"):
                    raise SearchBackendError(f"OpenSearch mget on index {self.access_alias} failed for {doc['_id']}: {doc['error']}")
                if doc.get("found"):
                    found[doc["_id"]] = doc["_source"]
        return found

    def cosine(self, score: float) -> float:
        """Plain cosine of a semantic LegHit.score under this index's space type."""
        return cosine_from_knn_score(score, self.retrieval.vector_space_type)

    @staticmethod
    def _call(method: Any, **kwargs: Any) -> Any:
        """One client call; transport and HTTP errors become SearchBackendError (nothing degrades)."""
        try:
            return method(**kwargs)
        except OpenSearchException as exc:
            where = f" on index {kwargs['index']}" if kwargs.get("index") else ""
            raise SearchBackendError(f"OpenSearch {method.__name__}{where} failed: {transport_detail(exc)}") from exc

