"""The OpenAPI document of the REST API, built from the route table (:mod:`._rest_routes` and
:mod:`._rest_routes_bridge`) with schemas generated from the attrs classes (:mod:`._rest_schema`).

``docs/rest.md`` is :func:`render_markdown` of the document (``python -m
dagnats_trio.api._rest_openapi`` rewrites it); a test keeps the file, the document and the app's
routes in step.
"""

from __future__ import annotations

import json
from typing import Any

from ..web import ErrorEnvelope
from ._rest_markdown import render_markdown
from ._rest_routedoc import JSON, RouteDoc, common_answers
from ._rest_routes import API_ROUTES
from ._rest_routes_bridge import BRIDGE_ROUTES
from ._rest_schema import Schemas

__all__ = ["ROUTES", "openapi_document", "openapi_json", "render_markdown"]

OPENAPI_VERSION = "3.1.0"
API_TITLE = "dagnats-trio REST API"
API_VERSION = "1"

#: Every route the app serves, the API's and the bridge's.
ROUTES: tuple[RouteDoc, ...] = API_ROUTES + BRIDGE_ROUTES


def openapi_document() -> dict[str, Any]:
    schemas = Schemas()
    schemas.ref(ErrorEnvelope)
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        op: dict[str, Any] = {
            "operationId": route.operation_id,
            "summary": route.summary,
        }
        if route.description:
            op["description"] = route.description
        if route.params:
            op["parameters"] = [
                {
                    "name": p.name,
                    "in": p.location,
                    "required": p.required,
                    "description": p.description,
                    "schema": p.schema,
                }
                for p in route.params
            ]
        if route.body is not None:
            op["requestBody"] = {
                "required": route.body_required,
                "description": route.body_description or f"A {route.body.__name__}.",
                "content": {JSON: {"schema": schemas.ref(route.body)}},
            }
        responses: dict[str, Any] = {}
        for answer in (*route.answers, *common_answers(route)):
            key = str(answer.status)
            slot = responses.setdefault(key, {"description": answer.description})
            if slot["description"] != answer.description:
                slot["description"] += " " + answer.description
            if answer.body is not None:  # a route's own body wins over the common one
                slot.setdefault("content", {}).setdefault(
                    answer.media, {"schema": schemas.ref(answer.body)}
                )
        op["responses"] = dict(sorted(responses.items()))
        if not route.auth:
            op["security"] = []
        paths.setdefault(route.path, {})[route.method.lower()] = op
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": API_TITLE,
            "version": API_VERSION,
            "description": (
                'Every error is JSON: {"error": {"code", "message"}}. Bodies are UTF-8 JSON with '
                "finite numbers, 64-bit integers and no lone surrogates (else 400 invalid_json, "
                "naming where). When the server has a token, every route but /healthz needs "
                "`Authorization: Bearer <token>`."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.components.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


def openapi_json() -> bytes:
    return json.dumps(openapi_document(), indent=2, ensure_ascii=False).encode() + b"\n"


if __name__ == "__main__":  # pragma: no cover - the doc generator
    import pathlib
    import sys

    target = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "docs/rest.md")
    target.write_text(render_markdown(openapi_document()), encoding="utf-8")
    print(f"wrote {target}")
