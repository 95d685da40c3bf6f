"""The NATS endpoints ``api.inputs.submit|get|withdraw``: thin shells over :class:`InputsService`.

Requests and replies are JSON through the protocol converter. A reply carries ``status`` (the
HTTP status the REST layer would answer) and either the submission or
``{"error": {"code", "message"}}``. When a token is configured, a request must carry the header
``Authorization: Bearer <token>``, the same rule as run signals, because an input writes into an
agent's context and its tools run with the step's permissions.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, final

import attrs
import trio

from dagnats_trio.dag import DurationError, parse_duration
from dagnats_trio.protocol import (
    DecodeError,
    JsonPolicyError,
    JsonValue,
    converter,
    decode_json,
    from_json,
    from_obj,
    to_json,
)
from dagnats_trio.transport import CoreMsg, Headers, Transport, TransportError

from .errors import BadRequestError, InputError, NotFoundError, UnauthorizedError
from .service import InputsService
from .submission import Submission, SubmissionStatus

log = logging.getLogger(__name__)

SUBMIT_SUBJECT = "api.inputs.submit"
GET_SUBJECT = "api.inputs.get"
WITHDRAW_SUBJECT = "api.inputs.withdraw"
QUEUE_GROUP = "api"
#: Requests handled at once per endpoint process; a ``get`` that waits holds one slot.
MAX_CONCURRENT_REQUESTS = 256

T = TypeVar("T")


@final
@attrs.frozen
class SubmitRequest:
    run_id: str
    step_id: str
    request_id: str = ""
    mode: str = ""
    content: JsonValue = None


@final
@attrs.frozen
class GetRequest:
    """``wait`` (a duration: ``"30s"`` or integer milliseconds): wait up to this long for a
    change from ``since`` (default: the current status)."""

    run_id: str
    step_id: str
    request_id: str = ""
    wait: JsonValue = None
    since: str | None = None


@final
@attrs.frozen
class WithdrawRequest:
    run_id: str
    step_id: str
    request_id: str = ""


@final
@attrs.frozen
class SubmissionReply:
    status: int
    submission: Submission


@attrs.frozen
class ErrorBody:
    code: str
    message: str


@final
@attrs.frozen
class ErrorReply:
    status: int
    error: ErrorBody


def error_reply(exc: InputError) -> ErrorReply:
    return ErrorReply(status=exc.status, error=ErrorBody(code=exc.code, message=exc.message))


def bearer_token(headers: Headers) -> str | None:
    for name, value in headers.items():
        if name.lower() == "authorization":
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


@final
class InputsEndpoints:
    """Serves the three subjects in the ``api`` queue group until cancelled."""

    def __init__(
        self, transport: Transport, service: InputsService, token: str | None = None
    ) -> None:
        self._t = transport
        self._service = service
        self._token = token
        self._limit = trio.CapacityLimiter(MAX_CONCURRENT_REQUESTS)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with (
            self._t.subscribe(SUBMIT_SUBJECT, queue=QUEUE_GROUP) as submits,
            self._t.subscribe(GET_SUBJECT, queue=QUEUE_GROUP) as gets,
            self._t.subscribe(WITHDRAW_SUBJECT, queue=QUEUE_GROUP) as withdraws,
            trio.open_nursery() as nursery,
        ):
            for subject, msgs in (
                (SUBMIT_SUBJECT, submits),
                (GET_SUBJECT, gets),
                (WITHDRAW_SUBJECT, withdraws),
            ):
                nursery.start_soon(self._serve, msgs, self._handler_for(subject), nursery)
            task_status.started()

    async def _serve(
        self,
        msgs: AsyncIterator[CoreMsg],
        handler: Callable[[CoreMsg], Awaitable[SubmissionReply]],
        nursery: trio.Nursery,
    ) -> None:
        async for msg in msgs:
            if msg.reply is None:
                continue  # not a request: nobody to answer
            borrower = object()  # messages are not hashable; any unique token will do
            await self._limit.acquire_on_behalf_of(borrower)
            nursery.start_soon(self._answer, msg, handler, borrower)

    async def _answer(
        self,
        msg: CoreMsg,
        handler: Callable[[CoreMsg], Awaitable[SubmissionReply]],
        borrower: object,
    ) -> None:
        try:
            await self.handle(msg, handler)
        finally:
            self._limit.release_on_behalf_of(borrower)

    async def handle(
        self,
        msg: CoreMsg,
        handler: Callable[[CoreMsg], Awaitable[SubmissionReply]] | None = None,
    ) -> None:
        """Answer one request (by its subject unless ``handler`` is given); never raises for a
        bad request, whose error becomes the reply."""
        reply: SubmissionReply | ErrorReply
        try:
            self._authorize(msg)
            if handler is None:
                handler = self._handler_for(msg.subject)
            reply = await handler(msg)
        except InputError as exc:
            reply = error_reply(exc)
        except Exception:
            log.exception("inputs endpoint %s failed", msg.subject)
            reply = ErrorReply(500, ErrorBody("internal", "internal error"))
        try:
            await self._t.respond(msg, to_json(reply))
        except TransportError as exc:  # the requester is gone or NATS is down: nothing to do
            log.warning("could not answer %s: %s", msg.subject, exc)

    def _handler_for(self, subject: str) -> Callable[[CoreMsg], Awaitable[SubmissionReply]]:
        handlers = {
            SUBMIT_SUBJECT: self._submit,
            GET_SUBJECT: self._get,
            WITHDRAW_SUBJECT: self._withdraw,
        }
        handler = handlers.get(subject)
        if handler is None:
            raise NotFoundError(f"no inputs endpoint on {subject!r}", code="unknown_endpoint")
        return handler

    def _authorize(self, msg: CoreMsg) -> None:
        if self._token is None:
            return
        given = bearer_token(msg.headers)
        if given is None:
            raise UnauthorizedError("a bearer token is required (header Authorization: Bearer)")
        if not hmac.compare_digest(given.encode(), self._token.encode()):
            raise UnauthorizedError("the bearer token is wrong")

    async def _submit(self, msg: CoreMsg) -> SubmissionReply:
        req = _decode(msg.data, SubmitRequest)
        sub, created = await self._service.submit(
            req.run_id, req.step_id, req.request_id, req.mode, req.content
        )
        return SubmissionReply(status=201 if created else 200, submission=sub)

    async def _get(self, msg: CoreMsg) -> SubmissionReply:
        req = _decode(msg.data, GetRequest)
        since: SubmissionStatus | None = None
        if req.since is not None:
            try:
                since = SubmissionStatus(req.since)
            except ValueError:
                raise BadRequestError(
                    f"since {req.since!r} is not a submission status", code="invalid_since"
                ) from None
        wait_s: float | None = None
        if req.wait is not None:
            try:
                wait_s = parse_duration(req.wait) / 1000
            except DurationError as exc:
                raise BadRequestError(f"wait: {exc}", code="invalid_wait") from None
        sub = await self._service.get(req.run_id, req.step_id, req.request_id, wait_s, since=since)
        return SubmissionReply(status=200, submission=sub)

    async def _withdraw(self, msg: CoreMsg) -> SubmissionReply:
        req = _decode(msg.data, WithdrawRequest)
        sub = await self._service.withdraw(req.run_id, req.step_id, req.request_id)
        return SubmissionReply(status=204, submission=sub)


def _decode(data: bytes, cls: type[T]) -> T:
    """The request by the one JSON policy (as REST bodies), then strictly into ``cls``."""
    try:
        return from_obj(decode_json(data, where="request"), cls, "request")
    except (JsonPolicyError, DecodeError) as exc:
        raise BadRequestError(str(exc), code="invalid_request") from None


def decode_reply(data: bytes) -> SubmissionReply | ErrorReply:
    """For clients (and tests): the reply of any inputs endpoint."""
    raw: Any = from_json(data, dict[str, Any], "reply")
    if "error" in raw:
        return converter.structure(raw, ErrorReply)
    return converter.structure(raw, SubmissionReply)
