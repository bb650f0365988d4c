"""OpenAPI documents that list the statuses our web apps really answer.

FastAPI documents a 422 for every route with validated input, but both apps
answer malformed input with 400 naming the field (their validation handler),
so the 422 and its schemas are taken out and each route's own statuses stay.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

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
