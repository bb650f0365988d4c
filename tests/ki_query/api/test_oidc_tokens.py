"""User tokens of a real directory (Keycloak): keys from the issuer's JWKS, checked on HTTP and MCP alike.

A token is accepted only when its signature verifies with a key the issuer publishes, it names the
configured issuer and audience, and it has not expired; its groups become group principals.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives import hashes
from fastapi.testclient import TestClient

from ki.asgi import with_mcp
from ki_core.config import SecuritySettings, Settings
from ki_core.grants import GrantTarget, grant
from ki_query.api.http import create_query_app
from ki_query.api.mcp_http import MCP_PATH
from ki_query.identity import Unauthenticated, identity_from_jwt
from tests.ki_query.api.test_mcp_http import MCP_HEADERS, TOOL_CALL, _uvicorn
from tests.ki_query.keycloak import BEN, CLARA, GROUP_PREFIX, issuer, jwt_settings, password_token  # noqa: F401
from tests.ki_query.retrieval_fixtures import FolderWorld, folder_world  # noqa: F401

QUERY = {"query": "Mietvertrag Miete", "limit": 10}


def oidc_settings_of(world: FolderWorld, issuer: str, **jwt) -> Settings:  # noqa: F811
    security = world.ctx.settings.security.model_copy(update={"jwt": jwt_settings(issuer, **jwt)})
    return world.ctx.settings.model_copy(update={"security": SecuritySettings.model_validate(security.model_dump())})


@pytest.fixture(scope="module")
def partner_world(folder_world: FolderWorld) -> FolderWorld:  # noqa: F811
    """The project is granted to the directory group `partner` only: clara.wolf reaches it by her group."""
    with folder_world.ctx.sessions() as session, session.begin():
        grant(session, GrantTarget.project(folder_world.project_id), GROUP_PREFIX + CLARA.group,
              settings=folder_world.ctx.settings)
    return folder_world


@pytest.fixture
def client(partner_world: FolderWorld, issuer: str) -> TestClient:  # noqa: F811
    service, _, _ = partner_world.service()
    return TestClient(create_query_app(oidc_settings_of(partner_world, issuer), lambda: service))


@pytest.fixture(scope="module")
def mcp_url(partner_world: FolderWorld, issuer: str) -> Iterator[str]:  # noqa: F811
    service, _, _ = partner_world.service()
    settings = oidc_settings_of(partner_world, issuer)
    with _uvicorn(with_mcp(create_query_app(settings, lambda: service), settings, lambda: service)) as base:
        yield f"{base}{MCP_PATH}"


def _search(client: TestClient, token: str) -> httpx.Response:
    return client.post("/v1/search", json=QUERY, headers={"Authorization": f"Bearer {token}"})


def _mcp(url: str, token: str) -> httpx.Response:
    return httpx.post(url, json=TOOL_CALL, headers=MCP_HEADERS | {"Authorization": f"Bearer {token}"}, timeout=30)


def _resigned(token: str) -> str:
    """The same header and claims, signed by a key the issuer never published (same kid)."""
    head, body, _ = token.split(".")
    forger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    signature = forger.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{head}.{body}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


def _claims(token: str) -> dict:
    body = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))


def test_a_directory_token_becomes_the_user_and_the_groups(partner_world, issuer) -> None:  # noqa: F811
    identity = identity_from_jwt(oidc_settings_of(partner_world, issuer), password_token(issuer, CLARA))
    assert identity.subject == "clara.wolf"
    # The group claim "partner" is the group the grants name "group:partner" (ki_core.principals: one spelling).
    assert identity.principals == ("clara.wolf", "clara.wolf@kanzlei.example", "partner")


def test_the_group_reaches_the_project_and_another_group_does_not(client: TestClient, issuer) -> None:  # noqa: F811
    clara = _search(client, password_token(issuer, CLARA))
    assert clara.status_code == 200 and clara.json()["hits"]
    ben = _search(client, password_token(issuer, BEN))
    assert ben.status_code == 200 and ben.json()["hits"] == []


def test_a_directory_token_searches_over_mcp(mcp_url: str, issuer) -> None:  # noqa: F811
    response = _mcp(mcp_url, password_token(issuer, CLARA))
    assert response.status_code == 200
    assert json.loads(response.json()["result"]["content"][0]["text"])["hits"]


def test_a_token_for_another_audience_is_401(client: TestClient, mcp_url: str, issuer) -> None:  # noqa: F811
    token = password_token(issuer, CLARA, client_id="other-app")
    assert "ki" not in (_claims(token).get("aud") or [])
    assert _search(client, token).status_code == 401
    assert _mcp(mcp_url, token).status_code == 401


def test_a_wrongly_signed_token_is_401(client: TestClient, mcp_url: str, issuer) -> None:  # noqa: F811
    forged = _resigned(password_token(issuer, CLARA))
    assert _search(client, forged).status_code == 401
    assert _mcp(mcp_url, forged).status_code == 401


def test_an_expired_token_is_401(partner_world, issuer) -> None:  # noqa: F811
    """ki-cli-short's tokens live 2 s; with no leeway they are refused once that has passed."""
    service, _, _ = partner_world.service()
    settings = oidc_settings_of(partner_world, issuer, leeway_seconds=0)
    token = password_token(issuer, CLARA, client_id="ki-cli-short")
    fresh = TestClient(create_query_app(settings, lambda: service))
    assert _search(fresh, token).status_code == 200
    time.sleep(max(0.0, _claims(token)["exp"] - time.time()) + 1.5)
    assert _search(fresh, token).status_code == 401
    with _uvicorn(with_mcp(create_query_app(settings, lambda: service), settings, lambda: service)) as base:
        assert _mcp(f"{base}{MCP_PATH}", token).status_code == 401


def test_a_token_from_another_issuer_is_refused(partner_world, issuer) -> None:  # noqa: F811
    settings = oidc_settings_of(partner_world, issuer, jwks_uri=f"{issuer}/protocol/openid-connect/certs")
    settings.security.jwt.issuer = issuer + "-other"  # type: ignore[union-attr]
    with pytest.raises(Unauthenticated, match="iss"):
        identity_from_jwt(settings, password_token(issuer, CLARA))
