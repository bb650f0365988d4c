"""ASGI entry points; only `ki` imports the web apps, so worker processes never load FastAPI.

    uvicorn --factory ki.asgi:create_ingress      # DMS webhooks, /healthz, /readyz, /metrics
    uvicorn --factory ki.asgi:create_api          # the query API under /v1, MCP (Streamable HTTP) at /mcp, the web page at /
    uvicorn --factory ki.asgi:create_all_in_one   # both in one process (`ki serve`, embedded default), the web page at /

Each reads config.json and KI_* once; a bad key stops start-up with a message naming it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import cache

from fastapi import FastAPI

from ki_core.config import Settings, load_settings


def create_ingress() -> FastAPI:
    from ki_workers.ingress import create_ingress_app

    return create_ingress_app(load_settings())


def create_api() -> FastAPI:
    from ki_query.api.http import create_query_app

    settings = load_settings()
    service = _retrieval_service(settings)
    federated = _federated_search(service)
    app = with_mcp(create_query_app(settings, service, federated=federated), settings, service, federated)
    return with_throttle(with_web(app, settings, service, federated), settings)


def create_all_in_one() -> FastAPI:
    """The ingress app (webhooks, health, metrics) with the query API mounted at /v1 and MCP at /mcp."""
    from ki_query.api.http import create_query_app
    from ki_workers.ingress import create_ingress_app

    settings = load_settings()
    service = _retrieval_service(settings)
    federated = _federated_search(service)
    app = create_ingress_app(settings)
    app.mount("/v1", create_query_app(settings, service, prefix="", federated=federated))
    app = with_web(with_mcp(app, settings, service, federated), settings, service, federated, _redrive_event(settings))
    return with_throttle(app, settings)


def with_throttle(app: FastAPI, settings: Settings) -> FastAPI:
    """Failed credentials counted per client address across /v1, /mcp and the web page (one window)."""
    from ki_query.throttle import FailedCredentialThrottle

    app.add_middleware(FailedCredentialThrottle, settings=settings.security.throttle)
    return app


def with_mcp(app: FastAPI, settings: Settings, service: Callable, federated: Callable | None = None) -> FastAPI:
    """The MCP tools at /mcp of `app`, for each request's own caller, sharing the query API's services.

    A mounted app's lifespan does not run by itself, so the SDK's session manager
    is started inside `app`'s own lifespan.
    """
    from ki_query.api.mcp_http import MCP_PATH, create_mcp_http_app

    mcp_app = create_mcp_http_app(settings, service, federated=federated)
    app.add_route(MCP_PATH, mcp_app, include_in_schema=False)
    outer = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(application: FastAPI) -> AsyncIterator[object]:
        async with mcp_app.router.lifespan_context(mcp_app), outer(application) as state:
            yield state

    app.router.lifespan_context = lifespan
    return app


def with_web(app: FastAPI, settings: Settings, service: Callable, federated: Callable, redrive: Callable | None = None) -> FastAPI:
    """The web page at / of `app`, mounted last so that /v1, /mcp and the app's own routes stay in front.

    Without `redrive` (the api process, which loads no worker code) the operations page names the command.
    """
    from ki_query.web import create_web_app

    app.mount("/", create_web_app(settings, service, federated, redrive=redrive))
    return app


def _redrive_event(settings: Settings) -> Callable[[str], str]:
    """The operations page's redrive button: `ki events redrive` (reopen, dispatch), in this process."""

    def redrive(row_id: str) -> str:
        from ki_workers.context import worker_context
        from ki_workers.event_inbox import redrive_event

        return redrive_event(settings, worker_context().sessions, row_id)

    return redrive


def _retrieval_service(settings: Settings) -> Callable:
    """Built on the first query, not at start-up: opening the index and the embedder takes seconds."""
    from ki_query.retrieval import retrieval_service_from_settings

    return cache(lambda: retrieval_service_from_settings(settings))


def _federated_search(service: Callable) -> Callable:
    """The one FederatedSearch of /v1/ask and the MCP tool `ask`, built beside `service` on the first question."""
    from ki_query.federation.search import FederatedSearchOnFirstUse

    return FederatedSearchOnFirstUse(service)
