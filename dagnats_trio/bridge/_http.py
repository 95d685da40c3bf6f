"""The bridge's routes as Starlette endpoints, mounted by ``create_app`` on the REST app.

They share the REST app's router, bearer-token check, body bound and error shape: bodies are read
with the same bounded reader and decoded strictly into the attrs classes of :mod:`._views`, and a
:class:`BridgeError` becomes ``{"error": {"code", "message"}}`` with its status.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from ..dag import DurationError, parse_duration_text
from ..protocol import JsonValue, to_json
from ..web import JSON_MEDIA_TYPE, ApiError, decode_body, parse_json, read_body
from ._bridge import Bridge
from ._errors import BridgeError
from ._views import (
    CheckpointBody,
    CompleteBody,
    ContinueBody,
    FailBody,
    PauseBody,
    PlaceInputsBody,
)

T = TypeVar("T")

Endpoint = Callable[[Request], Awaitable[Response]]

#: Operation ids of the bridge routes (their paths and documentation are in the REST app's
#: route table, ``dagnats_trio.api._rest_openapi.ROUTES``).
BRIDGE_OPERATIONS: Final = (
    "bridge_poll",
    "bridge_heartbeat",
    "bridge_journal_read",
    "bridge_journal_append",
    "bridge_place_inputs",
    "bridge_load_checkpoint",
    "bridge_checkpoint",
    "bridge_complete",
    "bridge_fail",
    "bridge_continue",
    "bridge_pause",
)


def _json(value: Any, status: int = 200) -> Response:
    return Response(to_json(value), status_code=status, media_type=JSON_MEDIA_TYPE)


def _api_error(exc: BridgeError) -> ApiError:
    return ApiError(exc.status, exc.code, exc.message)


def _wait_s(request: Request) -> float:
    unknown = sorted(k for k in request.query_params if k != "wait")
    if unknown:
        raise ApiError(
            400, "invalid_query", f"unknown query parameter(s) {', '.join(unknown)}; allowed: wait"
        )
    raw = request.query_params.get("wait")
    if raw is None or raw == "":
        return 0.0
    try:
        ms = parse_duration_text(raw)
    except DurationError as exc:
        raise ApiError(400, "invalid_wait", f"wait: {exc}") from None
    return ms / 1000.0


def bridge_endpoints(bridge: Bridge | None, *, max_body_bytes: int) -> dict[str, Endpoint]:
    """The endpoint of each operation in :data:`BRIDGE_OPERATIONS`. Without a bridge each
    answers 404 ``bridge_disabled``, so the app's routes (and its OpenAPI document) stay the
    same whether or not this process runs one."""
    if bridge is None:

        async def disabled(request: Request) -> Response:
            raise ApiError(404, "bridge_disabled", "this server runs no worker bridge")

        return {name: disabled for name in BRIDGE_OPERATIONS}
    return _Endpoints(bridge, max_body_bytes).table()


class _Endpoints:
    def __init__(self, bridge: Bridge, max_body_bytes: int) -> None:
        self.bridge = bridge
        self.max_body_bytes = max_body_bytes

    def table(self) -> dict[str, Endpoint]:
        table: dict[str, Endpoint] = {
            "bridge_poll": self.poll,
            "bridge_heartbeat": self.heartbeat,
            "bridge_journal_read": self.journal_read,
            "bridge_journal_append": self.journal_append,
            "bridge_place_inputs": self.place_inputs,
            "bridge_load_checkpoint": self.load_checkpoint,
            "bridge_checkpoint": self.checkpoint,
            "bridge_complete": self.complete,
            "bridge_fail": self.fail,
            "bridge_continue": self.continue_,
            "bridge_pause": self.pause,
        }
        assert set(table) == set(BRIDGE_OPERATIONS)
        return {name: _answering(fn) for name, fn in table.items()}

    async def _raw(self, request: Request, *, optional: bool) -> JsonValue:
        return parse_json(await read_body(request, self.max_body_bytes), optional=optional)

    async def _body(self, request: Request, cls: type[T], *, optional: bool = False) -> T:
        return decode_body(await self._raw(request, optional=optional), cls)

    async def _no_body(self, request: Request) -> None:
        raw = await self._raw(request, optional=True)
        if raw != {}:
            raise ApiError(400, "invalid_body", "this route takes no body (or {})")

    async def poll(self, request: Request) -> Response:
        wait_s = _wait_s(request)
        await self._no_body(request)
        lease = await self.bridge.poll(request.path_params["task_type"], wait_s)
        if lease is None:
            return Response(status_code=204)
        return _json(lease)

    async def heartbeat(self, request: Request) -> Response:
        await self._no_body(request)
        return _json(await self.bridge.heartbeat(request.path_params["token"]))

    async def journal_read(self, request: Request) -> Response:
        await self._no_body(request)
        return _json(await self.bridge.journal_read(request.path_params["token"]))

    async def journal_append(self, request: Request) -> Response:
        raw = await self._raw(request, optional=False)
        if not isinstance(raw, dict):
            raise ApiError(400, "invalid_body", "body must be a JSON object (a journal record)")
        return _json(await self.bridge.journal_append(request.path_params["token"], raw))

    async def place_inputs(self, request: Request) -> Response:
        body = await self._body(request, PlaceInputsBody)
        return _json(await self.bridge.place_inputs(request.path_params["token"], body.mode))

    async def load_checkpoint(self, request: Request) -> Response:
        await self._no_body(request)
        return _json(await self.bridge.load_checkpoint(request.path_params["token"]))

    async def checkpoint(self, request: Request) -> Response:
        body = await self._body(request, CheckpointBody)
        return _json(await self.bridge.checkpoint(request.path_params["token"], body.state))

    async def complete(self, request: Request) -> Response:
        body = await self._body(request, CompleteBody, optional=True)
        return _json(await self.bridge.complete(request.path_params["token"], body.output))

    async def fail(self, request: Request) -> Response:
        body = await self._body(request, FailBody)
        token = request.path_params["token"]
        return _json(await self.bridge.fail(token, body.error, body.retriable))

    async def continue_(self, request: Request) -> Response:
        body = await self._body(request, ContinueBody, optional=True)
        settled = await self.bridge.continue_(
            request.path_params["token"],
            body.output,
            delay_ms=body.delay_ms,
            until_ms=body.until_ms,
            until_input=body.until_input,
        )
        return _json(settled)

    async def pause(self, request: Request) -> Response:
        body = await self._body(request, PauseBody)
        return _json(await self.bridge.pause(request.path_params["token"], body.duration_ms))


def _answering(endpoint: Endpoint) -> Endpoint:
    """A :class:`BridgeError` becomes its JSON answer through the app's error table."""

    async def wrapper(request: Request) -> Response:
        try:
            return await endpoint(request)
        except BridgeError as exc:
            raise _api_error(exc) from None

    return wrapper
