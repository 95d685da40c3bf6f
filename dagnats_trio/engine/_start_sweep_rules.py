"""Is a run's start abandoned? The start sweep's rules, with no I/O (its shell: ``_start_sweep``).

A start writes the run's first snapshot, then publishes its ``workflow.started`` (and, for a start
the service dispatched itself, ``engine.start_dispatched``, the first task with it). A process
killed between the two, without an idempotency key to retry with, left a run listed running that
nothing names to an engine or a worker. The sweep finds such runs among the active markers
(``engine._run_index``: one per run that may be running, written before its snapshot, in start
order) and publishes their ``workflow.started``. What it decides, here:

- :class:`SweepBook`: which markers are due (seen by this sweep at least ``after_s`` ago) and the
  sequence the next pass reads from, so a pass reads only the markers it has not settled, not
  every running run (the first pass of a process reads them all, once).
- :func:`start_state`: what a due marker's snapshot says. No snapshot: an index entry left by a
  start killed before its snapshot (left in place: see ``_start_sweep``). Finished, or a start
  applied (the engine's, or the service's own with an event applied since): nothing to do.
  Otherwise the start is not applied, and only the history can tell whether it was published.
- :func:`start_stored`: whether the run's history holds a ``workflow.started``; only a start
  that holds none is published (:func:`started_event_of` rebuilds it from the snapshot).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import final

from ..protocol import RunEvent, WorkflowStarted
from .core import service_start_entry
from .snapshot import RunSnapshot


class StartState(enum.Enum):
    """What a run's stored snapshot says about its start."""

    #: No snapshot: an index entry and marker of a start killed before it created one.
    NO_SNAPSHOT = "no snapshot"
    #: The run has finished: its start does not matter any more.
    FINISHED = "finished"
    #: A ``workflow.started`` (or, after the service's own dispatch, a later event) was applied.
    APPLIED = "applied"
    #: Created, its start not applied: published or not, only the history can tell.
    UNAPPLIED = "unapplied"


def start_state(snapshot: RunSnapshot | None) -> StartState:
    """Where ``snapshot``'s run stands. A start the service dispatched (``first_dispatch``) is
    ``started`` already; it counts as applied only once an event was applied since (then the
    run moves without its ``workflow.started``: its task was stored and ran)."""
    if snapshot is None:
        return StartState.NO_SNAPSHOT
    if snapshot.status.finished:
        return StartState.FINISHED
    if not snapshot.started or service_start_entry(snapshot) is not None:
        return StartState.UNAPPLIED
    return StartState.APPLIED


def start_stored(events: Iterable[RunEvent]) -> bool:
    """Whether a run's history (``events``, the messages of its subject) holds its start."""
    return any(isinstance(e, WorkflowStarted) for e in events)


def started_event_of(snapshot: RunSnapshot) -> WorkflowStarted:
    """The ``workflow.started`` the run's creator meant to publish, as its first snapshot keeps
    it (``engine.new_run_snapshot``: ``created_at_ms`` is the event's ``started_at_ms``). It
    names no revisions, so the engine reads the stored snapshot (``_store.started_with``)
    instead of deriving one that was not written from this event."""
    return WorkflowStarted(
        run_id=snapshot.run_id,
        workflow=snapshot.workflow,
        input=snapshot.input,
        parent=snapshot.parent,
        idempotency_key=snapshot.idempotency_key,
        started_at_ms=snapshot.created_at_ms,
    )


@final
class SweepBook:
    """The markers one sweep has seen and not settled, and where its next read starts.

    A marker is due once this sweep has seen it for ``after_s`` (by the caller's clock, so no
    two hosts' clocks are compared: the marker was written before it was first seen). Every
    marker below :attr:`cursor` is settled or gone, so a pass reads from there; markers are
    written in start order, so the cursor stops at the oldest one still waiting.
    """

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self._cursor = 1
        self._read_through = 0
        #: Sequence -> when it was first seen; markers at or above the cursor, not settled.
        self._waiting: dict[int, float] = {}
        #: Settled markers above the cursor (one below them is still waiting).
        self._settled: set[int] = set()

    @property
    def cursor(self) -> int:
        """The first sequence the next pass reads (everything below it is settled or gone)."""
        return self._cursor

    @property
    def waiting(self) -> int:
        """Markers seen and not settled yet."""
        return len(self._waiting)

    def observe(self, seqs: Sequence[int], read_through: int, now_s: float) -> list[int]:
        """Take a pass's read: ``seqs``, the markers found from :attr:`cursor` to
        ``read_through`` (the last sequence the read covered); the due ones, oldest first. A
        marker no longer found was removed (its run finished or was unindexed): forgotten."""
        found = set(seqs)
        for gone in [s for s in self._waiting if s <= read_through and s not in found]:
            del self._waiting[gone]
        self._settled = {s for s in self._settled if s in found or s > read_through}
        due: list[int] = []
        for seq in seqs:
            if seq in self._settled:
                continue
            first_seen = self._waiting.setdefault(seq, now_s)
            if now_s - first_seen >= self.after_s:
                due.append(seq)
        self._read_through = max(self._read_through, read_through)
        self._move_cursor()
        return due

    def settle(self, seq: int) -> None:
        """``seq`` needs nothing more from this sweep."""
        self._waiting.pop(seq, None)
        self._settled.add(seq)
        self._move_cursor()

    def _move_cursor(self) -> None:
        floor = min(self._waiting, default=self._read_through + 1)
        self._cursor = max(self._cursor, floor)
        self._settled = {s for s in self._settled if s >= self._cursor}
