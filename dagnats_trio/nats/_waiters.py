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
    """One request in flight. ``done`` is set when its reply is in ``msg``, or (``msg`` still
    ``None``) when the connection closed."""

    __slots__ = ("done", "msg")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.msg: Msg | None = None
