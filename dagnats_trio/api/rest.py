"""The REST API: an ASGI app (Starlette, running on Trio through anyio) over the service layer.

:func:`create_app` builds it; :class:`dagnats_trio.api.server.ApiServer` serves it with hypercorn.
Handlers are thin: decode the request into an attrs class, call :class:`Service` or
:class:`InputsService`, encode a view. Failures travel as typed exceptions and are turned into
``{"error": {"code", "message"}}`` in one place (:mod:`._rest_errors`); anything unexpected is
logged (by :mod:`._rest_middleware`, under this module's logger name) and answered 500
``internal`` with no details, so no stack trace reaches a client.

This module wires the app from its parts: the settings (:mod:`._rest_config`), the handlers
(:mod:`._rest_handlers`), their query parameters (:mod:`._rest_params`) and the middleware.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..bridge import Bridge, bridge_endpoints
from ..inputs import InputsService
from ..transport import Transport
from ..web import error_response, read_body
from ._console import console_routes
from ._rest_config import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_WAIT_S, ApiConfig
from ._rest_errors import api_error_for
from ._rest_handlers import _Handlers
from ._rest_host import guards_host
from ._rest_journal import FOLLOW_POLL_INTERVAL_S
from ._rest_middleware import (
    HEALTH_PATH,
    _BearerAuth,
    _CrossOriginGuard,
    _ErrorBoundary,
    _http_exception,
    _LoopbackHostGuard,
)
from ._rest_openapi import ROUTES
from .service import Service

#: Most requests the app works on at once; the others wait their turn before they send anything
#: to NATS. A NATS request's deadline runs from when it is sent, in wall time: under a burst of
#: hundreds of requests on a loaded machine the process was too busy to read its answers in time
#: and answered 503 ("NATS is not answering") though NATS had answered. Waiting here costs no
#: deadline, so a burst is slow on a slow machine but refuses nothing.
REQUESTS_IN_FLIGHT = 64
#: Operations that may wait long by design (a long poll) or must answer at once (health): never
#: held behind the others, and never holding a place.
_UNLIMITED_OPERATIONS = frozenset({"health", "get_input", "bridge_poll"})

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_WAIT_S",
    "HEALTH_PATH",
    "ApiConfig",
    "create_app",
]


def create_app(
    service: Service,
    inputs: InputsService,
    transport: Transport,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_wait_s: float = DEFAULT_MAX_WAIT_S,
    poll_interval_s: float = FOLLOW_POLL_INTERVAL_S,
    bridge: Bridge | None = None,
    listen_host: str | None = None,
) -> Starlette:
    """The ASGI app. ``token`` (when not None or empty) is required as a bearer token on every
    route but ``/healthz``. ``bridge`` serves the ``/bridge/...`` routes (without one they answer
    404 ``bridge_disabled``). ``listen_host`` is the address the app is served on: when it is
    loopback and there is no token, a request naming another host than loopback is refused
    (:mod:`._rest_host`, DNS rebinding); None (an app served some other way) leaves that out."""
    if max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be >= 1, got {max_body_bytes}")
    if not max_wait_s >= 0:
        raise ValueError(f"max_wait_s must be >= 0, got {max_wait_s}")
    config = ApiConfig(
        token=token or None,
        max_body_bytes=max_body_bytes,
        max_wait_s=max_wait_s,
        poll_interval_s=poll_interval_s,
    )
    h = _Handlers(service, inputs, transport, config)
    endpoints: dict[str, Callable[[Request], Awaitable[Response]]] = {
        "health": h.health,
        "openapi": h.openapi,
        "register_workflow": h.register_workflow,
        "list_workflows": h.list_workflows,
        "get_workflow": h.get_workflow,
        "start_run": h.start_run,
        "list_runs": h.list_runs,
        "get_run": h.get_run,
        "cancel_run": h.cancel_run,
        "purge_run": h.purge_run,
        "send_signal": h.send_signal,
        "submit_input": h.submit_input,
        "get_input": h.get_input,
        "withdraw_input": h.withdraw_input,
        "read_journal": h.read_journal,
        "follow_preview": h.follow_preview,
        "check_journal": h.check_journal,
        **bridge_endpoints(bridge, max_body_bytes=max_body_bytes),
    }
    in_flight = trio.CapacityLimiter(REQUESTS_IN_FLIGHT)
    routes: list[BaseRoute] = [
        Route(
            _route_path(doc.path),
            _guarded(
                endpoints[doc.operation_id],
                None if doc.operation_id in _UNLIMITED_OPERATIONS else in_flight,
                max_body_bytes if doc.body is not None else None,
            ),
            methods=[doc.method],
        )
        for doc in ROUTES
    ]
    routes.extend(console_routes())
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(_ErrorBoundary),
            *([Middleware(_LoopbackHostGuard)] if guards_host(listen_host, config.token) else []),
            Middleware(_CrossOriginGuard),
            Middleware(_BearerAuth, token=config.token),
        ],
        exception_handlers={HTTPException: _http_exception},
    )
    # A path the document does not name is a 404 ``not_found``, as ``/health/`` already was:
    # Starlette's default answers ``/runs/`` with a 307 to ``/runs``, which a DELETE or PUT
    # client then repeats on a route that refuses it, with a Location built from the request's
    # Host header. The console's one redirect (``/ui`` to ``/ui/``) is a route of its own.
    app.router.redirect_slashes = False
    return app


class _RequestIdConvertor(Convertor[str]):
    """The rest of the path, whatever it holds: a request id may contain '/' (sent as ``%2F``,
    which the server decodes) and even a newline, which must reach the validator to be refused
    with a 400 rather than miss the route (Starlette's ``path`` is ``.*``, which stops there)."""

    regex = "(?s:.+)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


_REQUEST_ID_CONVERTOR = "dagnats_request_id"
register_url_convertor(_REQUEST_ID_CONVERTOR, _RequestIdConvertor())


def _route_path(path: str) -> str:
    """The Starlette pattern of a documented path (every other id is one segment)."""
    return path.replace("{request_id}", f"{{request_id:{_REQUEST_ID_CONVERTOR}}}")


def _guarded(
    endpoint: Callable[[Request], Awaitable[Response]],
    in_flight: trio.CapacityLimiter | None,
    body_max_bytes: int | None,
) -> Callable[[Request], Awaitable[Response]]:
    """Expected errors of any layer become their JSON answer; the rest go to the boundary.
    With ``in_flight``, the endpoint runs holding a place in it (a stream's events are sent
    after the endpoint returned, so a follower holds none). A route that takes a body
    (``body_max_bytes``) has it read first, holding no place (the endpoint's read gets the same
    bytes): clients that stopped sending mid-body held every place, and every other request
    waited behind them (found from outside: 64 of them hung the API)."""

    async def wrapper(request: Request) -> Response:
        try:
            if in_flight is None:
                return await endpoint(request)
            if body_max_bytes is not None:
                await read_body(request, body_max_bytes)
            async with in_flight:
                return await endpoint(request)
        except Exception as exc:
            err = api_error_for(exc)
            if err is None:
                raise
            return error_response(err)

    return wrapper
