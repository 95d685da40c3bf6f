"""What a caller waits on: a PING's PONG, a request's reply.

Plain slotted objects, not attrs classes: one is made per flush and per request, on the hot
path, and the reader fills them in place.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, final

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

    @property
    def woken(self) -> bool:
        """Whether :meth:`wake` was called (its reply, deadline or close came)."""
        return self._woken

    def wake(self) -> None:
        """Wake the waiting caller (again: nothing; before it waits: it will not wait)."""
        if self._woken:
            return
        self._woken = True
        task, self._task = self._task, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    def wait(self) -> Coroutine[Any, Any, object]:
        """Until :meth:`wake`: await what this returns, at once. It is Trio's own wait (or,
        once woken, a checkpoint), with no coroutine frame of this class in between: one frame
        fewer passed through when the reply wakes the caller, on every request. Cancellable: a
        cancelled wait leaves the slot as it was (a later :meth:`wake` then wakes nobody)."""
        # Returned to be awaited by the caller at once (what ASYNC105 asks of a Trio call).
        if self._woken:
            return trio.lowlevel.checkpoint()  # noqa: ASYNC105
        self._task = trio.lowlevel.current_task()
        return trio.lowlevel.wait_task_rescheduled(self._abort)  # noqa: ASYNC105

    def _abort(self, _: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        self._task = None
        return trio.lowlevel.Abort.SUCCEEDED
