"""Server-sent event responses: what every live stream of the API shares.

A stream opens what it follows (a subscription) before it sends its headers, so a client holding
the headers sees everything published after that. The client's disconnect cancels the stream at
whatever it awaits; what it opened is released by the ``finally`` of its context managers (the
transport's calls are safe to cancel at any await). A stream whose client is gone does not finish
its response: finishing it would put hypercorn's connection back into keep-alive, and the reset
socket would stay open until the keep-alive timeout.
"""

from __future__ import annotations

import abc
import logging

import attrs
import trio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..transport import Transport, TransportError
from ..web import ApiError, error_response
from ._rest_errors import api_error_for
from .service import RunNotFound, Service

log = logging.getLogger(__name__)

SSE_MEDIA_TYPE = "text/event-stream"
#: A comment line is sent after this much silence, so proxies and clients see a live stream.
FOLLOW_KEEPALIVE_S = 15.0
#: A live stream is closed after this long; the client reconnects (with ``Last-Event-ID`` where
#: the stream has ids).
FOLLOW_MAX_S = 3_600.0
#: The event that closes a stream because the step finished.
END_EVENT = "end"

_UNAVAILABLE = ApiError(503, "unavailable", "NATS is not answering right now; try again")


@attrs.frozen
class FollowEnd:
    """Data of the ``end`` event: why the stream closed."""

    step_status: str
    run_status: str


async def step_finished(service: Service, run_id: str, step_id: str) -> FollowEnd | None:
    """Why a stream of this step should end now, or None while the step and its run go on."""
    try:
        snap = await service.get_run(run_id)
    except RunNotFound:
        return FollowEnd(step_status="unknown", run_status="unknown")
    step = snap.steps.get(step_id)
    step_status = step.status.value if step is not None else "unknown"
    if step is None or step.status.finished or snap.status.finished:
        return FollowEnd(step_status=step_status, run_status=snap.status.value)
    return None


class EventSink:
    """Where a stream writes: the headers once, then events and keep-alive comments."""

    def __init__(
        self, send: Send, status: int, headers: list[tuple[bytes, bytes]], keepalive_s: float
    ) -> None:
        self._send = send
        self._status = status
        self._headers = headers
        self._keepalive_s = keepalive_s
        self._quiet_since = trio.current_time()
        self.started = False

    async def start(self) -> None:
        """Send the headers (once): from here on the client is following."""
        if not self.started:
            self.started = True
            self._quiet_since = trio.current_time()
            await self._send(
                {"type": "http.response.start", "status": self._status, "headers": self._headers}
            )

    async def event(self, event: str, data: bytes, event_id: int | str | None = None) -> None:
        """One event; ``data`` is compact JSON (no raw newline), so one ``data`` line holds it."""
        await self.start()
        head = f"id: {event_id}\n" if event_id is not None else ""
        body = f"{head}event: {event}\ndata: ".encode() + data + b"\n\n"
        await self._send({"type": "http.response.body", "body": body, "more_body": True})
        self._quiet_since = trio.current_time()

    @property
    def keepalive_due(self) -> float:
        """The Trio time at which a silent stream should send a keep-alive comment."""
        return self._quiet_since + self._keepalive_s

    async def keepalive_if_quiet(self) -> None:
        if trio.current_time() >= self.keepalive_due:
            await self._send(
                {"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True}
            )
            self._quiet_since = trio.current_time()
        else:
            await trio.lowlevel.checkpoint()


class EventStreamResponse(Response, abc.ABC):
    """A ``text/event-stream`` answer; a subclass writes its events in :meth:`stream` (abstract:
    a stream with nothing to send cannot be built).

    The stream ends when :meth:`stream` returns, after ``max_follow_s``, or when the client
    disconnects (then nothing more is sent). A transport failure before the headers is answered
    with the usual JSON error; after them, the stream just ends and the client reconnects.
    """

    def __init__(self, *, what: str, keepalive_s: float, max_follow_s: float) -> None:
        super().__init__(
            status_code=200,
            media_type=SSE_MEDIA_TYPE,
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )
        # The base class counted an empty body; a stream has no length.
        del self.headers["content-length"]
        self._what = what
        self._keepalive_s = keepalive_s
        self._max_follow_s = max_follow_s

    @abc.abstractmethod
    async def stream(self, sink: EventSink) -> None:
        """Send the stream's events through ``sink`` (``await sink.start()`` first, once what
        it follows is open); returning ends the stream."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sink = EventSink(send, self.status_code, self.raw_headers, self._keepalive_s)
        gone = False
        failure: ApiError | None = None

        async def watch_disconnect(scope: trio.CancelScope) -> None:
            nonlocal gone
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    gone = True
                    scope.cancel()
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_disconnect, nursery.cancel_scope)
            with trio.move_on_after(self._max_follow_s):
                try:
                    await self.stream(sink)
                except* (OSError, TransportError) as group:
                    # The client went away mid-write, or NATS failed: the stream just ends and
                    # the client resumes.
                    exc: BaseException = group
                    while isinstance(exc, BaseExceptionGroup):
                        exc = exc.exceptions[0]
                    log.warning("%s ended: %r", self._what, exc)
                    failure = api_error_for(exc) or _UNAVAILABLE
            nursery.cancel_scope.cancel()
        if gone:
            return
        if not sink.started and failure is not None:
            await error_response(failure)(scope, receive, send)
            return
        await sink.start()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class StepStreamResponse(EventStreamResponse):
    """A stream that follows one step of one run until the step (or its run) has finished:
    what the journal and the preview streams share."""

    def __init__(
        self,
        service: Service,
        transport: Transport,
        run_id: str,
        step_id: str,
        *,
        kind: str,
        poll_interval_s: float,
        keepalive_s: float,
        max_follow_s: float,
    ) -> None:
        super().__init__(
            what=f"{kind} stream {run_id}/{step_id}",
            keepalive_s=keepalive_s,
            max_follow_s=max_follow_s,
        )
        self._service = service
        self._transport = transport
        self._run_id = run_id
        self._step_id = step_id
        self._poll_interval_s = poll_interval_s

    async def finished(self) -> FollowEnd | None:
        """Why the stream should end now, or None while the step and its run go on."""
        return await step_finished(self._service, self._run_id, self._step_id)
