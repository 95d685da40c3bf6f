"""``NatsTransport``'s subscriptions on nats-py's side, each counted from subscribe to
unsubscribe and made live on the server before it is handed out.

The count is what ``open_subscriptions`` reports, so a caller that left without releasing a
subscription (a core subscription, a watch, a pull inbox) shows in tests and diagnostics. The
coroutines here are the asyncio side of a hop: they run inside one nats-py call, never from Trio.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

if TYPE_CHECKING:
    from ._nats_pull import PullInbox


class CountedSubscriptions:
    """The subscription helpers of :class:`~._nats.NatsTransport` (a mixin: the transport
    holds the connection, its request timeout and the count)."""

    _nc: NatsClient
    _timeout: float
    _subscriptions: int

    @property
    def open_subscriptions(self) -> int:
        """Subscriptions this transport holds on its connection right now (the request and
        pull inboxes, core subscriptions, watches); for tests and diagnostics: a caller that
        left without releasing one shows here."""
        return self._subscriptions

    async def _subscribe_counted(self, subject: str, **options: Any) -> Any:
        """asyncio side: a nats-py subscription, counted until :meth:`_unsubscribe_counted`."""
        sub = await self._nc.subscribe(subject, **options)
        self._subscriptions += 1
        return sub

    async def _unsubscribe_counted(self, sub: Any) -> None:
        """asyncio side: the end of a subscription (a closed connection has none left either)."""
        try:
            await sub.unsubscribe()
        finally:
            self._subscriptions -= 1

    async def _flushed(self, sub: Any) -> Any:
        """asyncio side: ``sub`` once the server has it; released when the flush fails."""
        try:
            await self._nc.flush(timeout=int(max(1.0, self._timeout)))
        except BaseException:
            await self._unsubscribe_counted(sub)
            raise
        return sub

    async def _subscribe_inbox(self, pull: PullInbox) -> Any:
        """asyncio side: ``pull``'s subscription, live on the server on return."""
        return await self._flushed(await self._subscribe_counted(pull.inbox, cb=pull.on_msg))

    async def _subscribe_live(
        self, subject: str, queue: str, cb: Callable[[Msg], Awaitable[None]]
    ) -> Any:
        """asyncio side: subscribe, then flush so the server knows before anyone publishes."""
        return await self._flushed(await self._subscribe_counted(subject, queue=queue, cb=cb))
