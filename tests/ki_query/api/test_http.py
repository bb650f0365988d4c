"""The HTTP query API: principals from credentials only, errors with the status the spec names."""

from __future__ import annotations

import json
import time

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient

from ki_core.search.types import SearchBackendError
from ki_query.api.http import create_query_app
from tests.ki_query.credentials import (
    ANNA_KEY,
    FRONTEND_KEY,
    NOBODY_KEY,
    keyed_settings,
    signing_key,  # noqa: F401 - fixture
    user_token,
)
from tests.ki_query.retrieval_fixtures import ADMIN, GROUP, MEMBER, FolderWorld, folder_world  # noqa: F401


@pytest.fixture
def client(folder_world: FolderWorld, signing_key) -> TestClient:  # noqa: F811
    service, _, _ = folder_world.service()
    return TestClient(create_query_app(keyed_settings(folder_world, signing_key), lambda: service))


def _search(client: TestClient, headers: dict, **body) -> object:
    return client.post("/v1/search", json={"query": "Mietvertrag Haftung", **body}, headers=headers)


def test_no_credentials_is_401(client: TestClient) -> None:
    response = _search(client, {})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"


def test_an_unknown_api_key_is_401(client: TestClient) -> None:
    assert _search(client, {"X-API-Key": "guess"}).status_code == 401


def test_an_api_key_searches_as_its_principals(client: TestClient) -> None:
    response = _search(client, {"X-API-Key": ANNA_KEY})
    assert response.status_code == 200
    hits = response.json()["hits"]
    assert hits and all(h["citation"]["project"]["name"] == "kontorwerk" for h in hits)


def test_another_key_sees_nothing_of_the_project(client: TestClient) -> None:
    response = _search(client, {"Authorization": f"Bearer {NOBODY_KEY}"})
    assert response.status_code == 200
    assert response.json()["hits"] == []


def test_principals_in_the_request_body_are_refused_not_trusted(client: TestClient) -> None:
    response = _search(client, {"X-API-Key": NOBODY_KEY}, principals=[ADMIN])
    assert response.status_code == 400


def test_only_a_front_end_key_may_act_on_behalf_of_someone(client: TestClient) -> None:
    denied = _search(client, {"X-API-Key": NOBODY_KEY, "X-KI-On-Behalf-Of": MEMBER})
    assert denied.status_code == 403
    allowed = _search(client, {"X-API-Key": FRONTEND_KEY, "X-KI-On-Behalf-Of": MEMBER})
    assert allowed.status_code == 200 and allowed.json()["hits"]


def test_a_front_end_may_name_only_the_principals_its_key_allows_and_never_an_admin(
    folder_world: FolderWorld, signing_key  # noqa: F811
) -> None:
    service, _, _ = folder_world.service()
    settings = keyed_settings(folder_world, signing_key)
    frontend = settings.security.api_keys["frontend"]
    limited = frontend.model_copy(update={"on_behalf_of_principals": [MEMBER[:3] + "*", "group:*"]})
    keys = settings.security.api_keys | {"frontend": limited}
    settings = settings.model_copy(update={"security": settings.security.model_copy(update={
        "api_keys": keys, "principal_aliases": {"chef": ADMIN}})})
    client = TestClient(create_query_app(settings, lambda: service))
    as_front_end = {"X-API-Key": FRONTEND_KEY}
    assert _search(client, as_front_end | {"X-KI-On-Behalf-Of": MEMBER}).status_code == 200
    outside = _search(client, as_front_end | {"X-KI-On-Behalf-Of": f"{MEMBER},mallory"})
    assert outside.status_code == 403 and "'mallory'" in outside.json()["detail"]
    for admin in (ADMIN, "chef", " ROLE:ADMIN "):
        refused = _search(client, as_front_end | {"X-KI-On-Behalf-Of": admin})
        assert refused.status_code == 403 and "admin principal" in refused.json()["detail"]
    default = TestClient(create_query_app(keyed_settings(folder_world, signing_key), lambda: service))
    assert _search(default, as_front_end | {"X-KI-On-Behalf-Of": ADMIN}).status_code == 403, "default: no admins"


def test_the_openapi_document_names_the_statuses_answered_and_no_422(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    search = document["paths"]["/v1/search"]["post"]["responses"]
    assert set(search) == {"200", "400", "401", "403", "502", "503"}
    ask = document["paths"]["/v1/ask"]["post"]
    assert set(ask["responses"]) == {"200", "400", "401", "403", "503"}, "a failing rerank skips the firm, no 502"
    assert ask["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/FederatedAnswer")
    assert ask["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/AskRequest")
    assert "404" in document["paths"]["/v1/documents/{document_id}"]["get"]["responses"]
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_a_database_that_went_away_is_503_with_a_plain_reason(folder_world: FolderWorld, signing_key, tmp_path):  # noqa: F811
    from ki_core.db import make_engine, session_factory
    from ki_query.retrieval import RetrievalService

    service, _, _ = folder_world.service()
    broken = RetrievalService(service.settings, session_factory(make_engine(f"sqlite:///{tmp_path}")), service.index,
                              service.embedder, service.access)
    client = TestClient(create_query_app(keyed_settings(folder_world, signing_key), lambda: broken))
    response = client.post("/v1/decisions/search", json={"query": "Haftung"}, headers={"X-API-Key": ANNA_KEY})
    assert response.status_code == 503
    assert response.json() == {"detail": "the database is unavailable; retry later"}


def test_a_user_token_searches_as_its_subject_and_groups(client: TestClient, signing_key) -> None:
    as_member = _search(client, {"Authorization": f"Bearer {user_token(signing_key)}"})
    assert as_member.status_code == 200 and as_member.json()["hits"]
    as_group = _search(client, {"Authorization": f"Bearer {user_token(signing_key, sub='bob', groups=[GROUP])}"})
    assert as_group.status_code == 200 and as_group.json()["hits"]
    outsider = _search(client, {"Authorization": f"Bearer {user_token(signing_key, sub='bob')}"})
    assert outsider.status_code == 200 and outsider.json()["hits"] == []


@pytest.mark.parametrize(
    "claims",
    [{"exp": int(time.time()) - 3600}, {"iss": "https://evil.example"}, {"aud": "other"}],
    ids=["expired", "wrong-issuer", "wrong-audience"],
)
def test_a_bad_token_is_401(client: TestClient, signing_key, claims: dict) -> None:
    response = _search(client, {"Authorization": f"Bearer {user_token(signing_key, **claims)}"})
    assert response.status_code == 401


def test_a_token_signed_by_another_key_is_401(client: TestClient) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert _search(client, {"Authorization": f"Bearer {user_token(other)}"}).status_code == 401


def test_a_window_above_500_is_400(client: TestClient) -> None:
    response = _search(client, {"X-API-Key": ANNA_KEY}, offset=450, limit=60)
    assert response.status_code == 400
    assert "500" in response.json()["detail"]


@pytest.mark.parametrize(("query", "problem"), [
    ("a\ud800b", "lone surrogate"), ("a\u0000b", "NUL"), ("", "blank"), ("   ", "blank"),
])  # fmt: skip
def test_a_query_no_embedder_can_take_is_400_naming_it(client: TestClient, query: str, problem: str) -> None:
    """One answer on every embedder (the hashing one answered an empty query 503, e5 200)."""
    response = client.post("/v1/search", content=json.dumps({"query": query}).encode(),
                           headers={"X-API-Key": ANNA_KEY, "Content-Type": "application/json"})  # fmt: skip
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["field"] == "query" and problem in error["problem"]
    decisions = client.post("/v1/decisions/search", content=json.dumps({"query": query}).encode(),
                            headers={"X-API-Key": ANNA_KEY, "Content-Type": "application/json"})  # fmt: skip
    assert decisions.status_code == 400


@pytest.mark.parametrize(
    ("query", "reason", "position"),
    [
        ("Kündigung norm:§§", "norm:§§ nennt keine Vorschrift", 10),
        # `-§§ 1-2385 BGB` would be most of the law, asked for by accident: refused where the range starts
        ("Kündigung -§§ 1-2385 BGB", "§§ 1-2385 umfasst 2385 Vorschriften", 11),
    ],
)
def test_a_malformed_norm_is_400_with_the_reason_and_position(
    client: TestClient, query: str, reason: str, position: int
) -> None:
    response = _search(client, {"X-API-Key": ANNA_KEY}, query=query)
    assert response.status_code == 400
    body = response.json()
    assert body["detail"].startswith(reason) and body["position"] == position
    assert body["hint"].startswith("Hinweis:")


def test_invalid_filters_are_400_naming_the_field(client: TestClient) -> None:
    response = _search(client, {"X-API-Key": ANNA_KEY}, filters={"date_from": "2024-05-01", "date_to": "2024-01-01"})
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"].startswith("filters")


def test_an_invisible_document_is_404_like_a_missing_one(client: TestClient, folder_world: FolderWorld) -> None:  # noqa: F811
    document_id = folder_world.documents["mietvertrag"].id
    assert client.get(f"/v1/documents/{document_id}", headers={"X-API-Key": ANNA_KEY}).status_code == 200
    invisible = client.get(f"/v1/documents/{document_id}", headers={"X-API-Key": NOBODY_KEY})
    missing = client.get("/v1/documents/does-not-exist", headers={"X-API-Key": NOBODY_KEY})
    assert invisible.status_code == missing.status_code == 404
    assert invisible.json()["detail"].replace(document_id, "X") == missing.json()["detail"].replace("does-not-exist", "X")


def test_related_documents_of_the_contract(client: TestClient, folder_world: FolderWorld) -> None:  # noqa: F811
    document_id = folder_world.documents["mietvertrag"].id
    response = client.get(f"/v1/documents/{document_id}/related", headers={"X-API-Key": ANNA_KEY})
    assert response.status_code == 200
    keys = {item["document"]["document"]["key"] for item in response.json()}
    assert "anlage-1" in keys


def test_a_traversal_deeper_than_three_hops_is_400_naming_the_field(client: TestClient, folder_world: FolderWorld) -> None:  # noqa: F811
    body = {"document_id": folder_world.documents["mietvertrag"].id, "depth": 4}
    response = client.post("/v1/traverse", json=body, headers={"X-API-Key": ANNA_KEY})
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "depth"
    body["depth"] = 3
    assert client.post("/v1/traverse", json=body, headers={"X-API-Key": ANNA_KEY}).status_code == 200


def test_the_index_being_down_is_503(folder_world: FolderWorld, signing_key) -> None:  # noqa: F811
    service, index, _ = folder_world.service()

    def broken(_request):
        raise SearchBackendError("connection refused")

    index.multi_search = broken
    client = TestClient(create_query_app(keyed_settings(folder_world, signing_key), lambda: service))
    assert _search(client, {"X-API-Key": ANNA_KEY}).status_code == 503


def test_a_listing_deeper_than_the_result_window_is_400_naming_it(client: TestClient) -> None:
    body = {"offset": 9_995, "limit": 10}
    response = client.post("/v1/search/filter", json=body, headers={"X-API-Key": ANNA_KEY})
    assert response.status_code == 400
    assert "10000" in response.json()["detail"] and "max_result_window" in response.json()["detail"]
    body = {"offset": 9_990, "limit": 10}
    assert client.post("/v1/search/filter", json=body, headers={"X-API-Key": ANNA_KEY}).status_code == 200


def test_search_filter_lists_newest_first(client: TestClient) -> None:
    response = client.post("/v1/search/filter", json={"limit": 5}, headers={"X-API-Key": ANNA_KEY})
    assert response.status_code == 200
    dates = [h["citation"]["version"]["doc_date"] for h in response.json()["hits"] if h["citation"]["version"]["doc_date"]]
    assert dates == sorted(dates, reverse=True) and dates


def test_a_query_longer_than_the_limit_is_400_naming_the_setting_before_any_work(client: TestClient) -> None:
    long = "Mietvertrag " * 400  # 4,800 characters: a pasted brief, not a query
    for route in ("/v1/search", "/v1/decisions/search"):
        response = client.post(route, json={"query": long}, headers={"X-API-Key": ANNA_KEY})
        assert response.status_code == 400, route
        assert "retrieval.max_query_chars = 4,000" in response.json()["detail"]
    assert _search(client, {"X-API-Key": ANNA_KEY}, query="Mietvertrag " * 300).status_code == 200


def test_a_search_past_its_time_budget_is_503_naming_the_setting(folder_world: FolderWorld, signing_key) -> None:  # noqa: F811
    """Stopped between steps, not carried on for a caller who gave up: one slow search must not hold a worker."""
    service, index, _ = folder_world.service(query_budget_seconds=1e-6)
    client = TestClient(create_query_app(keyed_settings(folder_world, signing_key), lambda: service))
    response = _search(client, {"X-API-Key": ANNA_KEY})
    assert response.status_code == 503
    assert "retrieval.query_budget_seconds = 1e-06" in response.json()["detail"]
    assert index.requests == [], "the budget ran out at the scope step, before the legs were sent"
