"""What the route table is made of: a route's parameters, answers and body, and the parameters
and answers many routes share.

The tables themselves are :mod:`._rest_routes` (the API) and :mod:`._rest_routes_bridge` (the
worker bridge); :mod:`._rest_openapi` turns them into the OpenAPI document.
"""

from __future__ import annotations

from typing import Any, final

import attrs

from ..web import ErrorEnvelope
from ._rest_origin import SAFE_METHODS

JSON = "application/json"
SSE = "text/event-stream"


@final
@attrs.frozen
class Param:
    """One parameter of a route, as the OpenAPI document lists it."""

    name: str
    location: str  # path, query or header
    description: str
    schema: dict[str, Any] = attrs.field(factory=lambda: {"type": "string"})
    required: bool = False


@final
@attrs.frozen
class Answer:
    """One status a route can answer with, and the attrs class of its body."""

    status: int
    description: str
    body: Any = None  # an attrs class, or None for no body
    media: str = JSON


@final
@attrs.frozen
class RouteDoc:
    """One route of the table: the app's routes and the OpenAPI document both come from it."""

    method: str
    path: str
    operation_id: str
    summary: str
    description: str = ""
    params: tuple[Param, ...] = ()
    body: Any = None
    body_required: bool = True
    body_description: str = ""
    answers: tuple[Answer, ...] = ()
    auth: bool = True


def path_param(name: str, description: str) -> Param:
    """A required path parameter (every path parameter is), never empty: an empty one is a
    path of no route (``/runs/``), so a client generated from the document never sends it."""
    return Param(name, "path", description, {"type": "string", "minLength": 1}, required=True)


RUN_ID = path_param("run_id", "The run id.")
STEP_ID = path_param("step_id", "The step id.")
REQUEST_ID = path_param(
    "request_id",
    "The client's id of the input: 1-128 printable characters, percent-encoded "
    "(`/` as `%2F`, an id of dots as `%2E`).",
)
NON_NEGATIVE_INT = {"type": "integer", "minimum": 0}

BAD_REQUEST = Answer(
    400, "Bad JSON, a missing or wrong field, or a bad query parameter.", ErrorEnvelope
)
NO_RUN = Answer(404, "Unknown run.", ErrorEnvelope)
NO_STEP = Answer(404, "Unknown run or step.", ErrorEnvelope)
TOO_LARGE = Answer(413, "The body is larger than the configured limit.", ErrorEnvelope)


#: Answers every route can give, listed per route in the document and once in the Markdown.
COMMON_ANSWERS: tuple[Answer, ...] = (
    Answer(401, "A token is configured and the request lacks it.", ErrorEnvelope),
    Answer(
        403,
        "`cross_origin`: a browser sent it from a web page of another origin (not on reads); "
        "`host_not_allowed`: the API listens on loopback with no token and the `Host` is not "
        "a loopback name.",
        ErrorEnvelope,
    ),
    Answer(405, "Method not allowed on this path.", ErrorEnvelope),
    Answer(500, "Internal error (no details are given; see the server log).", ErrorEnvelope),
    Answer(503, "NATS is unavailable or not provisioned.", ErrorEnvelope),
)


#: Path parameters that are ids (a lease ``token`` is not: the bridge made it).
ID_PARAMS = frozenset({"name", "run_id", "step_id", "request_id", "task_type"})


def common_answers(route: RouteDoc) -> tuple[Answer, ...]:
    common = tuple(
        a
        for a in COMMON_ANSWERS
        if (route.auth or a.status != 401)
        and (a.status != 403 or route.auth or route.method.upper() not in SAFE_METHODS)
    )
    ids = [
        f"`invalid_{p.name}`" for p in route.params if p.location == "path" and p.name in ID_PARAMS
    ]
    if not ids:
        return common
    bad_id = Answer(400, f"{' or '.join(ids)}: a path parameter is not a valid id.", ErrorEnvelope)
    return (bad_id, *common)
