"""What a caller waits on: a PING's PONG, a request's reply.

Plain slotted objects, not attrs classes: one is made per flush and per request, on the hot
path, and the reader fills them in place.
"""

from __future__ import annotations

from typing import final

import trio

from ._events import Msg


@final
class PongWaiter:
    """One PING in flight. ``done`` is set when its PONG comes (``answered``) or when it never
    will (the socket it went out on was lost, or the connection closed)."""

    __slots__ = ("answered", "done")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.answered = False


@final
class ReplySlot:
    """One request in flight. Woken once: with its reply in ``msg``, or (``msg`` still
    ``None``) at its deadline or when the connection closes.

    On Trio's low-level parking (``wait_task_rescheduled``/``reschedule``) rather than a
    ``trio.Event``: one of these is made, waited on and woken per request, on the hot path.
    """

    __slots__ = ("_task", "_woken", "msg")

    def __init__(self) -> None:
        self.msg: Msg | None = None
        self._task: trio.lowlevel.Task | None = None
        self._woken = False

    def wake(self) -> None:
        """Wake the waiting caller (again: nothing; before it waits: it will not wait)."""
        if self._woken:
            return
        self._woken = True
        task, self._task = self._task, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    async def wait(self) -> None:
        """Until :meth:`wake`; a checkpoint either way. Cancellable: a cancelled wait leaves
        the slot as it was (a later :meth:`wake` then wakes nobody)."""
        if self._woken:
            await trio.lowlevel.checkpoint()
            return
        self._task = trio.lowlevel.current_task()

        def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
            self._task = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
