"""Guessing credentials: one address is slowed after 10 failures in 60 s, the right key elsewhere is not.

There is no second limit per claimed subject (ki_query.throttle says why); the tests below pin what that
decision protects: a spray naming one user from many addresses never slows that user's right credential."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient

from ki.asgi import with_mcp, with_throttle
from ki_query.api.http import create_query_app
from ki_core.config import ThrottleSettings
from tests.ki_query.credentials import ANNA_KEY, keyed_settings, signing_key, user_token  # noqa: F401
from tests.ki_query.retrieval_fixtures import MEMBER, FolderWorld, folder_world  # noqa: F401

GUESSER, LAWYER = "203.0.113.7", "198.51.100.20"
QUERY = {"query": "Mietvertrag Miete", "limit": 5}


def _throttled_app(world: FolderWorld, signing_key, storage_uri: str = "memory://"):  # noqa: F811
    service, _, _ = world.service()
    settings = keyed_settings(world, signing_key)
    throttle = ThrottleSettings(storage_uri=storage_uri)
    settings = settings.model_copy(update={"security": settings.security.model_copy(update={"throttle": throttle})})
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


def _bearer(client: TestClient, token: str) -> int:
    return client.post("/v1/search", json=QUERY, headers={"Authorization": f"Bearer {token}"}).status_code


def test_a_spray_naming_one_user_from_many_addresses_never_slows_her_right_token(
    folder_world, signing_key, redis_client, redis_url: str  # noqa: F811
) -> None:
    """Forged tokens whose unverified `sub` is MEMBER, 9 from each of 25 addresses (225 failures naming her, no
    address over its limit): her own token from yet another address still answers 200, on the shared Redis count."""
    app = _throttled_app(folder_world, signing_key, storage_uri=redis_url)
    forged = user_token(rsa.generate_private_key(public_exponent=65537, key_size=2048), sub=MEMBER)
    statuses = {_bearer(_from(app, f"192.0.2.{n}"), forged) for n in range(1, 26) for _ in range(9)}
    assert statuses == {401}
    assert _bearer(_from(app, LAWYER), user_token(signing_key, sub=MEMBER)) == 200


def test_with_redis_storage_api_processes_share_one_count_per_address(
    folder_world, signing_key, redis_client, redis_url: str  # noqa: F811
) -> None:
    """Two api processes (two apps, one Redis): 5 failures at each make the address's 10, and both refuse it."""
    first, second = (_from(_throttled_app(folder_world, signing_key, storage_uri=redis_url), GUESSER)
                     for _ in range(2))
    wrong = [f"guess-{n:04d}-0123456789" for n in range(5)]
    assert [r.status_code for r in _searches(first, wrong) + _searches(second, wrong)] == [401] * 10
    for client in (first, second):
        refused = _searches(client, [ANNA_KEY])[0]
        assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 60
        assert "anna" not in refused.text and MEMBER not in refused.text
    assert redis_client.keys("LIMITS:*"), "the count is in Redis, not in either process"
