"""Guessing credentials: one address is slowed after 10 failures in 60 s, the right key elsewhere is not."""

from __future__ import annotations

from fastapi.testclient import TestClient

from ki.asgi import with_mcp, with_throttle
from ki_query.api.http import create_query_app
from tests.ki_query.credentials import ANNA_KEY, keyed_settings, signing_key  # noqa: F401
from tests.ki_query.retrieval_fixtures import FolderWorld, folder_world  # noqa: F401

GUESSER, LAWYER = "203.0.113.7", "198.51.100.20"
QUERY = {"query": "Mietvertrag Miete", "limit": 5}


def _throttled_app(world: FolderWorld, signing_key):  # noqa: F811
    service, _, _ = world.service()
    settings = keyed_settings(world, signing_key)
    return with_throttle(with_mcp(create_query_app(settings, lambda: service), settings, lambda: service), settings)


def _from(app, address: str) -> TestClient:
    """Requests from ADDRESS (the ASGI scope's client, as uvicorn sets it from the connection)."""
    return TestClient(app, client=(address, 40000))


def _searches(client: TestClient, keys: list[str]) -> list:
    return [client.post("/v1/search", json=QUERY, headers={"X-API-Key": key}) for key in keys]


def test_thirty_wrong_keys_are_slowed_and_the_right_key_elsewhere_still_answers(folder_world, signing_key) -> None:  # noqa: F811
    app = _throttled_app(folder_world, signing_key)
    guesses = _searches(_from(app, GUESSER), [f"guess-{n:04d}-0123456789" for n in range(30)])
    assert [r.status_code for r in guesses] == [401] * 10 + [429] * 20
    assert 1 <= int(guesses[-1].headers["retry-after"]) <= 60
    assert _searches(_from(app, LAWYER), [ANNA_KEY])[0].status_code == 200
    # The guessing address is refused even with the right key until its window has passed.
    assert _searches(_from(app, GUESSER), [ANNA_KEY])[0].status_code == 429


def test_requests_without_a_credential_do_not_count(folder_world, signing_key) -> None:  # noqa: F811
    app = _throttled_app(folder_world, signing_key)
    guesser = _from(app, GUESSER)
    assert [guesser.post("/v1/search", json=QUERY).status_code for _ in range(15)] == [401] * 15
    assert _searches(guesser, [ANNA_KEY])[0].status_code == 200


def test_failed_bearer_tokens_over_mcp_count_into_the_same_window(folder_world, signing_key) -> None:  # noqa: F811
    guesser = _from(_throttled_app(folder_world, signing_key), GUESSER)
    forged = [guesser.post("/mcp", json={}, headers={"Authorization": "Bearer forged.to.ken"}).status_code
              for _ in range(10)]
    assert forged == [401] * 10
    assert _searches(guesser, [ANNA_KEY])[0].status_code == 429
