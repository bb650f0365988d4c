"""Slow down guessing: after `failures` refused credentials in `window_seconds` from one address, 429.

An ASGI middleware around the whole process (HTTP API, MCP, web page), so every
surface counts into the same window: a request that carried a credential (an
`Authorization` or `X-API-Key` header, or the sign-in form) and was answered
401 is one failure of its client address. While the address is over the limit
every request from it is answered 429 with Retry-After, before any credential
is looked at; other addresses, including the right key's owner elsewhere, are
not slowed. Behind a reverse proxy run uvicorn with --proxy-headers so the
client address is the caller's, not the proxy's.

There is deliberately no second limit per claimed subject (a spray against one
account from many addresses). Such a limit slows guessing only where a claimed
name comes with a secret that can be guessed, and ki checks none: no password
is typed here (the sign-in form takes an API key or a token; passwords are typed
at the directory, whose brute-force detection counts failures per user:
deploy/keycloak/realm-ki.json, 5 failures, then waits growing by 60 s up to
15 min, never a permanent lock); a key `ki keys` makes is `ki_` and 256 random
bits, and no key names its holder (the configuration keeps only its sha256); a bearer token's `sub` is only the sender's word until its
signature verifies, and a signature is not guessed. Counting failures by that
unverified `sub` would slow no guessing and hand anyone a way to have a named
user's requests refused from every address she has not used yet.
tests/ki_query/test_throttle.py pins this: 225 forged tokens naming one user
from 25 addresses leave her right token answered 200.
"""

from __future__ import annotations

import json
import math
import time

from limits import RateLimitItemPerSecond
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ki_core.config import ThrottleSettings

CREDENTIAL_HEADERS = (b"authorization", b"x-api-key")
SIGNIN_PATH = "/signin"


class FailedCredentialThrottle:
    def __init__(self, app: ASGIApp, settings: ThrottleSettings) -> None:
        self.app = app
        self._limit = RateLimitItemPerSecond(settings.failures, settings.window_seconds)
        self._limiter = MovingWindowRateLimiter(storage_from_string(settings.storage_uri))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        address = _address(scope)
        if not self._limiter.test(self._limit, "auth-failures", address):
            await self._refuse(send, address)
            return
        counts = _carries_credential(scope)

        async def observe(message: Message) -> None:
            if counts and message["type"] == "http.response.start" and message["status"] == 401:
                self._limiter.hit(self._limit, "auth-failures", address)
            await send(message)

        await self.app(scope, receive, observe)

    async def _refuse(self, send: Send, address: str) -> None:
        reset = self._limiter.get_window_stats(self._limit, "auth-failures", address).reset_time
        retry_after = max(1, math.ceil(reset - time.time()))
        body = json.dumps({"detail": f"too many failed credentials from {address}; retry in {retry_after} s"}).encode()
        await send({"type": "http.response.start", "status": 429, "headers": [
            (b"content-type", b"application/json"), (b"retry-after", str(retry_after).encode()),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def _address(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


def _carries_credential(scope: Scope) -> bool:
    if scope["method"] == "POST" and scope["path"] == SIGNIN_PATH:
        return True
    return any(name in CREDENTIAL_HEADERS for name, _ in scope.get("headers", ()))
