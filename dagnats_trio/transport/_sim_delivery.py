"""A delivery from the simulated server's pull consumers, and how each settle acts on it.

A double ack waits for the server (a round trip); a nak, an in-progress and a term are fire and
forget, so they are lost silently while the server is unavailable, as on a real one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs
import trio

from ._interface import Headers

if TYPE_CHECKING:
    from ._sim import SimTransport


@final
@attrs.frozen
class SimDelivery:
    """A delivery from :meth:`SimTransport.fetch`; implements :class:`Delivery`."""

    subject: str
    data: bytes
    headers: Headers
    stream_seq: int
    num_delivered: int
    _conn: SimTransport = attrs.field(repr=False)
    _stream: str = attrs.field(repr=False)
    _durable: str = attrs.field(repr=False)

    async def ack(self) -> None:
        await self._conn._call()
        self._conn._server._settle(self._stream, self._durable, self.stream_seq, remove=True)

    async def ack_nowait(self) -> None:
        if not await self._conn._fire_and_forget():
            return
        self._conn._server._settle(self._stream, self._durable, self.stream_seq, remove=True)

    async def nak(self, delay_s: float | None = None) -> None:
        if not await self._conn._fire_and_forget():
            return
        server = self._conn._server
        pending = server._pending(self._stream, self._durable, self.stream_seq)
        if pending is not None:
            pending.due = trio.current_time() + (delay_s or 0.0)
            server._notify()

    async def in_progress(self) -> None:
        if not await self._conn._fire_and_forget():
            return
        server = self._conn._server
        pending = server._pending(self._stream, self._durable, self.stream_seq)
        consumer = server._consumers.get((self._stream, self._durable))
        if pending is not None and consumer is not None:
            pending.due = trio.current_time() + consumer.config.ack_wait_for(pending.delivered)

    async def term(self) -> None:
        if not await self._conn._fire_and_forget():
            return
        self._conn._server._settle(self._stream, self._durable, self.stream_seq, remove=True)
