"""ASGI entry points; only `ki` imports the web apps, so worker processes never load FastAPI.

    uvicorn --factory ki.asgi:create_ingress      # DMS webhooks, /healthz, /readyz, /metrics
    uvicorn --factory ki.asgi:create_api          # the query API under /v1
    uvicorn --factory ki.asgi:create_all_in_one   # both in one process (`ki serve`, embedded default)

Each reads config.json and KI_* once; a bad key stops start-up with a message naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from fastapi import FastAPI

from ki_core.config import Settings, load_settings


def create_ingress() -> FastAPI:
    from ki_workers.ingress import create_ingress_app

    return create_ingress_app(load_settings())


def create_api() -> FastAPI:
    from ki_query.http import create_query_app

    settings = load_settings()
    return create_query_app(settings, _retrieval_service(settings))


def create_all_in_one() -> FastAPI:
    """The ingress app (webhooks, health, metrics) with the query API mounted at /v1."""
    from ki_query.http import create_query_app
    from ki_workers.ingress import create_ingress_app

    settings = load_settings()
    app = create_ingress_app(settings)
    app.mount("/v1", create_query_app(settings, _retrieval_service(settings), prefix=""))
    return app


def _retrieval_service(settings: Settings) -> Callable:
    """Built on the first query, not at start-up: opening the index and the embedder takes seconds."""
    from ki_query.retrieval import retrieval_service_from_settings

    return cache(lambda: retrieval_service_from_settings(settings))
