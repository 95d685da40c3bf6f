"""A :class:`~dagnats_trio.transport.Puller` that is one :meth:`Transport.fetch` per fetch.

What a transport whose acks cannot carry a pull request (SimTransport, the nats-py one)
answers :meth:`Transport.pull` with, and what a wrapper transport (chaos faults, a test's log)
answers with over its own ``fetch``, so a worker's deliveries pass through the wrapper's fetch.
It keeps the puller's accounting with no request waiting on a server: an ask and an ack with
next add to :attr:`asked`, each fetch asks the transport for that many, and a fetch that
times out with nothing is the requests' expiry (every place asked is released). With an
``on_delivery``, each fetch hands what it got to it and returns [].
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import final

import trio

from ._errors import Closed
from ._feed import Fetcher
from ._interface import Delivery


@final
class FetchPuller:
    """The places asked for, filled by fetches of the transport's own."""

    def __init__(
        self,
        transport: Fetcher,
        stream: str,
        durable: str,
        on_release: Callable[[int], None],
        on_delivery: Callable[[Delivery], None] | None = None,
    ) -> None:
        self._transport = transport
        self._stream = stream
        self._durable = durable
        self._on_release = on_release
        self._on_delivery = on_delivery
        self._asked = 0
        self._left = False

    @property
    def asked(self) -> int:
        return self._asked

    async def ask(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"ask for at least one delivery, got {n}")
        await trio.lowlevel.checkpoint()
        if self._left:
            raise Closed(f"pull {self._stream}/{self._durable}: left")
        self._asked += n

    async def fetch(self, timeout_s: float) -> list[Delivery]:
        if self._asked == 0:
            await trio.lowlevel.checkpoint()
            return []
        got = await self._transport.fetch(self._stream, self._durable, self._asked, timeout_s)
        if got:
            self._asked -= len(got)
        else:
            self._release(self._asked)
        on_delivery = self._on_delivery
        if on_delivery is None:
            return got
        for delivery in got:
            on_delivery(delivery)
        return []

    def ack_next(self, delivery: Delivery) -> bool:
        delivery.ack_nowait()
        if self._left:
            return False
        self._asked += 1
        return True

    def _release(self, n: int) -> None:
        if n:
            self._asked -= n
            self._on_release(n)

    def leave(self) -> None:
        """Release every place still asked; later acks with next ack plainly."""
        self._left = True
        self._release(self._asked)


@asynccontextmanager
async def fetch_puller(
    transport: Fetcher,
    stream: str,
    durable: str,
    *,
    expires_s: float,
    on_release: Callable[[int], None],
    on_delivery: Callable[[Delivery], None] | None = None,
) -> AsyncIterator[FetchPuller]:
    """A :class:`FetchPuller` (it holds no delivery between fetches: nothing to give back)."""
    if not expires_s > 0:
        raise ValueError(f"expires_s must be positive, got {expires_s!r}")
    puller = FetchPuller(transport, stream, durable, on_release, on_delivery)
    try:
        yield puller
    finally:
        puller.leave()
