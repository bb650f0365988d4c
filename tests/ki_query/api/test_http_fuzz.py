"""The query API under hostile input (hypothesis, bounded): never a 5xx other than 503.

Authenticated requests with any JSON body, valid bodies with fields replaced by
any value (queries with NUL and lone surrogates, huge numbers, nested filters),
and hostile path segments, on SQLite and PostgreSQL.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ki_query.api.http import create_query_app
from tests.hostile import JSON_VALUES, NASTY_STRINGS, encoded, mutated
from tests.ki_query.credentials import ANNA_KEY, keyed_settings, signing_key  # noqa: F401 - fixture
from tests.ki_query.retrieval_fixtures import FolderWorld, folder_world  # noqa: F401 - fixture

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
AS_ANNA = {"X-API-Key": ANNA_KEY, "Content-Type": "application/json"}
VALID = {
    "/v1/search": {"query": "Mietvertrag Haftung", "limit": 5, "offset": 0, "filters": {"status": ["final"]}},
    "/v1/search/filter": {"filters": {"date_from": "2020-01-01"}, "limit": 5},
    "/v1/decisions/search": {"query": "Haftung", "limit": 5},
    "/v1/traverse": {"document_id": "x", "depth": 1, "kinds": ["annex_of"]},
    "/v1/decisions": {"project_id": "p", "locus": "§ 1", "change_summary": "c", "rationale": "r",
                      "evidence": [{"version_id": "v"}]},
}


@pytest.fixture
def client(folder_world: FolderWorld, signing_key) -> TestClient:  # noqa: F811
    service, _, _ = folder_world.service()
    return TestClient(create_query_app(keyed_settings(folder_world, signing_key), lambda: service))


def answered_without_a_bug(status: int) -> bool:
    return status < 500 or status == 503


@FUZZ
@given(route=st.sampled_from(sorted(VALID)), data=st.data())
def test_any_body_on_any_route_is_never_a_5xx(client: TestClient, route: str, data) -> None:
    body = data.draw(st.one_of(mutated(VALID[route]), JSON_VALUES), label="body")
    response = client.post(route, content=encoded(body), headers=AS_ANNA)
    assert answered_without_a_bug(response.status_code), (route, body, response.status_code, response.text[:300])


def test_a_field_name_with_a_lone_surrogate_is_a_400(client: TestClient) -> None:
    response = client.post("/v1/search", content=b'{"query": "Miete", "\\ud800": 1}', headers=AS_ANNA)
    assert response.status_code == 400
    assert "unicode" in response.json()["errors"][0]["problem"]


@FUZZ
@given(segment=NASTY_STRINGS.filter(bool), depth=st.one_of(st.integers(-5, 10), NASTY_STRINGS))
def test_hostile_document_ids_and_parameters_are_never_a_5xx(client: TestClient, segment: str, depth) -> None:
    path = quote(segment.encode("utf-8", "surrogatepass"), safe="")
    for url in (f"/v1/documents/{path}", f"/v1/documents/{path}/related?depth={quote(str(depth).encode('utf-8', 'surrogatepass'))}"):
        response = client.get(url, headers=AS_ANNA)
        assert answered_without_a_bug(response.status_code), (url, response.status_code, response.text[:300])
