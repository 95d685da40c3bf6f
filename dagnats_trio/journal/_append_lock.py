"""The lock a claim's appends take in turn (:class:`~._fencing.FencedWriter`), first come first
served, at no call when it is free.

``trio.Lock`` remembers its owner task and registers it with the parking lot's breaker on every
acquire (so waiters learn of an owner that exits holding it), about a dozen calls per append
taken and given back. The writer needs none of that: it releases in a ``finally`` right after
its own publish, in the task that acquired. What it keeps: a cancelled writer takes nothing
(the cancellation check), and waiters are served in the order they came (a release hands the
lock to the oldest waiter; it is never free while one waits). Taking and giving back are
protected from KeyboardInterrupt, as ``trio.Lock``'s are (Trio marks the code objects: no call
is added), so a Ctrl-C cannot leave the lock held between a test and a set.
"""

from __future__ import annotations

from typing import final

import trio


@final
class AppendLock:
    """Held by one append at a time; waiters queue in order."""

    def __init__(self) -> None:
        self._held = False
        self._lot = trio.lowlevel.ParkingLot()

    @property
    def held(self) -> bool:
        return self._held

    @trio.lowlevel.enable_ki_protection
    async def acquire(self) -> None:
        """Take the lock: at once when it is free (the cancellation check only, no scheduler
        pass: the append that follows waits on the server anyway), else when handed over."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self._held:
            self._held = True
            return
        # Cancelled while parked, the task leaves the lot at once (the lot's abort) and was
        # never handed the lock. Handed over (``release`` unparked it), it holds the lock: a
        # task rescheduled by the lot can no longer be cancelled out of its wait.
        await self._lot.park()

    @trio.lowlevel.enable_ki_protection
    def release(self) -> None:
        """Give the lock back: to the oldest task still parked (it stays held), else free.
        Who is parked is asked of the lot itself, never counted apart: a waiter cancelled
        after parking has already left it, even before it runs again."""
        if not self._held:
            raise RuntimeError("release of an append lock that is not held")
        if self._lot:
            self._lot.unpark()
        else:
            self._held = False
