"""The keys a token issuer signs with: a static PEM key, or its JWKS, found by OpenID discovery.

The JWKS is cached for `jwks_cache_seconds` and fetched again at once when a
token names a `kid` the cache lacks (the issuer rotated its keys), but never
more often than `jwks_min_refetch_seconds`: tokens with made-up kids must not
turn ki into a flood against the directory. An issuer that cannot be reached
refuses the token (401), never lets it through.
"""

from __future__ import annotations

import threading
import time
from functools import cache
from pathlib import Path
from typing import Any

import httpx
from joserfc.jwk import Key, KeySet, import_key
from joserfc.errors import JoseError

from ki_core.config import JwtSettings

DISCOVERY_PATH = "/.well-known/openid-configuration"
FETCH_TIMEOUT_SECONDS = 5.0


class KeysUnavailable(Exception):
    """The issuer's keys could not be fetched or read; the token cannot be checked."""


class IssuerKeys:
    """One issuer's JWKS, fetched on first use and again on expiry or an unknown kid."""

    def __init__(self, config: JwtSettings) -> None:
        self._config = config
        self._keys: KeySet | None = None
        self._fetched_at = float("-inf")
        self._lock = threading.Lock()

    def key_for(self, kid: str | None) -> Key:
        """The key that signed a token with this `kid` (joserfc asks per token)."""
        with self._lock:
            if self._keys is None or self._age() > self._config.jwks_cache_seconds:
                self._refresh()
            if not self._has(kid) and self._age() >= self._config.jwks_min_refetch_seconds:
                self._refresh()
            assert self._keys is not None
            try:
                return self._keys.get_by_kid(kid)
            except (JoseError, ValueError):
                raise KeysUnavailable(f"the issuer publishes no key with kid {kid!r}") from None

    def _has(self, kid: str | None) -> bool:
        return self._keys is not None and any(k.kid == kid for k in self._keys.keys)

    def _age(self) -> float:
        return time.monotonic() - self._fetched_at

    def _refresh(self) -> None:
        try:
            self._keys = KeySet.import_key_set(_get_json(self._jwks_uri()))
        except (httpx.HTTPError, ValueError, KeyError, JoseError) as exc:
            raise KeysUnavailable(f"the issuer's keys could not be fetched: {type(exc).__name__}: {exc}") from None
        self._fetched_at = time.monotonic()

    def _jwks_uri(self) -> str:
        if self._config.jwks_uri:
            return self._config.jwks_uri
        return str(discovery_document(self._config.issuer)["jwks_uri"])


# An issuer's endpoints change with its configuration, not per request: fetched again after this long.
DISCOVERY_CACHE_SECONDS = 600
_documents: dict[str, tuple[float, dict[str, Any]]] = {}


def discovery_document(issuer: str) -> dict[str, Any]:
    """The issuer's OpenID configuration; its `issuer` must be the configured one (OpenID Discovery 4.3)."""
    fetched_at, document = _documents.get(issuer, (float("-inf"), {}))
    if time.monotonic() - fetched_at < DISCOVERY_CACHE_SECONDS:
        return document
    document = _get_json(issuer.rstrip("/") + DISCOVERY_PATH)
    if document.get("issuer") != issuer:
        raise ValueError(f"the discovery document names issuer {document.get('issuer')!r}, not {issuer!r}")
    _documents[issuer] = (time.monotonic(), document)
    return document


def _get_json(url: str) -> dict[str, Any]:
    response = httpx.get(url, timeout=FETCH_TIMEOUT_SECONDS)
    response.raise_for_status()
    body = response.json()
    if not isinstance(body, dict):
        raise ValueError(f"{url} did not answer a JSON object")
    return body


_issuers: dict[tuple[str, str | None], IssuerKeys] = {}
_issuers_lock = threading.Lock()


def issuer_keys(config: JwtSettings) -> IssuerKeys:
    """One key cache per issuer and JWKS address, shared by every surface of the process."""
    with _issuers_lock:
        return _issuers.setdefault((config.issuer, config.jwks_uri), IssuerKeys(config))


@cache
def static_key(value: str) -> Key:
    """A configured PEM public key (its text, or the path of a file holding it)."""
    pem = value if value.lstrip().startswith("-----BEGIN") else Path(value).read_text(encoding="utf-8")
    for key_type in ("RSA", "EC"):
        try:
            return import_key(pem, key_type)
        except (JoseError, ValueError, TypeError):
            continue
    raise KeysUnavailable("security.jwt.public_key is not an RSA or EC public key in PEM")
