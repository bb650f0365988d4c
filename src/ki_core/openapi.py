"""OpenAPI documents that list the statuses our web apps really answer, and their docs page offline.

FastAPI documents a 422 for every route with validated input, but both apps
answer malformed input with 400 naming the field (their validation handler),
so the 422 and its schemas are taken out and each route's own statuses stay.

FastAPI's /docs loads Swagger UI from a CDN: a blank page on a firm's network
without the internet. `offline_docs` serves the same page with the scripts and
styles of the fastapi-offline wheel (Swagger UI 5, for OpenAPI 3.1) instead.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

DOCS_ASSETS = "/docs-assets"

_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")


def without_validation_422(app: FastAPI) -> None:
    base_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = base_openapi()
            for operations in document.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            schemas = document.get("components", {}).get("schemas", {})
            for name in _VALIDATION_SCHEMAS:
                schemas.pop(name, None)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi


def offline_docs(app: FastAPI) -> FastAPI:
    """/docs from the package's own Swagger UI assets; the app must be made with docs_url=None, redoc_url=None.

    No inline script either (a page under a strict Content-Security-Policy runs none): the
    page loads the bundle and /docs-init.js, which starts it on this app's OpenAPI document.
    """
    import fastapi_offline

    assets = Path(fastapi_offline.__file__).parent / "static"
    app.mount(DOCS_ASSETS, StaticFiles(directory=assets), name="docs-assets")

    async def docs(request: Request) -> HTMLResponse:
        root = _root(request)
        return HTMLResponse(_DOCS_PAGE.format(title=html.escape(f"{app.title}: docs"), assets=f"{root}{DOCS_ASSETS}",
                                              init=f"{root}/docs-init.js"))

    async def docs_init(request: Request) -> Response:
        spec = json.dumps(f"{_root(request)}{app.openapi_url}")
        return Response(_DOCS_INIT.replace("SPEC_URL", spec), media_type="text/javascript")

    app.add_route("/docs", docs, include_in_schema=False)
    app.add_route("/docs-init.js", docs_init, include_in_schema=False)
    return app


def _root(request: Request) -> str:
    """Where the app is mounted (`/v1` under `ki serve`), so the page's URLs work there too."""
    return request.scope.get("root_path", "").rstrip("/")


_DOCS_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="stylesheet" href="{assets}/swagger-ui.css">
<link rel="icon" href="{assets}/favicon.png">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{assets}/swagger-ui-bundle.js"></script>
<script src="{init}"></script>
</body>
</html>
"""

_DOCS_INIT = """window.ui = SwaggerUIBundle({
  url: SPEC_URL,
  dom_id: "#swagger-ui",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
"""
