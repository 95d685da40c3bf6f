"""A delivery from the simulated server's pull consumers, and how each settle acts on it.

A double ack waits for the server (a round trip); a nak, an in-progress and a term are fire and
forget, so they are lost silently while the server is unavailable, as on a real one; an
``ack_nowait`` too, and it reaches the server at once (it is queued, not awaited: no delay).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from ._values import Headers

if TYPE_CHECKING:
    from ._sim import SimTransport
    from ._sim_server import SimServer


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

    def _server(self) -> SimServer:
        return self._conn.server

    async def ack(self) -> None:
        await self._conn._call()
        self._server()._settle(self._stream, self._durable, self.stream_seq, remove=True)

    def ack_nowait(self) -> None:
        if not self._conn._fire_and_forget_now():
            return
        self._server()._settle(self._stream, self._durable, self.stream_seq, remove=True)

    async def nak(self, delay_s: float | None = None) -> None:
        if not await self._conn._fire_and_forget():
            return
        self._server()._redeliver_after(
            self._stream, self._durable, self.stream_seq, delay_s or 0.0
        )

    async def in_progress(self) -> None:
        if not await self._conn._fire_and_forget():
            return
        self._server()._restart_ack_wait(self._stream, self._durable, self.stream_seq)

    async def term(self) -> None:
        if not await self._conn._fire_and_forget():
            return
        self._server()._settle(self._stream, self._durable, self.stream_seq, remove=True)
