"""The start sweep: the engine publishes the ``workflow.started`` of a run whose start died.

A start creates the run's first snapshot and then publishes its ``workflow.started`` (the
service's ``api._start``; for a start it dispatched itself, the first task with it,
``engine.start_dispatched``; the engine's own for a child run). Killed between the two, a start
with an idempotency key is completed by a retry with the key; one without a key left a run that
lists as running and that nothing names to an engine or a worker. The engine runs this sweep
beside its loops (``Engine.run``): every :data:`START_SWEEP_EVERY_S` it reads the active markers
it has not settled (``_start_sweep_rules.SweepBook``: the first pass of a process reads every
marker once, later passes only the new ones and those still waiting), and for each marker it has
seen for :data:`START_SWEEP_AFTER_S` it reads the run's snapshot (one batch get for all of them)
and, for a run created but not started (``start_state``), the run's history on the stream
leader. A run whose history holds no ``workflow.started`` gets it, built by the one function
that builds it (``_store.started_publish_msg``, msg id ``started_msg_id``); the engine then
starts the run, or, for a start the service dispatched, repeats the task saved in the outbox.

Why publishing cannot start a run twice:

- A start already stored is never published again: the history is read first (on the leader,
  which has every acknowledged message), and only a run whose history holds none is published.
- A start that a slow but living creator publishes after the sweep did carries the same msg id
  (``started_msg_id``), and the history stream keeps msg ids for its duplicate window
  (``transport.STREAMS``, 120 s), so it stores nothing when it comes within the window of the
  sweep's: a creator publishes right after its snapshot is created (its next request, bounded
  by the request timeout), and the sweep publishes no earlier than :data:`START_SWEEP_AFTER_S`
  after the marker was written (it was written before the sweep first saw it), so only a
  creator stopped (SIGSTOP, a frozen VM) for longer than the bound and the window together
  could store a second start; the engine drops that one (the run is started), as it drops any
  redelivered start.
- The bound is short against the windows so that what the engine repeats is still a duplicate:
  for a start the service dispatched whose task was stored (and not its event), the engine
  repeats the task under the creator's msg id when it applies the sweep's start. The bound is a
  quarter of the shorter of the history's and the task stream's windows, which leaves three
  quarters of the window (90 s) for the pass interval and the engine's lag in applying it.
  A bound much shorter would publish the starts of living creators still at work, needlessly.
- Two engines sweeping at once publish the same message with the same msg id: stored once.

An index entry and marker left by a start killed before its snapshot (``NO_SNAPSHOT``) are left
in place, as listings leave them (docs/listing.md): a retry with the start's idempotency key
creates the run where its entry is, and a start still under way (stalled) that has its index
written creates the snapshot without writing the index again (``_store.index_start``), so a
removed entry could hide a run from every listing, which the index promises never to do. Such an
entry costs each ``?status=running`` listing one snapshot read; the sweep counts it
(:attr:`SweepStats.no_snapshot`) and examines it once per process.
"""

from __future__ import annotations

import logging
from typing import Final, final

import attrs
import trio

from ..protocol import (
    DecodeError,
    RunEvent,
    RunIndexEntry,
    decode_event,
    decode_run_index_entry,
    layout,
)
from ..transport import MAX_GET_BATCH_MSGS, STREAMS, StoredMsg, Transport, TransportError
from ._start_sweep_rules import (
    StartState,
    SweepBook,
    start_state,
    start_stored,
    started_event_of,
)
from ._store import started_publish_msg
from .snapshot import RunSnapshot, decode_snapshot

log = logging.getLogger("dagnats_trio.engine.start_sweep")


def _duplicate_window_s(stream: str) -> float:
    return next(s.duplicate_window_s for s in STREAMS if s.name == stream)


#: How long the sweep waits, from when it first sees a run's marker, before it publishes the
#: run's ``workflow.started``: a quarter of the shorter duplicate window of the two streams a
#: run's start writes to (history for the event, tasks for the task the engine then repeats),
#: so what the sweep's start makes the engine repeat is still deduplicated (module docstring).
START_SWEEP_AFTER_S: Final = (
    min(_duplicate_window_s(layout.HISTORY_STREAM), _duplicate_window_s(layout.TASK_STREAM)) / 4
)
#: Pause between two passes of the sweep.
START_SWEEP_EVERY_S: Final = 5.0
#: Markers one pass reads at most (more waiting than this: the rest wait for later passes).
START_SWEEP_MARKERS_MAX: Final = 100_000
#: Messages of a run's history read per request while looking for its start.
START_SWEEP_HISTORY_PAGE_MSGS: Final = 16

#: The active stream's sentinel, not a marker (``transport.provision``).
_ACTIVE_SENTINEL: Final = layout.sentinel_subject(layout.RUN_ACTIVE_STREAM)


@final
@attrs.define
class SweepStats:
    """What this sweep has done (this process only)."""

    passes: int = 0
    #: Markers examined once due (whatever was found).
    examined: int = 0
    #: Runs whose ``workflow.started`` the sweep published.
    published: int = 0
    #: Runs created but not started whose ``workflow.started`` was found stored.
    stored: int = 0
    #: Markers (and index entries) of runs with no snapshot, left in place.
    no_snapshot: int = 0


@final
@attrs.frozen
class SweepReport:
    """The runs one pass examined, by what it found."""

    published: tuple[str, ...] = ()
    stored: tuple[str, ...] = ()
    no_snapshot: tuple[str, ...] = ()
    #: Finished, started, or unreadable: nothing to do.
    settled: tuple[str, ...] = ()


@final
class StartSweep:
    """Run with ``nursery.start_soon(sweep.run)`` (the engine does); one pass:
    :meth:`sweep_once`. ``after_s`` and ``every_s`` are for tests; see the module docstring."""

    def __init__(
        self,
        transport: Transport,
        *,
        after_s: float = START_SWEEP_AFTER_S,
        every_s: float = START_SWEEP_EVERY_S,
    ) -> None:
        self._transport = transport
        self._book = SweepBook(after_s)
        self.every_s = every_s
        self.stats = SweepStats()
        self._lock = trio.Lock()

    async def run(self) -> None:
        """A pass every ``every_s`` until cancelled; a failed pass is retried at the next."""
        while True:
            try:
                await self.sweep_once()
            except TransportError as exc:
                log.warning("start sweep: pass failed (%s); retried in %.1f s", exc, self.every_s)
            await trio.sleep(self.every_s)

    async def sweep_once(self) -> SweepReport:
        """Read the markers not settled, examine the due ones; what was found."""
        async with self._lock:
            markers, read_through = await self._read_markers()
            due = self._book.observe(sorted(markers), read_through, trio.current_time())
            report = await self._examine([(seq, markers[seq]) for seq in due])
            self.stats.passes += 1
            return report

    async def _read_markers(self) -> tuple[dict[int, RunIndexEntry], int]:
        """The markers from the book's cursor on (one batch direct get per 10,000), and the
        last sequence read. An unreadable marker is settled at once (logged)."""
        found: dict[int, RunIndexEntry] = {}
        seq = self._book.cursor
        read_through = seq - 1
        while len(found) < START_SWEEP_MARKERS_MAX:
            msgs = await self._transport.get_batch(
                layout.RUN_ACTIVE_STREAM, seq, MAX_GET_BATCH_MSGS
            )
            for msg in msgs:
                read_through = msg.seq
                if msg.subject == _ACTIVE_SENTINEL:
                    continue
                entry = _entry(msg)
                if entry is None:
                    self._book.settle(msg.seq)
                else:
                    found[msg.seq] = entry
            if len(msgs) < MAX_GET_BATCH_MSGS:
                break
            seq = msgs[-1].seq + 1
        return found, read_through

    async def _examine(self, due: list[tuple[int, RunIndexEntry]]) -> SweepReport:
        if not due:
            return SweepReport()
        snaps, unreadable = await self._snapshots([e.run_id for _, e in due])
        found: dict[str, list[str]] = {
            "published": [],
            "stored": [],
            "no_snapshot": [],
            "settled": [],
        }
        for seq, entry in due:
            run_id = entry.run_id
            try:
                if run_id in unreadable:
                    raise DecodeError("its snapshot does not decode")
                snap = snaps[run_id] if run_id in snaps else await self._leader_snapshot(run_id)
                state = start_state(snap)
                if snap is not None and state is StartState.UNAPPLIED:
                    if await self._start_stored(run_id):
                        self.stats.stored += 1
                        what = "stored"
                    else:
                        await self._publish_start(snap)
                        what = "published"
                elif state is StartState.NO_SNAPSHOT:
                    self.stats.no_snapshot += 1
                    log.info("start sweep: run %s is indexed, has no snapshot; left so", run_id)
                    what = "no_snapshot"
                else:
                    what = "settled"
            except TransportError as exc:
                log.warning("start sweep: run %s not examined (%s); next pass", run_id, exc)
                continue
            except DecodeError as exc:
                # The engine terminates the run's events for the same reason: nothing to start.
                log.warning("start sweep: run %s unreadable (%s); left alone", run_id, exc)
                what = "settled"
            found[what].append(run_id)
            self.stats.examined += 1
            self._book.settle(seq)
        return SweepReport(**{k: tuple(v) for k, v in found.items()})

    async def _snapshots(self, run_ids: list[str]) -> tuple[dict[str, RunSnapshot], set[str]]:
        """The snapshots of ``run_ids`` that exist, and the runs whose snapshot does not decode:
        a batch get, answered by any replica. One that lags can only show an older state: a
        start not applied yet (then the history, read on the leader, decides) or no snapshot
        (then :meth:`_leader_snapshot`)."""
        entries = await self._transport.kv_get_many(
            layout.RUNS_BUCKET, [layout.run_key(r) for r in run_ids]
        )
        found: dict[str, RunSnapshot] = {}
        unreadable: set[str] = set()
        for run_id in run_ids:
            entry = entries.get(layout.run_key(run_id))
            if entry is None or entry.value is None:
                continue
            try:
                found[run_id] = decode_snapshot(entry.value)
            except DecodeError:
                unreadable.add(run_id)
        return found, unreadable

    async def _leader_snapshot(self, run_id: str) -> RunSnapshot | None:
        """The run's snapshot read on the leader: a missing one is confirmed there before the
        entry is taken for one a dead start left."""
        entry = await self._transport.kv_get(layout.RUNS_BUCKET, layout.run_key(run_id))
        if entry is None or entry.value is None:
            return None
        return decode_snapshot(entry.value)

    async def _start_stored(self, run_id: str) -> bool:
        """Whether the run's history holds its ``workflow.started``, read on the stream leader
        (``read_subject``) a page at a time from its first message."""
        subject = layout.history_subject(run_id)
        seq = 1
        while True:
            msgs = await self._transport.read_subject(
                layout.HISTORY_STREAM, subject, seq, START_SWEEP_HISTORY_PAGE_MSGS
            )
            if start_stored(_events(msgs)):
                return True
            if len(msgs) < START_SWEEP_HISTORY_PAGE_MSGS:
                return False
            seq = msgs[-1].seq + 1

    async def _publish_start(self, snap: RunSnapshot) -> None:
        msg = started_publish_msg(started_event_of(snap))
        await self._transport.publish(msg.subject, msg.data, msg_id=msg.msg_id)
        self.stats.published += 1
        log.warning(
            "start sweep: run %s was created but its workflow.started never stored (its "
            "starter died); published it",
            snap.run_id,
        )


def _entry(msg: StoredMsg) -> RunIndexEntry | None:
    try:
        return decode_run_index_entry(msg.data)
    except DecodeError:
        log.warning("start sweep: %s#%d is no active marker; skipped", msg.subject, msg.seq)
        return None


def _events(msgs: list[StoredMsg]) -> list[RunEvent]:
    events: list[RunEvent] = []
    for msg in msgs:
        try:
            events.append(decode_event(msg.data))
        except DecodeError:
            continue  # terminated by the engine; never a start it could apply
    return events
