"""Who is calling: principals from an API key or a verified JWT, never from a request field.

The only exception is an API key configured with `on_behalf_of`, for a trusted
front end that authenticates its users itself and names them per request.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ki_core.principals import assertion_refusal, principals_from_claims
from ki_core.config import JwtSettings, Settings


class Unauthenticated(Exception):
    """No credentials, or credentials that do not verify (HTTP 401)."""


class Forbidden(Exception):
    """Valid credentials that may not do what was asked (HTTP 403)."""


@dataclass(frozen=True)
class Identity:
    subject: str
    principals: tuple[str, ...]


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def identity_from_api_key(settings: Settings, key: str, on_behalf_of: str | None = None) -> Identity:
    digest = key_digest(key)
    for name, spec in settings.security.api_keys.items():
        if hmac.compare_digest(spec.sha256, digest):
            if on_behalf_of is None:
                return Identity(f"key:{name}", tuple(spec.principals))
            if not spec.on_behalf_of:
                raise Forbidden(f"API key {name!r} may not act on behalf of other principals")
            named = tuple(p.strip() for p in on_behalf_of.split(",") if p.strip())
            if not named:
                raise Forbidden("X-KI-On-Behalf-Of names no principal")
            for principal in named:
                _check_assertable(settings, name, spec.on_behalf_of_principals, principal)
            return Identity(f"key:{name} for {','.join(named)}", named)
    raise Unauthenticated("unknown API key")


def _check_assertable(settings: Settings, key_name: str, patterns: list[str], principal: str) -> None:
    """A front end names only principals its key's patterns cover, and an admin only by an exact pattern.

    Compared as the scope compiler will see the name (normalized, alias-mapped),
    so an alias of an admin principal is an admin principal too.
    """
    refusal = assertion_refusal(principal, patterns, settings)
    if refusal == "admin":
        raise Forbidden(f"API key {key_name!r} may not act on behalf of the admin principal {principal!r}")
    if refusal == "pattern":
        raise Forbidden(f"API key {key_name!r} may not act on behalf of {principal!r} "
                        "(security.api_keys.*.on_behalf_of_principals)")


def identity_from_jwt(settings: Settings, token: str) -> Identity:
    import jwt

    config = settings.security.jwt
    if config is None:
        raise Unauthenticated("bearer tokens are not configured (security.jwt)")
    try:
        claims = jwt.decode(
            token,
            _public_key(config.public_key),
            algorithms=config.algorithms,
            audience=config.audience,
            issuer=config.issuer,
            leeway=config.leeway_seconds,
            options={"require": ["exp", "iss", config.principal_claim]},
        )
    except jwt.PyJWTError as exc:
        raise Unauthenticated(f"invalid token: {exc}") from None
    return Identity(str(claims[config.principal_claim]), _token_principals(config, claims))


def _token_principals(config: JwtSettings, claims: dict) -> tuple[str, ...]:
    """The subject, and each group claim as a group (`group:` added where missing: ki_core.principals)."""
    groups = claims.get(config.groups_claim) if config.groups_claim else None
    return principals_from_claims(str(claims[config.principal_claim]), groups if isinstance(groups, list) else None)


@cache
def _public_key(value: str) -> str:
    if value.lstrip().startswith("-----BEGIN"):
        return value
    return Path(value).read_text(encoding="utf-8")


def resolve_identity(
    settings: Settings,
    *,
    authorization: str | None,
    api_key: str | None,
    on_behalf_of: str | None = None,
) -> Identity:
    """The caller's identity from `Authorization: Bearer <JWT or API key>` or `X-API-Key`."""
    if api_key:
        return identity_from_api_key(settings, api_key, on_behalf_of)
    if not authorization:
        raise Unauthenticated("missing credentials: send Authorization: Bearer <token> or X-API-Key")
    scheme, _, credential = authorization.partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        raise Unauthenticated("Authorization must be 'Bearer <token>'")
    credential = credential.strip()
    if credential.count(".") == 2:
        if on_behalf_of:
            raise Forbidden("a user token may not act on behalf of other principals")
        return identity_from_jwt(settings, credential)
    return identity_from_api_key(settings, credential, on_behalf_of)
