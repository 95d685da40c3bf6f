"""The route table, the app, /openapi.json and docs/rest.md describe the same API."""

from __future__ import annotations

import pathlib
import re

from starlette.routing import Mount, Route

from dagnats_trio.api import CONSOLE_PREFIX
from dagnats_trio.api._rest_openapi import openapi_document, render_markdown
from dagnats_trio.api.rest import create_app

from ._stack import Stack

REST_MD = pathlib.Path(__file__).resolve().parents[2] / "docs" / "rest.md"


def app_routes(stack: Stack) -> set[tuple[str, str]]:
    app = create_app(stack.service, stack.inputs, stack.transport)
    found = set()
    for route in app.routes:
        if route.path == CONSOLE_PREFIX:
            # The console's static files and its redirect (tests/api/test_console_api.py): no
            # API route.
            assert isinstance(route, (Mount, Route))
            continue
        assert isinstance(route, Route)
        for method in route.methods or ():
            if method != "HEAD":
                # "{request_id:dagnats_request_id}": a convertor is not part of the template
                found.add((method, re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)))
    return found


async def test_every_route_is_in_openapi_and_docs(api: Stack) -> None:
    routes = app_routes(api)
    assert ("GET", "/runs/{run_id}/steps/{step_id}/journal") in routes
    assert ("GET", "/runs/{run_id}/steps/{step_id}/preview") in routes
    assert ("GET", "/runs/{run_id}/steps/{step_id}/journal/check") in routes
    assert len(routes) == 28  # 17 REST routes and 11 of the worker bridge

    r = await api.client.get("/openapi.json")
    doc = r.json()
    assert doc == openapi_document()
    documented = {
        (method.upper(), path) for path, methods in doc["paths"].items() for method in methods
    }
    assert documented == routes

    text = REST_MD.read_text(encoding="utf-8")
    for method, path in routes:
        assert f"## `{method} {path}`" in text, (method, path)


async def test_every_operation_documents_bodies_and_statuses(api: Stack) -> None:
    doc = openapi_document()
    schemas = doc["components"]["schemas"]
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            statuses = set(op["responses"])
            assert {"500", "405"} <= statuses, (method, path)
            if path != "/healthz":
                assert "401" in statuses, (method, path)
            if method in ("post", "put") and "requestBody" in op:
                ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                assert ref.rsplit("/", 1)[-1] in schemas
            if "{" in path:
                assert "404" in statuses, (method, path)
    for name in ("ErrorEnvelope", "RunView", "StepView", "Submission", "JournalPage"):
        assert name in schemas


def test_docs_are_generated_from_openapi() -> None:
    expected = render_markdown(openapi_document())
    assert REST_MD.read_text(encoding="utf-8") == expected, (
        "docs/rest.md is out of date: run "
        "`uv run --frozen python -m dagnats_trio.api._rest_openapi docs/rest.md`"
    )
