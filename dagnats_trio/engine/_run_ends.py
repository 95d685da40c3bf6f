"""The engine's run ends, off its history loop: a finished run's removals (``_run_end``) are
handed to one task of their own, so the loop acks the event and handles the next one at once.

Why: the removals are two purges (three with timers), one round trip of the server (fsynced
under ``sync_interval: always``) that no client waits for; awaited in the history loop they
held every other run's next event back by that round trip, and in a process that also serves
clients (``dagnats dev``, the bench) their CPU ran right after the finished save, before the
save's delivery to the clients watching the run (the compare-and-set's answer comes first).
Handed off, the loop's step after the save is the hand-off, and the removals run in a later
scheduler pass.

What does not change: the removals are sent after the finished snapshot is saved, and a
finished run's last event is counted applied (``EngineStats.applied``) only once its removals
are done, so whoever waits for the engine's counts (a test, the bench's ``wait_settled``) still
sees no removal trailing a counted event. A full queue (more than
:data:`RUN_ENDS_QUEUED_MAX` run ends waiting) makes the run end in the loop, as before: the
loop slows to the removals' pace instead of holding an unbounded backlog. On shutdown (the
engine cancelled) what is queued, and the run end under way, is still removed, shielded, within
:data:`RUN_ENDS_DRAIN_S`; a crash loses them, as it lost a run end under way before: a stale
marker or leftover messages, which the next listing and the run's purge remove (``_run_end``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final, final

import attrs
import trio

from ..transport import Transport
from ._run_end import end_run

_log = logging.getLogger("dagnats_trio.engine.run_end")

#: Run ends waiting for the run-end task before the history loop makes them itself.
RUN_ENDS_QUEUED_MAX: Final = 1024
#: How long a cancelled engine goes on removing the run ends it was handed (shielded).
RUN_ENDS_DRAIN_S: Final = 2.0


@final
@attrs.frozen
class RunEnd:
    """One finished run whose removals are due; ``done`` is told once they are made."""

    run_id: str
    timers_armed: bool
    done: Callable[[], None]


@final
class RunEnds:
    """The queue of run ends and the task that makes them: ``nursery.start_soon(ends.run)``.

    :meth:`hand_off` queues a run end without a scheduler step; it returns False (the caller
    makes the run end itself) while no task runs or when the queue is full."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._send, self._receive = trio.open_memory_channel[RunEnd](RUN_ENDS_QUEUED_MAX)
        self._running = False

    def hand_off(self, end: RunEnd) -> bool:
        """Queue ``end`` for the run-end task; False when the caller must make it now."""
        if not self._running:
            return False
        try:
            self._send.send_nowait(end)
        except trio.WouldBlock:
            return False
        return True

    async def run(self) -> None:
        """Make each run end handed off, in order, until cancelled; then the rest, bounded."""
        self._running = True
        current: RunEnd | None = None
        try:
            async for end in self._receive:
                current = end
                await _make(self._transport, end)
                current = None
        finally:
            self._running = False
            with trio.CancelScope(shield=True, deadline=trio.current_time() + RUN_ENDS_DRAIN_S):
                if current is not None:  # cut short: its removals may not all have been sent
                    await _make(self._transport, current)
                while True:
                    try:
                        end = self._receive.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    await _make(self._transport, end)


async def _make(transport: Transport, end: RunEnd) -> None:
    """Make one run end and tell its ``done``. ``end_run`` logs a removal the server refused;
    anything else it raises is logged here too, so one run's end cannot stop the task (in the
    history loop it was the event's failure, naked and handled again: a run end left undone is
    never wrong, see ``_run_end``)."""
    try:
        await end_run(transport, end.run_id, timers_armed=end.timers_armed)
    except Exception:
        _log.exception("run %s: its end's removals failed; left to the next listing", end.run_id)
    end.done()
