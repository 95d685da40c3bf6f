"""The live preview of a step (``put_stream``) as a server-sent event stream.

A handler's ``tc.put_stream(data)`` is a core NATS message on ``preview.{run}.{step}``: a live
preview, not a record, so nothing stores it and a stream cannot be resumed (its events carry no
``id``; a reconnect gets what is put from then on, and the journal is the record). The stream
subscribes before it sends its headers, so everything put after the client has the headers
reaches it, in the order it was put. It ends with an ``end`` event once the step (or its run)
has finished, after forwarding for :data:`PREVIEW_DRAIN_S` what was still on its way.
"""

from __future__ import annotations

import base64
import math
from typing import final

import trio

from ..protocol import layout, to_json
from ..transport import Transport, TransportError
from ._rest_sse import (
    END_EVENT,
    FOLLOW_KEEPALIVE_S,
    FOLLOW_MAX_S,
    EventSink,
    FollowEnd,
    StepStreamResponse,
)
from ._rest_views import PreviewChunk
from .service import Service

#: The event of one ``put_stream`` chunk.
PREVIEW_EVENT = "preview"
#: After the step is seen finished, chunks still on their way are forwarded this long.
PREVIEW_DRAIN_S = 0.5
#: Chunks held between the subscription and a slow client before the subscription waits.
PREVIEW_BUFFER_CHUNKS = 256


def chunk_of(data: bytes) -> PreviewChunk:
    """A chunk as the API shows it: text when it is UTF-8 (what ``put_stream(str)`` sends),
    else its bytes in base64, so nothing put is altered."""
    try:
        return PreviewChunk(text=data.decode("utf-8"))
    except UnicodeDecodeError:
        return PreviewChunk(base64=base64.b64encode(data).decode("ascii"))


@final
class PreviewFollowResponse(StepStreamResponse):
    """Every chunk put on one step's preview from now until the step (or its run) finishes."""

    def __init__(
        self,
        service: Service,
        transport: Transport,
        run_id: str,
        step_id: str,
        *,
        poll_interval_s: float,
        keepalive_s: float = FOLLOW_KEEPALIVE_S,
        max_follow_s: float = FOLLOW_MAX_S,
        drain_s: float = PREVIEW_DRAIN_S,
    ) -> None:
        super().__init__(
            service,
            transport,
            run_id,
            step_id,
            kind="preview",
            poll_interval_s=poll_interval_s,
            keepalive_s=keepalive_s,
            max_follow_s=max_follow_s,
        )
        self._drain_s = drain_s

    async def stream(self, sink: EventSink) -> None:
        subject = layout.preview_subject(self._run_id, self._step_id)
        send, receive = trio.open_memory_channel[bytes](PREVIEW_BUFFER_CHUNKS)

        async def pump(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            with send:
                async with self._transport.subscribe(subject) as messages:
                    task_status.started()
                    async for msg in messages:
                        await send.send(msg.data)

        with receive:
            async with trio.open_nursery() as nursery:
                await nursery.start(pump)
                await sink.start()
                finished = await self._forward(sink, receive)
                nursery.cancel_scope.cancel()
        await sink.event(END_EVENT, to_json(finished))

    async def _forward(
        self, sink: EventSink, chunks: trio.MemoryReceiveChannel[bytes]
    ) -> FollowEnd:
        """Forward chunks until the step has finished and the drain time has passed."""
        finished: FollowEnd | None = None
        check_at = trio.current_time()
        drain_until = math.inf
        while True:
            now = trio.current_time()
            if now >= drain_until and finished is not None:
                return finished
            if finished is None and now >= check_at:
                finished = await self.finished()
                check_at = trio.current_time() + self._poll_interval_s
                if finished is not None:
                    drain_until = trio.current_time() + self._drain_s
                continue
            wake_at = min(drain_until if finished is not None else check_at, sink.keepalive_due)
            data: bytes | None = None
            with trio.move_on_at(wake_at):  # only the receive: a send is never cut short
                try:
                    data = await chunks.receive()
                except trio.EndOfChannel:
                    raise TransportError("the preview subscription ended") from None
            if data is not None:
                await sink.event(PREVIEW_EVENT, to_json(chunk_of(data)))
            else:
                await sink.keepalive_if_quiet()
