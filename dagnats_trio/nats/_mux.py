"""The request mux: every request of a connection replies to one wildcard inbox subscription,
and the reader routes each reply to its waiting caller by the last token of its subject.

One subscription for all requests (as nats-py does) keeps a request to one PUB frame: no SUB and
UNSUB per call. Not thread-safe and not async: the connection's tasks share one Trio thread.
"""

from __future__ import annotations

import itertools
from typing import final

from ._events import Msg
from ._nuid import new_inbox
from ._waiters import ReplySlot


@final
class RequestMux:
    """Tokens, reply subjects and the slots of requests in flight."""

    def __init__(self) -> None:
        self._inbox = new_inbox()
        self._tokens = itertools.count(1)
        self._slots: dict[str, ReplySlot] = {}

    @property
    def subject(self) -> str:
        """The wildcard subject the connection subscribes to for replies."""
        return f"{self._inbox}.*"

    @property
    def pending(self) -> int:
        """Requests waiting for their reply."""
        return len(self._slots)

    def open(self) -> tuple[str, str, ReplySlot]:
        """A new request: its token (for :meth:`forget`), its reply subject and its slot."""
        token = format(next(self._tokens), "x")
        slot = ReplySlot()
        self._slots[token] = slot
        return token, f"{self._inbox}.{token}", slot

    def forget(self, token: str) -> None:
        """The request is over (answered, timed out or cancelled): later replies are dropped."""
        del self._slots[token]

    def deliver(self, msg: Msg) -> None:
        """A reply from the mux subscription; the first for a token wins, strays are dropped."""
        slot = self._slots.get(msg.subject.rpartition(".")[2])
        if slot is not None and slot.msg is None:
            slot.msg = msg
            slot.done.set()

    def wake_all(self) -> None:
        """The connection closed: every waiting request wakes with no reply."""
        for slot in self._slots.values():
            slot.done.set()
