"""The signed-in credential: an API key or user JWT, kept only in an HttpOnly session cookie.

The cookie holds the credential itself, so the page is stateless (any api
process answers it) and every request is resolved again by the API's own
resolver: a revoked key or an expired token signs the page out at once.
`SameSite=Strict` keeps other sites from sending it; state-changing forms also
carry a CSRF token derived from the credential (an attacker cannot compute it),
and the sign-in form, which has no credential yet, is refused from another origin.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from ki_core.config import Settings
from ki_query.identity import Forbidden, Identity, Unauthenticated, resolve_identity

CREDENTIAL_COOKIE = "ki_session"
# A key is `ki_` + URL-safe base64, a JWT three base64url parts: printable, no spaces, bounded.
_CREDENTIAL = re.compile(r"^[\x21-\x7e]{8,8192}$")


class SignInRequired(Exception):
    """No credential, or one the resolver refuses: the sign-in page, never any data."""


class CrossSiteRequest(Exception):
    """A form without the page's CSRF token, or sent from another origin (HTTP 403)."""


@dataclass(frozen=True)
class WebCaller:
    credential: str
    identity: Identity

    @property
    def authorization(self) -> dict[str, str]:
        """The header the query API resolves: the same credential, the same resolver."""
        return {"Authorization": f"Bearer {self.credential}"}

    @property
    def csrf_token(self) -> str:
        return csrf_token(self.credential)


def well_formed(credential: str) -> bool:
    return bool(_CREDENTIAL.match(credential))


def identify(settings: Settings, credential: str) -> Identity:
    """The identity the API gives this credential (as `Authorization: Bearer`), or SignInRequired."""
    if not well_formed(credential):
        raise SignInRequired("not an API key or token")
    try:
        return resolve_identity(settings, authorization=f"Bearer {credential}", api_key=None)
    except (Unauthenticated, Forbidden) as exc:
        raise SignInRequired(str(exc)) from None


def refusal(settings: Settings, credential: str) -> str | None:
    """Why a credential typed at sign-in is refused, or None when the API accepts it."""
    try:
        identify(settings, credential)
    except SignInRequired as exc:
        return str(exc)
    return None


def signed_in(settings: Settings, request: Request) -> WebCaller:
    credential = request.cookies.get(CREDENTIAL_COOKIE, "")
    return WebCaller(credential, identify(settings, credential))


def csrf_token(credential: str) -> str:
    return hmac.new(credential.encode("utf-8"), b"ki-web-csrf", hashlib.sha256).hexdigest()


def check_csrf(caller: WebCaller, submitted: str | None) -> None:
    if not submitted or not hmac.compare_digest(submitted, caller.csrf_token):
        raise CrossSiteRequest("the form's CSRF token is missing or wrong; reload the page")


def check_same_origin(request: Request) -> None:
    """A browser names the origin of a form post; one from another site is refused."""
    origin = request.headers.get("origin")
    if origin and origin.rstrip("/") != f"{request.url.scheme}://{request.url.netloc}":
        raise CrossSiteRequest(f"a form from {origin} may not be sent here")


def remember(response: Response, request: Request, credential: str, max_age: int | None = None) -> None:
    """A session cookie: gone when the browser closes, at sign-out, or after `max_age` seconds
    (a directory token's remaining life: the session ends with the token)."""
    response.set_cookie(CREDENTIAL_COOKIE, credential, httponly=True, samesite="strict", max_age=max_age,
                        secure=request.url.scheme == "https", path="/")


def forget(response: Response, request: Request) -> None:
    response.delete_cookie(CREDENTIAL_COOKIE, httponly=True, samesite="strict",
                           secure=request.url.scheme == "https", path="/")
