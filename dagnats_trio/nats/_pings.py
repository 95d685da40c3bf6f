"""PINGs in flight: the flush waiters answered by PONGs in order, and the keep-alive count that
finds a stale connection.

The server answers PINGs in the order they reach it, so the waiters form one queue. A PING
still in the outbox when a socket is lost goes to the next server (its waiter stays); one
already written went down with the socket (its waiter is woken unanswered).
"""

from __future__ import annotations

from collections import deque
from typing import final

from ._shell_errors import ConnectionLostError
from ._waiters import PongWaiter


@final
class Pings:
    """Flush waiters in PING order, and keep-alive PINGs not yet answered."""

    def __init__(self, max_outstanding: int) -> None:
        self._waiters: deque[PongWaiter] = deque()
        self._max_outstanding = max_outstanding
        self._outstanding = 0

    def __len__(self) -> int:
        return len(self._waiters)

    def sent(self, waiter: PongWaiter) -> None:
        """A PING was queued for ``waiter``."""
        self._waiters.append(waiter)

    def keepalive(self) -> PongWaiter:
        """The waiter of the next keep-alive PING; :class:`ConnectionLostError` when
        ``max_outstanding`` of them went unanswered (the connection is stale)."""
        if self._outstanding >= self._max_outstanding:
            raise ConnectionLostError(f"stale connection: {self._outstanding} PINGs without a PONG")
        self._outstanding += 1
        return PongWaiter()

    def pong(self) -> None:
        """A PONG: the server is alive, and the oldest PING is answered."""
        self._outstanding = 0
        if self._waiters:
            waiter = self._waiters.popleft()
            waiter.answered = True
            waiter.done.set()

    def new_socket(self) -> None:
        """A fresh socket: no keep-alive PING outstanding on it."""
        self._outstanding = 0

    def socket_lost(self, still_queued: int) -> None:
        """The socket is gone: every PING but the ``still_queued`` newest (not yet written) is
        lost, and its waiter woken unanswered."""
        while len(self._waiters) > still_queued:
            self._waiters.popleft().done.set()

    def close(self) -> None:
        """The connection closed: every waiter woken unanswered."""
        self.socket_lost(0)
