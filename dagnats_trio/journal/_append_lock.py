"""The lock a claim's appends take in turn (:class:`~._fencing.FencedWriter`), first come first
served, at no call when it is free.

``trio.Lock`` remembers its owner task and registers it with the parking lot's breaker on every
acquire (so waiters learn of an owner that exits holding it), about a dozen calls per append
taken and given back. The writer needs none of that: it releases in a ``finally`` right after
its own publish, in the task that acquired. What it keeps: a cancelled writer takes nothing
(the cancellation check), and waiters are served in the order they came (a release hands the
lock to the oldest waiter; it is never free while one waits).
"""

from __future__ import annotations

from typing import final

import trio


@final
class AppendLock:
    """Held by one append at a time; waiters queue in order."""

    def __init__(self) -> None:
        self._held = False
        self._waiting = 0
        self._lot = trio.lowlevel.ParkingLot()

    @property
    def held(self) -> bool:
        return self._held

    async def acquire(self) -> None:
        """Take the lock: at once when it is free (the cancellation check only, no scheduler
        pass: the append that follows waits on the server anyway), else when handed over."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self._held:
            self._held = True
            return
        self._waiting += 1
        try:
            await self._lot.park()
        except BaseException:
            # Cancelled while parked: never handed the lock (a handed-over task is rescheduled
            # and cannot be cancelled out of its wait any more), so it just leaves the queue.
            self._waiting -= 1
            raise
        # Handed over by release(): held for this task, ``_waiting`` already counted down.

    def release(self) -> None:
        """Give the lock back: to the oldest waiter (it stays held), else free."""
        if not self._held:
            raise RuntimeError("release of an append lock that is not held")
        if self._waiting:
            self._waiting -= 1
            self._lot.unpark()
            return
        self._held = False
