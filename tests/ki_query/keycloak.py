"""Tokens from the real Keycloak of `make services` (realm `ki`, deploy/keycloak/realm-ki.json).

Its users: clara.wolf in /kanzlei/partner, ben.kurz in /kanzlei/associates/arbeitsrecht. Its clients:
ki-cli (password grant, audience ki), ki-cli-short (the same, tokens live 2 s), other-app (no ki audience),
ki-web (the web page: authorization code + PKCE). KI_TEST_OIDC_ISSUER names the realm; without it
these tests skip, or fail under KI_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import pytest

from ki_core.config import JwtSettings, OidcSettings
from tests.conftest import OIDC_ISSUER, service_unavailable

AUDIENCE = "ki"
GROUP_PREFIX = "group:"


@dataclass(frozen=True)
class DirectoryUser:
    username: str
    password: str
    group: str  # the group's name as the token carries it (full.path off)


CLARA = DirectoryUser("clara.wolf", "clara-test-password", "partner")
BEN = DirectoryUser("ben.kurz", "ben-test-password", "arbeitsrecht")


@pytest.fixture(scope="session")
def issuer() -> str:
    if not OIDC_ISSUER:
        service_unavailable("keycloak", "KI_TEST_OIDC_ISSUER is unset (make services starts it on 127.0.0.1:8180)")
    try:
        httpx.get(f"{OIDC_ISSUER}/.well-known/openid-configuration", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        service_unavailable("keycloak", exc)
    return OIDC_ISSUER


def jwt_settings(issuer: str, **overrides) -> JwtSettings:
    """How a firm points ki at its directory: discovery from the issuer, the username and groups claims."""
    return JwtSettings(issuer=issuer, audience=AUDIENCE, principal_claim="preferred_username",
                       also_principal_claims=["email"], **overrides)


def oidc_settings() -> OidcSettings:
    return OidcSettings(client_id="ki-web", client_secret="ki-web-test-secret")


def password_token(issuer: str, user: DirectoryUser, client_id: str = "ki-cli") -> str:
    """An access token for `user` by the password grant (the realm allows it for its test clients only)."""
    response = httpx.post(f"{issuer}/protocol/openid-connect/token", timeout=30, data={
        "grant_type": "password", "client_id": client_id, "username": user.username,
        "password": user.password, "scope": "openid"})
    response.raise_for_status()
    return response.json()["access_token"]
