"""The start sweep's rules, pure (``engine._start_sweep_rules``): which runs' starts are not
applied, whether a history holds the start, the event rebuilt from the first snapshot exactly
as its creator built it, and the book that makes a pass read only what it has not settled."""

from __future__ import annotations

import itertools
from typing import Any

import attrs

from dagnats_trio.dag import WorkflowDef
from dagnats_trio.engine import AdvanceContext, RunSnapshot, decide, first_dispatch
from dagnats_trio.engine._start_sweep_rules import (
    StartState,
    SweepBook,
    start_state,
    start_stored,
    started_event_of,
)
from dagnats_trio.engine._store import first_snapshot
from dagnats_trio.protocol import (
    CancelRequested,
    ParentRef,
    SignalSent,
    StepCompleted,
    WorkflowStarted,
)

STARTED_AT_MS = 7_000
AFTER_S = 30.0
#: History sequences the engine is given events at.
STARTED_SEQ = 3
COMPLETED_SEQ = 4

DEF = WorkflowDef.from_json(
    {"name": "wf", "steps": [{"id": "a", "task": "ta"}, {"id": "b", "task": "tb"}]}
)


def _event(**kw: Any) -> WorkflowStarted:
    return WorkflowStarted("r1", "wf", {"x": [1, "é"]}, started_at_ms=STARTED_AT_MS, **kw)


def _ids() -> Any:
    counter = itertools.count()
    return lambda: f"n{next(counter)}"


def _ctx(seq: int) -> AdvanceContext:
    return AdvanceContext(now_ms=STARTED_AT_MS + 5, new_id=_ids(), definition=DEF, seq=seq)


def _dispatched() -> RunSnapshot:
    out = first_dispatch(_event(), DEF, _ids())
    assert out is not None and out.snapshot is not None
    return out.snapshot


def _applied(snap: RunSnapshot, event: Any, seq: int) -> RunSnapshot:
    out = decide(snap, event, _ctx(seq))
    assert out.snapshot is not None and out.snapshot is not snap
    return out.snapshot


# --- start_state -----------------------------------------------------------------------------


def test_a_first_snapshot_not_started_is_unapplied() -> None:
    assert start_state(first_snapshot(_event(), DEF)) is StartState.UNAPPLIED


def test_a_start_the_service_dispatched_is_unapplied_until_an_event_is_applied() -> None:
    dispatched = _dispatched()
    assert dispatched.started
    assert start_state(dispatched) is StartState.UNAPPLIED
    # Its task ran and the completion was applied without any workflow.started: the run moves.
    task = dispatched.steps["a"].dispatch
    done = _applied(dispatched, StepCompleted("r1", "a", task, output=1), COMPLETED_SEQ)
    assert start_state(done) is StartState.APPLIED


def test_a_start_the_engine_applied_is_applied() -> None:
    started = _applied(first_snapshot(_event(), DEF), _event(), STARTED_SEQ)
    assert started.started
    assert start_state(started) is StartState.APPLIED


def test_a_finished_run_and_a_missing_snapshot() -> None:
    cancelled = _applied(first_snapshot(_event(), DEF), CancelRequested("r1", "no"), STARTED_SEQ)
    assert cancelled.status.finished
    assert start_state(cancelled) is StartState.FINISHED
    assert start_state(None) is StartState.NO_SNAPSHOT


# --- start_stored ----------------------------------------------------------------------------


def test_a_history_holds_the_start_only_with_a_workflow_started() -> None:
    assert not start_stored([])
    assert not start_stored([SignalSent("r1", "s", 1), CancelRequested("r1", "x")])
    assert start_stored([SignalSent("r1", "s", 1), _event(snapshot_revision=4)])
    assert start_stored([_event()])


# --- started_event_of ------------------------------------------------------------------------


def test_the_rebuilt_start_is_the_creators_without_revisions() -> None:
    parent = ParentRef("p1", "step")
    for event in (_event(), _event(parent=parent, idempotency_key="k")):
        full = attrs.evolve(event, snapshot_revision=9, definition_revision=2)
        assert started_event_of(first_snapshot(full, DEF)) == event
    # The service's dispatched snapshot keeps what the event said too.
    assert started_event_of(_dispatched()) == _event()


def test_the_rebuilt_start_applies_as_the_original_would() -> None:
    snap = first_snapshot(_event(), DEF)
    rebuilt = decide(snap, started_event_of(snap), _ctx(STARTED_SEQ))
    original = decide(snap, _event(), _ctx(STARTED_SEQ))
    assert rebuilt.snapshot == original.snapshot
    assert rebuilt.effects == original.effects and len(rebuilt.effects) == 2
    # On the service's dispatched run, its saved tasks are repeated (no second dispatch).
    dispatched = _dispatched()
    again = decide(dispatched, started_event_of(dispatched), _ctx(STARTED_SEQ))
    assert again.replayed and again.snapshot is dispatched
    assert again.effects == dispatched.outbox[-1].effects


# --- SweepBook -------------------------------------------------------------------------------


def test_a_marker_is_due_once_seen_for_the_bound() -> None:
    book = SweepBook(AFTER_S)
    assert book.observe([2, 3], 3, 100.0) == []
    assert book.observe([2, 3], 3, 100.0 + AFTER_S - 0.001) == []
    assert book.observe([2, 3, 5], 5, 100.0 + AFTER_S) == [2, 3]  # 5 is new: not due
    assert book.cursor == 2 and book.waiting == 3


def test_the_cursor_passes_settled_markers_and_stops_at_the_oldest_waiting() -> None:
    book = SweepBook(AFTER_S)
    book.observe([2, 3, 4], 4, 0.0)
    book.observe([2, 3, 4, 9], 9, AFTER_S)
    book.settle(3)  # settled above a waiting one: not read as due again
    assert book.cursor == 2
    assert book.observe([2, 3, 4, 9], 9, AFTER_S) == [2, 4]
    book.settle(2)
    book.settle(4)
    assert book.cursor == 9  # 9 still waits
    assert book.observe([9], 9, 2 * AFTER_S) == [9]
    book.settle(9)
    assert book.cursor == 10 and book.waiting == 0
    # Nothing read since: the cursor stays past what was read (a sentinel included).
    assert book.observe([], 12, 3 * AFTER_S) == []
    assert book.cursor == 13


def test_a_marker_removed_before_it_was_due_is_forgotten() -> None:
    book = SweepBook(AFTER_S)
    book.observe([2, 3, 7], 7, 0.0)
    # 3 finished (its marker purged); 9 is past what this read covered.
    assert book.observe([2, 7], 8, 1.0) == []
    assert book.waiting == 2
    assert book.observe([2, 7], 8, AFTER_S) == [2, 7]
    book.settle(2)
    book.settle(7)
    assert book.cursor == 9 and book.waiting == 0


def test_a_marker_whose_examination_failed_stays_due() -> None:
    book = SweepBook(0.0)
    assert book.observe([5, 6], 6, 1.0) == [5, 6]
    book.settle(6)  # 5's reads failed: not settled
    assert book.cursor == 5
    assert book.observe([5, 6], 6, 2.0) == [5]


def test_a_fresh_book_sees_every_marker_once_it_is_due() -> None:
    """A new process (an engine restarted) reads every marker again and waits the bound from
    when it first sees them, whatever their age."""
    book = SweepBook(AFTER_S)
    assert book.observe([1, 50, 51], 60, 1_000.0) == []
    assert book.observe([1, 50, 51], 60, 1_000.0 + AFTER_S) == [1, 50, 51]
