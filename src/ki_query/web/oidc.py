"""Sign-in through the firm's directory: OpenID Connect authorization code flow with PKCE (Authlib).

The page sends the browser to the issuer with a fresh `state` and a PKCE
challenge; both, and the verifier, wait in a short-lived HttpOnly cookie of the
browser itself (no server-side session, so any api process answers the
callback). The callback checks `state`, redeems the code with the verifier and
the client secret, and keeps the access token as the page's credential
(ki_query.web.credentials): the same resolver then checks it on every request
against the issuer's keys, so the session ends when the token expires (the
cookie's Max-Age is the token's remaining life) or at sign-out, which also ends
the directory's session (RP-initiated logout with the ID token as hint).
"""

from __future__ import annotations

import hmac
import json
import time
from dataclasses import dataclass
from urllib.parse import urlencode

from authlib.common.security import generate_token
from authlib.integrations.httpx_client import AsyncOAuth2Client
from starlette.requests import Request
from starlette.responses import Response

from ki_core.config import OidcSettings, Settings
from ki_query.token_keys import discovery_document

FLOW_COOKIE = "ki_oidc_flow"
ID_TOKEN_COOKIE = "ki_id_token"
CALLBACK_PATH = "/signin/callback"
# Long enough to type a password and a second factor; the flow cookie is useless after that.
FLOW_SECONDS = 600


class SignInFailed(Exception):
    """The directory's answer cannot sign anyone in (bad state, refused code): the sign-in page with the reason."""


@dataclass(frozen=True)
class Tokens:
    access_token: str
    id_token: str | None
    expires_in: int


def configured(settings: Settings) -> OidcSettings | None:
    """The web page offers directory sign-in only with both security.oidc and security.jwt (which checks its tokens)."""
    return settings.security.oidc if settings.security.jwt is not None else None


def _client(settings: Settings, request: Request) -> AsyncOAuth2Client:
    oidc = settings.security.oidc
    assert oidc is not None
    secret = oidc.client_secret.get_secret_value() if oidc.client_secret else None
    return AsyncOAuth2Client(client_id=oidc.client_id, client_secret=secret, scope=oidc.scope,
                             redirect_uri=_redirect_uri(oidc, request), code_challenge_method="S256", timeout=15)


def _redirect_uri(oidc: OidcSettings, request: Request) -> str:
    base = oidc.public_url.rstrip("/") if oidc.public_url else f"{request.url.scheme}://{request.url.netloc}"
    return base + CALLBACK_PATH


def _issuer_document(settings: Settings) -> dict:
    assert settings.security.jwt is not None
    return discovery_document(settings.security.jwt.issuer)


def begin(settings: Settings, request: Request, response_for: type[Response]) -> Response:
    """Redirect to the issuer's login page; the flow's state and verifier in the browser's flow cookie."""
    state, verifier = generate_token(32), generate_token(64)
    client = _client(settings, request)
    url, _ = client.create_authorization_url(_issuer_document(settings)["authorization_endpoint"], state=state,
                                             code_verifier=verifier)
    response = response_for(url, status_code=303)
    response.set_cookie(FLOW_COOKIE, json.dumps({"state": state, "verifier": verifier}), max_age=FLOW_SECONDS,
                        httponly=True, samesite="lax", secure=request.url.scheme == "https", path=CALLBACK_PATH)
    return response


async def finish(settings: Settings, request: Request) -> Tokens:
    """Redeem the callback's code, after checking that it answers this browser's own flow."""
    flow = _flow(request)
    params = request.query_params
    if "error" in params:
        raise SignInFailed(f"the directory refused: {params.get('error_description') or params['error']}")
    if not hmac.compare_digest(params.get("state", ""), flow["state"]) or not params.get("code"):
        raise SignInFailed("the sign-in answer does not belong to this browser's sign-in; start again")
    async with _client(settings, request) as client:
        try:
            token = await client.fetch_token(_issuer_document(settings)["token_endpoint"], code=params["code"],
                                             code_verifier=flow["verifier"])
        except Exception as exc:  # noqa: BLE001 - Authlib raises OAuthError or httpx errors; each is a refused sign-in
            raise SignInFailed(f"the directory did not redeem the sign-in ({type(exc).__name__}: {exc})") from None
    expires = int(token.get("expires_at") or time.time() + int(token.get("expires_in", 300))) - int(time.time())
    return Tokens(token["access_token"], token.get("id_token"), max(expires, 1))


def _flow(request: Request) -> dict[str, str]:
    try:
        flow = json.loads(request.cookies.get(FLOW_COOKIE, ""))
        return {"state": str(flow["state"]), "verifier": str(flow["verifier"])}
    except (ValueError, KeyError, TypeError):
        raise SignInFailed("no sign-in is under way in this browser (or it took too long); start again") from None


def remember_id_token(response: Response, request: Request, tokens: Tokens) -> None:
    """Kept only as the hint for the directory's logout, which otherwise asks the user to confirm."""
    response.delete_cookie(FLOW_COOKIE, path=CALLBACK_PATH)
    if tokens.id_token:
        response.set_cookie(ID_TOKEN_COOKIE, tokens.id_token, max_age=tokens.expires_in, httponly=True,
                            samesite="strict", secure=request.url.scheme == "https", path="/")


def logout_url(settings: Settings, request: Request) -> str | None:
    """The directory's end-session address for this browser's sign-in, or None for a key's session."""
    id_token = request.cookies.get(ID_TOKEN_COOKIE)
    oidc = configured(settings)
    if not id_token or oidc is None:
        return None
    endpoint = _issuer_document(settings).get("end_session_endpoint")
    if not endpoint:
        return None
    after = (oidc.public_url.rstrip("/") if oidc.public_url else f"{request.url.scheme}://{request.url.netloc}") + "/signin"
    return f"{endpoint}?{urlencode({'id_token_hint': id_token, 'post_logout_redirect_uri': after, 'client_id': oidc.client_id})}"


def forget_id_token(response: Response) -> None:
    response.delete_cookie(ID_TOKEN_COOKIE, path="/")
