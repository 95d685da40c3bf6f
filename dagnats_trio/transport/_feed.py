"""A :class:`~dagnats_trio.transport.Feed` that is one :meth:`Transport.fetch` per fetch.

What a transport with no standing pull request of its own (SimTransport, the nats-py one)
answers :meth:`Transport.consume` with, and what a wrapper transport (chaos faults, a test's
log) answers with over its own ``fetch``, so a loop on a feed passes through the wrapper's
fetch as a loop that fetched itself would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol, final

from ._interface import Delivery


class Fetcher(Protocol):
    """What a feed or a puller over fetches needs of a transport."""

    async def fetch(
        self, stream: str, durable: str, batch: int, timeout_s: float
    ) -> list[Delivery]: ...


@final
class FetchFeed:
    """Each fetch asks ``transport`` for up to ``batch`` deliveries; it holds none between."""

    def __init__(self, transport: Fetcher, stream: str, durable: str, batch: int) -> None:
        self._transport = transport
        self._stream = stream
        self._durable = durable
        self._batch = batch

    async def fetch(self, timeout_s: float) -> list[Delivery]:
        return await self._transport.fetch(self._stream, self._durable, self._batch, timeout_s)


@asynccontextmanager
async def fetch_feed(
    transport: Fetcher, stream: str, durable: str, batch: int
) -> AsyncIterator[FetchFeed]:
    """A :class:`FetchFeed` (nothing to give back on leaving: it holds nothing)."""
    if batch < 1:
        raise ValueError(f"fetch batch must be at least 1, got {batch}")
    yield FetchFeed(transport, stream, durable, batch)
