"""The REST API's handlers, one per operation of the route table: decode the request into an
attrs class, call :class:`Service` or :class:`InputsService`, encode a view.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..inputs import InputsService
from ..protocol import check_id, to_json
from ..transport import Transport, TransportError
from ..web import (
    JSON_MEDIA_TYPE,
    ApiError,
    bad_request,
    decode_body,
    not_found,
    parse_json,
    read_body,
)
from ._rest_check import check_step
from ._rest_config import ApiConfig
from ._rest_journal import (
    JOURNAL_PAGE_LIMIT_DEFAULT,
    JOURNAL_PAGE_LIMIT_MAX,
    MAX_SEQ,
    JournalCursor,
    JournalFollowResponse,
    parse_last_event_id,
    read_page,
)
from ._rest_openapi import openapi_json
from ._rest_params import _bool_param, _int_param, _only_params, _since_param, _wait_param
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
from .service import (
    LIST_RUNS_LIMIT_DEFAULT,
    LIST_RUNS_LIMIT_MAX,
    InvalidRequest,
    RunRunning,
    Service,
)

#: The API's one logger, named for :mod:`.rest` wherever the code that logs lives (operators and
#: tests filter on it).
log = logging.getLogger("dagnats_trio.api.rest")


def _json(value: Any, status: int = 200) -> Response:
    return Response(to_json(value), status_code=status, media_type=JSON_MEDIA_TYPE)


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
        raw = await self._body(request)
        body = decode_body(parse_json(raw), StartRunBody)
        run_id = await self.service.start_run(body.workflow, body.input, body.idempotency_key)
        return _json(RunStarted(run_id), 201)

    async def list_runs(self, request: Request) -> Response:
        q = request.query_params
        _only_params(request, {"workflow", "status", "limit", "cursor"})
        limit = _int_param(q.get("limit"), "limit", 1, LIST_RUNS_LIMIT_MAX, LIST_RUNS_LIMIT_DEFAULT)
        try:
            page = await self.service.list_runs(
                workflow=q.get("workflow") or None,
                status=q.get("status") or None,
                limit=limit,
                cursor=q.get("cursor") or None,
            )
        except InvalidRequest as exc:
            # The service refuses only its query's values (the status, the cursor; each
            # message names it), so this is the query's 400, as for the other parameters.
            raise bad_request(str(exc), code="invalid_query") from None
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
