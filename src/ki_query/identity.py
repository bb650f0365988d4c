"""Who is calling: principals from an API key or a verified JWT, never from a request field.

The only exception is an API key configured with `on_behalf_of`, for a trusted
front end that authenticates its users itself and names them per request.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwt import JWTClaimsRegistry

from ki_core.principals import assertion_refusal, principals_from_claims
from ki_core.config import JwtSettings, Settings
from ki_query.token_keys import KeysUnavailable, issuer_keys, static_key


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
    """A user's token, checked against the issuer's keys: signature, issuer, audience, expiry."""
    config = settings.security.jwt
    if config is None:
        raise Unauthenticated("bearer tokens are not configured (security.jwt)")
    claims = verified_claims(config, token)
    return Identity(str(claims[config.principal_claim]), token_principals(config, claims))


def verified_claims(config: JwtSettings, token: str) -> dict[str, Any]:
    registry = JWTClaimsRegistry(
        leeway=config.leeway_seconds,
        iss={"essential": True, "value": config.issuer},
        exp={"essential": True},
        **({"aud": {"essential": True, "value": config.audience}} if config.audience else {}),
        **{config.principal_claim: {"essential": True}},
    )
    try:
        claims = jwt.decode(token, _signing_keys(config), algorithms=config.algorithms).claims
        registry.validate(claims)
    except KeysUnavailable as exc:
        raise Unauthenticated(f"invalid token: {exc}") from None
    except (JoseError, ValueError) as exc:
        raise Unauthenticated(f"invalid token: {_reason(exc)}") from None
    return claims


def _signing_keys(config: JwtSettings) -> Any:
    """The configured PEM key, or a lookup of the token's `kid` in the issuer's JWKS."""
    if config.public_key:
        return static_key(config.public_key)
    return lambda guest: issuer_keys(config).key_for(guest.headers().get("kid"))


def _reason(exc: Exception) -> str:
    """joserfc's errors carry a short code and sometimes no message."""
    return getattr(exc, "description", "") or str(exc) or type(exc).__name__


def token_principals(config: JwtSettings, claims: dict[str, Any]) -> tuple[str, ...]:
    """The claims a firm configured, handed to the one rule of ki_core.principals: the user, the same user
    by other claims (aliases in the scope compiler map them to the canonical name), and the groups."""
    groups = claims.get(config.groups_claim) if config.groups_claim else None
    also = [claims[c] for c in config.also_principal_claims if isinstance(claims.get(c), str)]
    return principals_from_claims(str(claims[config.principal_claim]), groups if isinstance(groups, list) else None,
                                  also)


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
