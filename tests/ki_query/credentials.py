"""API keys and user tokens for the tests of the authenticated surfaces (HTTP API, MCP over HTTP).

Import `signing_key` into the test module that uses the fixture.
"""

from __future__ import annotations

import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from ki_core.config import SecuritySettings, Settings
from ki_query.identity import key_digest
from tests.ki_query.retrieval_fixtures import MEMBER, FolderWorld

ANNA_KEY = "key-anna-0123456789"
NOBODY_KEY = "key-nobody-0123456789"
FRONTEND_KEY = "key-frontend-0123456789"
# Acts for WALLED, whom a test module may grant the project and deny one document.
WALLED_KEY = "key-carla-0123456789"
WALLED = "carla"
ISSUER = "https://login.kanzlei.example"


@pytest.fixture(scope="module")
def signing_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def keyed_settings(world: FolderWorld, signing_key) -> Settings:
    """The world's settings with the keys above and user tokens signed by `signing_key`."""
    public_pem = signing_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    security = world.ctx.settings.security.model_dump(mode="python") | {
            "api_keys": {
                "anna": {"sha256": key_digest(ANNA_KEY), "principals": [MEMBER]},
                "nobody": {"sha256": key_digest(NOBODY_KEY), "principals": ["someone-else"]},
                "frontend": {"sha256": key_digest(FRONTEND_KEY), "principals": ["svc:frontend"], "on_behalf_of": True},
                "walled": {"sha256": key_digest(WALLED_KEY), "principals": [WALLED]},
            },
            "jwt": {"issuer": ISSUER, "audience": "ki", "public_key": public_pem, "algorithms": ["RS256"]},
    }
    return world.ctx.settings.model_copy(update={"security": SecuritySettings.model_validate(security)})


def user_token(signing_key, **claims) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": "ki", "sub": MEMBER, "iat": now, "exp": now + 300} | claims
    return jwt.encode(body, signing_key, algorithm="RS256")
