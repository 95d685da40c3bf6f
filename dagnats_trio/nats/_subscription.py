"""One subscription: messages arrive in a bounded memory channel the reader never waits on, or
go to a handler of the subscriber's in the reader's own frame."""

from __future__ import annotations

from collections.abc import Callable
from typing import final

import trio

from ._events import Msg
from ._waiters import ReplySlot

#: Messages a subscription buffers before the reader drops new ones (a slow consumer).
SUBSCRIPTION_BUFFER_MSGS = 4096


@final
class Subscription:
    """Messages on ``subject`` (and ``queue``, if set). Iterate it, or ``await next_msg()``.

    The reader delivers with ``send_nowait``: a consumer that falls ``max_buffered_msgs`` behind
    loses the newest messages (counted in :attr:`dropped`) instead of stalling every other
    subscription. Iteration ends when the subscription or the connection closes.

    With ``on_msg``, nothing is buffered: the reader hands each message to ``on_msg`` as it
    parses it, in its own frame, so a message that only starts work (a task started in a
    nursery, a count) wakes no consumer task for it. ``on_msg`` must not block or wait (it is
    not async: every other subscription's messages wait behind it); an exception it raises is
    the reader's and ends the connection, as a crash of any task of it would. Its consumer
    waits with :meth:`Connection.next_msg_before`, which it wakes with :meth:`wake`.
    """

    def __init__(
        self,
        *,
        subject: str,
        sid: str,
        queue: str | None,
        max_buffered_msgs: int,
        on_close: Callable[[Subscription], None],
        on_msg: Callable[[Msg], None] | None = None,
    ) -> None:
        if max_buffered_msgs < 1:
            raise ValueError(f"max_buffered_msgs must be at least 1, got {max_buffered_msgs}")
        self.subject = subject
        self.sid = sid
        self.queue = queue
        self._send, self._receive = trio.open_memory_channel[Msg](max_buffered_msgs)
        self._on_close = on_close
        #: The handler each message goes to instead of the buffer (read only).
        self.on_msg = on_msg
        self._dropped = 0
        self._delivered = 0
        #: Messages waiting in the buffer: :meth:`next_msg_nowait` returns one while this is
        #: positive (a check without the ``WouldBlock`` raised and caught when it is zero). A
        #: plain attribute, kept by the calls that put and take (read by every fetch's loop,
        #: where a property was a call each time); read it, never set it.
        self.buffered = 0
        #: Whether the subscription is closed (no more messages will arrive); read only.
        self.closed = False
        # Slots of callers waiting with a deadline (Connection.next_msg_before): woken by the
        # next delivery and by the close.
        self._waiters: list[ReplySlot] = []

    @property
    def dropped(self) -> int:
        """Messages lost because the buffer was full."""
        return self._dropped

    @property
    def delivered(self) -> int:
        """Messages put in the buffer."""
        return self._delivered

    async def next_msg(self) -> Msg:
        """The next message; ``trio.EndOfChannel`` once closed and emptied. Cancel-safe: a
        cancelled wait takes no message."""
        msg = await self._receive.receive()
        self.buffered -= 1
        return msg

    def next_msg_nowait(self) -> Msg:
        """A buffered message, or ``trio.WouldBlock`` (``trio.EndOfChannel`` once closed)."""
        msg = self._receive.receive_nowait()
        self.buffered -= 1
        return msg

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Msg:
        try:
            msg = await self._receive.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None
        self.buffered -= 1
        return msg

    def wake(self) -> None:
        """Wake the callers waiting in :meth:`Connection.next_msg_before` on this subscription:
        with nothing buffered they return None. How an ``on_msg`` handler tells its consumer
        that something it waits for happened (a buffered message wakes them by itself)."""
        if self._waiters:
            self._wake_waiters()

    def unsubscribe(self) -> None:
        """Stop delivery now (UNSUB is queued); buffered messages stay readable."""
        if not self.closed:
            self._on_close(self)

    # --- called by the connection ------------------------------------------------------------

    def _deliver(self, msg: Msg) -> None:
        on_msg = self.on_msg
        if on_msg is not None:
            # Only a live subscription is dispatched to (closing removes it first).
            self._delivered += 1
            on_msg(msg)
            return
        try:
            self._send.send_nowait(msg)
        except trio.WouldBlock:
            self._dropped += 1
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass
        else:
            self._delivered += 1
            self.buffered += 1
            if self._waiters:
                self._wake_waiters()

    def _close(self) -> None:
        self.closed = True
        self._send.close()
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        for slot in self._waiters:
            slot.wake()
