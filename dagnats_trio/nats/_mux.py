"""The request mux: every request of a connection replies to one wildcard inbox subscription,
and the reader routes each reply to its waiting caller by the last token of its subject.

One subscription for all requests (as nats-py does) keeps a request to one PUB frame: no SUB and
UNSUB per call. Request deadlines live here too, in one heap watched by one task
(:meth:`RequestMux.run_deadlines`), instead of a cancel scope per request: entering and leaving
a scope with a deadline was the largest single cost of a request in Python. Not thread-safe: the
connection's tasks share one Trio thread.
"""

from __future__ import annotations

import heapq
import math
from typing import final

import trio

from ._events import Msg
from ._nuid import new_inbox
from ._waiters import ReplySlot

#: Stale heap entries (answered requests) tolerated beyond twice the live ones before the heap
#: is rebuilt; rebuilding costs one pass, so this keeps it rare and the heap small.
_HEAP_SLACK_ENTRIES = 64


@final
class RequestMux:
    """Tokens, reply subjects, deadlines and the slots of requests in flight."""

    def __init__(self) -> None:
        self._inbox = new_inbox()
        self._opened = 0
        self._slots: dict[str, ReplySlot] = {}
        self._deadlines: list[tuple[float, str]] = []
        # The deadline watcher's alarm: a scope whose deadline is the earliest pending one. A
        # scope not yet entered (before the watcher starts) keeps a deadline set on it.
        self._alarm = trio.CancelScope()
        # Its deadline as a plain attribute (read on every request; the scope's is a property).
        self._alarm_deadline = math.inf
        #: Requests waiting for their reply (kept as an attribute: read on every frame queued).
        self.pending = 0
        # Alarms set (see :meth:`alarm`): slots in the heap that are not requests.
        self._alarms = 0

    @property
    def subject(self) -> str:
        """The wildcard subject the connection subscribes to for replies."""
        return f"{self._inbox}.*"

    def open(self, deadline: float) -> tuple[str, str, ReplySlot]:
        """A new request, timed out at ``deadline`` (Trio clock): its token (for
        :meth:`forget`), its reply subject and its slot. At the deadline the slot is woken with
        no reply."""
        self._opened += 1
        token = f"{self._opened:x}"
        slot = ReplySlot()
        self._slots[token] = slot
        self.pending += 1
        heapq.heappush(self._deadlines, (deadline, token))
        if deadline < self._alarm_deadline:
            self._alarm.deadline = self._alarm_deadline = deadline
        return token, f"{self._inbox}.{token}", slot

    def forget(self, token: str) -> None:
        """The request is over unanswered (timed out, cancelled, or the connection closed):
        a later reply is dropped. An answered request needs none: :meth:`deliver` took its
        slot out (so a caller calls this only while its slot has no ``msg``; calling it
        after does nothing)."""
        if self._slots.pop(token, None) is not None:
            self.pending -= 1
            if len(self._deadlines) > 2 * (self.pending + self._alarms) + _HEAP_SLACK_ENTRIES:
                self._prune()  # tested here: no call per request while the heap is small

    def alarm(self, deadline: float) -> tuple[str, ReplySlot]:
        """A slot woken at ``deadline`` (Trio clock) unless woken before, kept in the same heap
        and watched by the same task as the requests' deadlines: a bounded wait without a
        cancel scope. Not a request (not counted in :attr:`pending`), and its token holds a
        space, which no subject token does, so no reply can reach it. :meth:`disarm` it."""
        self._opened += 1
        token = f"alarm {self._opened:x}"
        slot = ReplySlot()
        self._slots[token] = slot
        self._alarms += 1
        heapq.heappush(self._deadlines, (deadline, token))
        if deadline < self._alarm_deadline:
            self._alarm.deadline = self._alarm_deadline = deadline
        return token, slot

    def disarm(self, token: str) -> None:
        """The alarm is over (rung, or its wait ended otherwise)."""
        del self._slots[token]
        self._alarms -= 1
        if len(self._deadlines) > 2 * (self.pending + self._alarms) + _HEAP_SLACK_ENTRIES:
            self._prune()

    def _prune(self) -> None:
        """Drop the stale entries (called once they pass the slack the callers test)."""
        self._deadlines = [entry for entry in self._deadlines if entry[1] in self._slots]
        heapq.heapify(self._deadlines)

    def deliver(self, msg: Msg) -> None:
        """A reply from the mux subscription: the first for a token wins (its slot is taken
        out here, so the answered caller has nothing to :meth:`forget`: one call fewer per
        request), strays and later replies are dropped. An alarm's token holds a space, which
        no subject token does: no reply takes an alarm's slot."""
        slot = self._slots.pop(msg.subject.rpartition(".")[2], None)
        if slot is not None:
            self.pending -= 1
            slot.msg = msg
            slot.wake()
            if len(self._deadlines) > 2 * (self.pending + self._alarms) + _HEAP_SLACK_ENTRIES:
                self._prune()

    def wake_all(self) -> None:
        """The connection closed: every waiting request wakes with no reply (and every alarm
        rings)."""
        for slot in self._slots.values():
            slot.wake()

    async def run_deadlines(self) -> None:
        """The deadline watcher (one task for the connection's life): sleep until the earliest
        deadline, wake the requests whose deadline passed, repeat."""
        while True:
            earliest = self._earliest()
            with trio.CancelScope(deadline=earliest) as alarm:
                self._alarm = alarm
                self._alarm_deadline = earliest
                await trio.sleep_forever()
            now = trio.current_time()
            while self._deadlines and self._deadlines[0][0] <= now:
                _, token = heapq.heappop(self._deadlines)
                slot = self._slots.get(token)
                if slot is not None:
                    slot.wake()

    def _earliest(self) -> float:
        while self._deadlines and self._deadlines[0][1] not in self._slots:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else math.inf
