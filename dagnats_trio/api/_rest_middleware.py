"""The REST API's middleware: the bearer token on every route but health and the console's
static files, the refusal of requests a web page of another origin sent (:mod:`._rest_origin`)
and of requests naming another host than loopback to an open loopback API (:mod:`._rest_host`),
the error boundary that answers 500 with no details, and Starlette's own 404 and 405 as JSON
errors.
"""

from __future__ import annotations

import hmac
import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..web import ApiError, error_response, internal_error_response
from ._console import CONSOLE_PREFIX
from ._rest_host import host_refusal
from ._rest_origin import cross_origin_refusal

#: The API's one logger, named for :mod:`.rest` wherever the code that logs lives (operators and
#: tests filter on it).
log = logging.getLogger("dagnats_trio.api.rest")

#: The one route that never needs a token.
HEALTH_PATH = "/healthz"


async def _http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 (no route) and 405 (wrong method), as JSON errors."""
    assert isinstance(exc, HTTPException)
    codes = {404: "not_found", 405: "method_not_allowed"}
    code = codes.get(exc.status_code, "http_error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    err = ApiError(exc.status_code, code, exc.detail, headers=headers)
    return error_response(err)


def _allowed_methods(request: Request) -> str:
    """Every method some route takes at the request's path. Each documented route is a
    Starlette route of one method, and Starlette's 405 names the first one matched alone:
    ``OPTIONS /runs/{id}`` said ``Allow: HEAD, GET`` though ``DELETE`` is served there too
    (found from outside, schemathesis' Allow check)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


def _has_body(scope: Scope) -> bool:
    """Does the request announce a body (a ``Content-Length`` other than 0, or chunks)?"""
    for name, value in scope.get("headers", []):
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            return bool(value.strip() != b"0")
    return False


class _ErrorBoundary:
    """The last line: an exception no handler expected is logged with its trace and answered
    500 ``internal`` with no details; it is not re-raised (the server would log it again).

    It also marks an answer given before the request's body was read in full (a 413 while the
    body still comes, a 401, 403, 404 or 405 that never reads it) ``Connection: close``: the
    server then closes the connection, since the rest of the body is still on it, and a client
    told nothing reused it and lost its next request (found from outside: httpx's next POST
    after a 413 failed with "Server disconnected")."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        body_unread = _has_body(scope)

        async def tracking_receive() -> Message:
            nonlocal body_unread
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                body_unread = False
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if body_unread:
                    headers = [*message.get("headers", []), (b"connection", b"close")]
                    message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, tracking_receive, tracking_send)
        except Exception:
            log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await internal_error_response()(scope, tracking_receive, tracking_send)


class _LoopbackHostGuard:
    """Mounted only on an API that listens on loopback with no token: a request whose ``Host``
    is not a loopback name is answered 403 ``host_not_allowed`` (:func:`._rest_host.host_refusal`
    says which), but ``/healthz``, which tells nothing."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path", "") != HEALTH_PATH:
            refusal = host_refusal(scope.get("headers", []))
            if refusal is not None:
                message = (
                    f"{refusal}: this API listens on loopback without a token, so it serves only "
                    "requests to localhost, 127.0.0.1 or [::1] (a DNS rebinding page names its own "
                    "host); set a token to serve it under other names"
                )
                err = ApiError(403, "host_not_allowed", message)
                await error_response(err)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _CrossOriginGuard:
    """A request a web page of another origin sent is answered 403 ``cross_origin`` before
    anything else looks at it (:func:`._rest_origin.cross_origin_refusal` says which)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = cross_origin_refusal(scope.get("method", ""), scope.get("headers", []))
            if refusal is not None:
                message = (
                    f"{refusal}: the API takes no request from a web page of another origin "
                    "(use the console at /ui/ on this origin, or a client that is not a browser)"
                )
                await error_response(ApiError(403, "cross_origin", message))(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _BearerAuth:
    """With a token configured, every route but ``/healthz`` and the console's static files
    (``/ui/...``: HTML, CSS and JavaScript, no data) needs ``Authorization: Bearer``; the
    comparison takes the same time whatever the bytes sent."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        public = path in (HEALTH_PATH, CONSOLE_PREFIX) or path.startswith(f"{CONSOLE_PREFIX}/")
        if self._expected is None or scope["type"] != "http" or public:
            await self.app(scope, receive, send)
            return
        presented = b""
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                presented = value
                break
        if not hmac.compare_digest(presented, self._expected):
            # Missing and wrong are told apart (the code stays "unauthorized"): a user who sent
            # a token needs to know it is the wrong one, not to add one.
            message = (
                "the bearer token is wrong (check DAGNATS_API_TOKEN or --token)"
                if presented
                else "a bearer token is required (Authorization: Bearer <token>; the CLI sends "
                "DAGNATS_API_TOKEN or --token)"
            )
            err = ApiError(401, "unauthorized", message, headers={"www-authenticate": "Bearer"})
            await error_response(err)(scope, receive, send)
            return
        await self.app(scope, receive, send)
