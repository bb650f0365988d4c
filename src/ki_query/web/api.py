"""The page asks the query API, in process: the same routes, resolver and refusal table as any client.

Each call is an ASGI request to a query app built on the process's own
RetrievalService and FederatedSearch, carrying the signed-in credential as
`Authorization: Bearer`, so a page can show nothing the API would not return
to that credential, and the API's refusals become the page's (401 signs out,
403, 404, 400 with its reason, 503).
"""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI

from ki_core.audit import SURFACE_HEADER, Surface
from ki_query.web.credentials import WebCaller

class ApiRefusal(Exception):
    """The query API answered with an error status; `detail` is its reason."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status, self.detail = status, detail


class QueryApi:
    def __init__(self, app: FastAPI) -> None:
        self._transport = httpx.ASGITransport(app=app)

    async def get(self, caller: WebCaller, path: str, params: dict[str, Any] | None = None) -> Any:
        return await self._call(caller, "GET", path, params=params)

    async def post(self, caller: WebCaller, path: str, body: dict[str, Any]) -> Any:
        return await self._call(caller, "POST", path, json=body)

    async def download(self, caller: WebCaller, path: str, params: dict[str, Any] | None = None) -> httpx.Response:
        """The API's answer as it came (a file's bytes and headers), or ApiRefusal."""
        return await self._send(caller, "GET", path, params=params)

    async def _call(self, caller: WebCaller, method: str, path: str, **kwargs: Any) -> Any:
        return (await self._send(caller, method, path, **kwargs)).json()

    async def _send(self, caller: WebCaller, method: str, path: str, **kwargs: Any) -> httpx.Response:
        # Straight to the transport: an httpx client would log every in-process call as an HTTP request.
        headers = caller.authorization | {SURFACE_HEADER: Surface.WEB.value}
        request = httpx.Request(method, f"http://ki-query{path}", headers=headers, **kwargs)
        response = await self._transport.handle_async_request(request)
        await response.aread()
        if response.status_code >= 400:
            raise ApiRefusal(response.status_code, _detail(response))
        return response


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    detail = str(body.get("detail", "")) if isinstance(body, dict) else ""
    errors = body.get("errors") if isinstance(body, dict) else None
    if errors:
        detail += ": " + "; ".join(f"{e.get('field')}: {e.get('problem')}" for e in errors)
    return detail
