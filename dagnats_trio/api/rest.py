"""The REST API: an ASGI app (Starlette, running on Trio through anyio) over the service layer.

:func:`create_app` builds it; :class:`dagnats_trio.api.server.ApiServer` serves it with hypercorn.
Handlers are thin: decode the request into an attrs class, call :class:`Service` or
:class:`InputsService`, encode a view. Failures travel as typed exceptions and are turned into
``{"error": {"code", "message"}}`` in one place (:mod:`._rest_errors`); anything unexpected is
logged here and answered 500 ``internal`` with no details, so no stack trace reaches a client.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..bridge import Bridge, bridge_endpoints
from ..dag import DurationError, parse_duration_text
from ..inputs import InputsService, SubmissionStatus
from ..protocol import check_id, parse_decimal, to_json
from ..transport import Transport, TransportError
from ..web import (
    JSON_MEDIA_TYPE,
    ApiError,
    bad_request,
    decode_body,
    error_response,
    internal_error_response,
    not_found,
    parse_json,
    read_body,
)
from ._console import CONSOLE_PREFIX, console_routes
from ._rest_check import check_step
from ._rest_errors import api_error_for
from ._rest_journal import (
    FOLLOW_POLL_INTERVAL_S,
    JOURNAL_PAGE_LIMIT_DEFAULT,
    JOURNAL_PAGE_LIMIT_MAX,
    MAX_SEQ,
    JournalCursor,
    JournalFollowResponse,
    parse_last_event_id,
    read_page,
)
from ._rest_openapi import ROUTES, openapi_json
from ._rest_preview import PreviewFollowResponse
from ._rest_views import (
    HEALTH_NATS_TIMEOUT_S,
    CancelBody,
    Health,
    RunList,
    RunStarted,
    SignalAccepted,
    SignalBody,
    StartRunBody,
    SubmitInputBody,
    WorkflowList,
    run_summary,
    run_view,
)
from .service import LIST_RUNS_LIMIT_DEFAULT, LIST_RUNS_LIMIT_MAX, RunRunning, Service

log = logging.getLogger(__name__)

#: Largest request body accepted by default (the inputs service bounds content at 64 KiB; a
#: workflow definition of a thousand steps fits well under this).
DEFAULT_MAX_BODY_BYTES = 1_048_576
#: Longest an input ``GET ...?wait=`` may wait by default.
DEFAULT_MAX_WAIT_S = 60.0
#: The one route that never needs a token.
HEALTH_PATH = "/healthz"
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


@attrs.frozen
class ApiConfig:
    """``poll_interval_s``: longest a journal follower goes without looking for new records."""

    token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_wait_s: float = DEFAULT_MAX_WAIT_S
    poll_interval_s: float = FOLLOW_POLL_INTERVAL_S


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
) -> Starlette:
    """The ASGI app. ``token`` (when not None or empty) is required as a bearer token on every
    route but ``/healthz``. ``bridge`` serves the ``/bridge/...`` routes (without one they answer
    404 ``bridge_disabled``)."""
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
            ),
            methods=[doc.method],
        )
        for doc in ROUTES
    ]
    routes.extend(console_routes())
    return Starlette(
        routes=routes,
        middleware=[
            Middleware(_ErrorBoundary),
            Middleware(_BearerAuth, token=config.token),
        ],
        exception_handlers={HTTPException: _http_exception},
    )


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


# --- handlers --------------------------------------------------------------------------------


def _json(value: Any, status: int = 200) -> Response:
    return Response(to_json(value), status_code=status, media_type=JSON_MEDIA_TYPE)


def _guarded(
    endpoint: Callable[[Request], Awaitable[Response]],
    in_flight: trio.CapacityLimiter | None,
) -> Callable[[Request], Awaitable[Response]]:
    """Expected errors of any layer become their JSON answer; the rest go to the boundary.
    With ``in_flight``, the endpoint runs holding a place in it (a stream's events are sent
    after the endpoint returned, so a follower holds none)."""

    async def wrapper(request: Request) -> Response:
        try:
            if in_flight is None:
                return await endpoint(request)
            async with in_flight:
                return await endpoint(request)
        except Exception as exc:
            err = api_error_for(exc)
            if err is None:
                raise
            return error_response(err)

    return wrapper


class _Handlers:
    def __init__(
        self, service: Service, inputs: InputsService, transport: Transport, config: ApiConfig
    ) -> None:
        self.service = service
        self.inputs = inputs
        self.transport = transport
        self.config = config
        self._openapi = openapi_json()

    async def _body(self, request: Request) -> bytes:
        return await read_body(request, self.config.max_body_bytes)

    async def health(self, request: Request) -> Response:
        """200 while NATS answers a JetStream round trip within :data:`HEALTH_NATS_TIMEOUT_S`,
        503 (same body shape) while it does not: a process whose NATS is gone is not healthy."""
        try:
            await self.transport.ping(HEALTH_NATS_TIMEOUT_S)
        except TransportError as exc:
            # DEBUG: a probe polls this every few seconds, and the transport already says once
            # that NATS is unreachable and once that it is back.
            log.debug("health: NATS is not answering: %r", exc)
            return _json(Health(status="unavailable", nats="down"), 503)
        return _json(Health())

    async def openapi(self, request: Request) -> Response:
        return Response(self._openapi, media_type=JSON_MEDIA_TYPE)

    # --- workflows ---------------------------------------------------------------------------

    async def register_workflow(self, request: Request) -> Response:
        body = await self._body(request)
        parse_json(body)  # bad JSON is a 400 of its own, before validation
        definition = await self.service.register_workflow(body)
        return _json(definition, 201)

    async def list_workflows(self, request: Request) -> Response:
        found = await self.service.list_workflows()
        return _json(WorkflowList(tuple(sorted(found, key=lambda d: d.name))))

    async def get_workflow(self, request: Request) -> Response:
        return _json(await self.service.get_workflow(request.path_params["name"]))

    # --- runs --------------------------------------------------------------------------------

    async def start_run(self, request: Request) -> Response:
        body = decode_body(parse_json(await self._body(request)), StartRunBody)
        run_id = await self.service.start_run(body.workflow, body.input, body.idempotency_key)
        return _json(RunStarted(run_id), 201)

    async def list_runs(self, request: Request) -> Response:
        q = request.query_params
        _only_params(request, {"workflow", "status", "limit", "cursor"})
        limit = _int_param(q.get("limit"), "limit", 1, LIST_RUNS_LIMIT_MAX, LIST_RUNS_LIMIT_DEFAULT)
        page = await self.service.list_runs(
            workflow=q.get("workflow") or None,
            status=q.get("status") or None,
            limit=limit,
            cursor=q.get("cursor") or None,
        )
        return _json(RunList(tuple(run_summary(s) for s in page.runs), page.next_cursor))

    async def get_run(self, request: Request) -> Response:
        snap = await self.service.get_run(request.path_params["run_id"])
        return _json(run_view(snap, await self.service.unserved_steps(snap)))

    async def cancel_run(self, request: Request) -> Response:
        raw = parse_json(await self._body(request), optional=True)
        body = decode_body(raw, CancelBody)
        snap = await self.service.cancel_run(request.path_params["run_id"], body.reason)
        if snap.status.finished:
            status = snap.status.value
            raise ApiError(
                409, "run_finished", f"run {snap.run_id!r} has already finished ({status})"
            )
        return _json(run_view(snap), 202)

    async def purge_run(self, request: Request) -> Response:
        try:
            await self.service.purge_run(request.path_params["run_id"])
        except RunRunning as exc:
            raise ApiError(409, "run_running", str(exc)) from None
        return Response(status_code=204)

    async def send_signal(self, request: Request) -> Response:
        raw = parse_json(await self._body(request), optional=True)
        body = decode_body(raw, SignalBody)
        run_id = request.path_params["run_id"]
        name = request.path_params["name"]
        await self.service.send_signal(run_id, name, body.payload)
        return _json(SignalAccepted(run_id, name), 202)

    # --- inputs ------------------------------------------------------------------------------

    async def submit_input(self, request: Request) -> Response:
        body = decode_body(parse_json(await self._body(request)), SubmitInputBody)
        sub, created = await self.inputs.submit(
            request.path_params["run_id"],
            request.path_params["step_id"],
            body.request_id,
            body.mode,
            body.content,
        )
        return _json(sub, 201 if created else 200)

    async def get_input(self, request: Request) -> Response:
        _only_params(request, {"wait", "since"})
        wait_s = _wait_param(request.query_params.get("wait"), self.config.max_wait_s)
        since = _since_param(request.query_params.get("since"))
        sub = await self.inputs.get(
            request.path_params["run_id"],
            request.path_params["step_id"],
            request.path_params["request_id"],
            wait_s=wait_s,
            since=since,
        )
        return _json(sub)

    async def withdraw_input(self, request: Request) -> Response:
        await self.inputs.withdraw(
            request.path_params["run_id"],
            request.path_params["step_id"],
            request.path_params["request_id"],
        )
        return Response(status_code=204)

    # --- journal -----------------------------------------------------------------------------

    async def read_journal(self, request: Request) -> Response:
        q = request.query_params
        _only_params(request, {"from", "limit", "follow"})
        run_id = request.path_params["run_id"]
        step_id = request.path_params["step_id"]
        from_seq = _int_param(q.get("from"), "from", 0, MAX_SEQ, 1)
        limit = _int_param(
            q.get("limit"), "limit", 1, JOURNAL_PAGE_LIMIT_MAX, JOURNAL_PAGE_LIMIT_DEFAULT
        )
        follow = _bool_param(q.get("follow"), "follow")
        resume_after = parse_last_event_id(request.headers.get("last-event-id"))
        await self._require_step(run_id, step_id)
        if not follow:
            page = await read_page(self.transport, run_id, step_id, from_seq, limit)
            return _json(page)
        start = resume_after if resume_after is not None else JournalCursor(from_seq)
        return JournalFollowResponse(
            self.service,
            self.transport,
            run_id,
            step_id,
            start,
            poll_interval_s=self.config.poll_interval_s,
        )

    async def follow_preview(self, request: Request) -> Response:
        _only_params(request, set())
        run_id = request.path_params["run_id"]
        step_id = request.path_params["step_id"]
        await self._require_step(run_id, step_id)
        return PreviewFollowResponse(
            self.service,
            self.transport,
            run_id,
            step_id,
            poll_interval_s=self.config.poll_interval_s,
        )

    async def check_journal(self, request: Request) -> Response:
        _only_params(request, set())
        run_id = request.path_params["run_id"]
        step_id = request.path_params["step_id"]
        await self._require_step(run_id, step_id)
        return _json(await check_step(self.service, self.transport, run_id, step_id))

    async def _require_step(self, run_id: str, step_id: str) -> None:
        snap = await self.service.get_run(run_id)
        check_id("step_id", step_id)
        if step_id not in snap.steps:
            raise not_found(f"run {run_id!r} has no step {step_id!r}", "step_not_found")


# --- query parameters ------------------------------------------------------------------------


def _only_params(request: Request, allowed: set[str]) -> None:
    unknown = sorted(k for k in request.query_params if k not in allowed)
    if unknown:
        names = ", ".join(sorted(allowed))
        raise bad_request(
            f"unknown query parameter(s) {', '.join(unknown)}; allowed: {names}",
            code="invalid_query",
        )


def _int_param(raw: str | None, name: str, low: int, high: int, default: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        return parse_decimal(raw, low=low, high=high)
    except ValueError as exc:
        raise bad_request(f"{name} {exc}", code="invalid_query") from None


def _bool_param(raw: str | None, name: str) -> bool:
    if raw is None or raw in ("", "0", "false"):
        return False
    if raw in ("1", "true"):
        return True
    raise bad_request(f"{name} must be 1, 0, true or false", code="invalid_query")


def _wait_param(raw: str | None, max_wait_s: float) -> float | None:
    """``wait`` as seconds, cut to ``max_wait_s``: "30s", "250ms" or integer milliseconds."""
    if raw is None or raw == "":
        return None
    try:
        ms = parse_duration_text(raw)
    except DurationError as exc:
        raise bad_request(f"wait: {exc}", code="invalid_wait") from None
    return min(ms / 1000.0, max_wait_s)


def _since_param(raw: str | None) -> SubmissionStatus | None:
    if raw is None or raw == "":
        return None
    try:
        return SubmissionStatus(raw)
    except ValueError:
        names = ", ".join(s.value for s in SubmissionStatus)
        raise bad_request(f"since must be one of {names}", code="invalid_query") from None


# --- middleware ------------------------------------------------------------------------------


async def _http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 (no route) and 405 (wrong method), as JSON errors."""
    assert isinstance(exc, HTTPException)
    codes = {404: "not_found", 405: "method_not_allowed"}
    code = codes.get(exc.status_code, "http_error")
    err = ApiError(exc.status_code, code, exc.detail, headers=dict(exc.headers or {}))
    return error_response(err)


class _ErrorBoundary:
    """The last line: an exception no handler expected is logged with its trace and answered
    500 ``internal`` with no details; it is not re-raised (the server would log it again)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if not started:
                await internal_error_response()(scope, receive, send)


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
