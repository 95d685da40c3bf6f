"""One shared watch of the runs bucket that every waiting run handle is woken by.

Why: waiting through :meth:`Service.wait_for_run` opens a JetStream consumer per wait, and 50
waits at once cost more than the runs themselves. Here one ``kv_watch`` over all run snapshots
wakes the handles whose run may have ended (a save whose bytes can hold a finished status, told
by ``protocol.may_be_finished`` without decoding it, or a removal), not on every save of a run in
flight. A finished snapshot seen by the watch is decoded once and handed to its run's waiters,
which return it without reading it again: a wait reads its run once, when it starts (to know the
run exists, or has already finished). A waiter also re-reads on a bounded interval, and when it
was woken without a finished snapshot (a removal, a snapshot that does not decode, the watch
opened again), so a watch entry lost in an outage delays a result by at most that interval
instead of losing it.
"""

from __future__ import annotations

import logging
from typing import final

import trio

from ..api import Service
from ..api.service import RUN_KEY_PREFIX, RunWaitTimeout
from ..engine import RunSnapshot, decode_snapshot
from ..protocol import DecodeError, check_id, layout, may_be_finished
from ..transport import Transport, TransportError

#: Longest a waiter goes without re-reading its run (the safety net under the shared watch).
RESYNC_INTERVAL_S = 5.0
#: Pause before the shared watch is opened again after it failed.
WATCH_RETRY_INTERVAL_S = 1.0

log = logging.getLogger(__name__)

__all__ = ["RESYNC_INTERVAL_S", "RunWatch"]


@final
class _Waiter:
    """One wait for a run: set when the watch saw its run change in a way that may end it, with
    the finished snapshot it saw (``None``: re-read the run)."""

    __slots__ = ("event", "snapshot")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.snapshot: RunSnapshot | None = None


@final
class RunWatch:
    """``await nursery.start(watch.run)``, then ``await watch.wait(run_id, timeout_s)``."""

    def __init__(self, transport: Transport, service: Service) -> None:
        self._transport = transport
        self._service = service
        self._waiters: dict[str, set[_Waiter]] = {}
        #: Watches opened so far (1 in a healthy process, however many waits there were).
        self.watches_opened = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started = False
        while True:
            try:
                async with self._transport.kv_watch(layout.RUNS_BUCKET, RUN_KEY_PREFIX) as changes:
                    self.watches_opened += 1
                    if not started:
                        started = True
                        task_status.started()
                    self._wake_all()  # anything may have changed while no watch was open
                    async for entry in changes:
                        # Only a save that may be a finished run's (or a removal) can end a
                        # wait: the others (every save of a run in flight) wake nobody, so a
                        # waiter reads its snapshot once when its run ends, not once per save.
                        if entry.value is None or may_be_finished(entry.value):
                            self._wake(entry.key[len(RUN_KEY_PREFIX) :], entry.value)
            except TransportError as exc:
                if not started:
                    raise
                log.warning("the shared run watch failed (%s); opening it again", exc)
            await trio.sleep(WATCH_RETRY_INTERVAL_S)

    def _wake(self, run_id: str, value: bytes | None = None) -> None:
        waiters = self._waiters.pop(run_id, None)
        if not waiters:
            return
        # Decoded once for all of the run's waiters, and only when someone waits: what
        # ``Service.get_run`` would return for this revision.
        snapshot: RunSnapshot | None = None
        if value is not None:
            try:
                snapshot = decode_snapshot(value)
            except DecodeError:
                snapshot = None
            if snapshot is not None and not snapshot.status.finished:
                snapshot = None
        for waiter in waiters:
            waiter.snapshot = snapshot
            waiter.event.set()

    def _wake_all(self) -> None:
        for run_id in list(self._waiters):
            self._wake(run_id)

    async def wait(self, run_id: str, timeout_s: float) -> RunSnapshot:
        """The run's snapshot once it has finished; :class:`RunWaitTimeout` after ``timeout_s``,
        :class:`RunNotFound` for an unknown run."""
        check_id("run_id", run_id)
        with trio.move_on_after(timeout_s):
            while True:
                # Register before reading: a change between the read and the wait wakes us.
                waiter = _Waiter()
                self._waiters.setdefault(run_id, set()).add(waiter)
                try:
                    snap = await self._service.get_run(run_id)
                    if snap.status.finished:
                        return snap
                    with trio.move_on_after(RESYNC_INTERVAL_S):
                        await waiter.event.wait()
                    if waiter.snapshot is not None:
                        # The finished snapshot the watch saw, with its definition as
                        # ``get_run`` gives it (read once per definition, by reference).
                        return await self._service.with_definition(waiter.snapshot)
                finally:
                    waiting = self._waiters.get(run_id)
                    if waiting is not None:
                        waiting.discard(waiter)
                        if not waiting:
                            del self._waiters[run_id]
        raise RunWaitTimeout(run_id, timeout_s)
