"""The first decision made by the service (``engine.first_dispatch``, pure): the engine's own
decision on the start, saved under ``SERVICE_START_SEQ``, for task dispatches only; and the
engine's answer to the ``workflow.started`` of such a run: its tasks repeated (the outbox entry,
as after its own crash), never a second dispatch, and nothing once any event was applied."""

from __future__ import annotations

import itertools
from typing import Any

from dagnats_trio.dag import WorkflowDef
from dagnats_trio.engine import (
    SERVICE_START_SEQ,
    AdvanceContext,
    OutboxEntry,
    PublishTask,
    RunSnapshot,
    StepStatus,
    decide,
    decode_snapshot,
    encode_snapshot,
    first_dispatch,
    new_run_snapshot,
    service_start_entry,
    started_msg_id,
)
from dagnats_trio.protocol import (
    CancelRequested,
    RunStatus,
    StepCompleted,
    WorkflowStarted,
)

RUN = "r1"
STARTED_AT_MS = 5_000
#: A history sequence the engine is given the start at, and the step's completion after it.
STARTED_SEQ = 12
COMPLETED_SEQ = 13


def wf(*steps: dict[str, Any]) -> WorkflowDef:
    return WorkflowDef.from_json({"name": "wf", "steps": list(steps)})


TWO_FIRST = wf(
    {"id": "a", "task": "ta"},
    {"id": "b", "task": "tb"},
    {"id": "c", "task": "tc", "depends_on": ["a", "b"]},
)


def _event() -> WorkflowStarted:
    return WorkflowStarted(RUN, "wf", {"x": 1}, started_at_ms=STARTED_AT_MS)


def _ids() -> Any:
    counter = itertools.count()
    return lambda: f"n{next(counter)}"


def _engine_ctx(seq: int, definition: WorkflowDef | None = None) -> AdvanceContext:
    return AdvanceContext(now_ms=STARTED_AT_MS + 100, new_id=_ids(), definition=definition, seq=seq)


def _dispatched() -> RunSnapshot:
    out = first_dispatch(_event(), TWO_FIRST, _ids())
    assert out is not None and out.snapshot is not None
    return out.snapshot


def test_the_service_decides_as_the_engine_does_under_the_start_sequence() -> None:
    out = first_dispatch(_event(), TWO_FIRST, _ids())
    assert out is not None and out.snapshot is not None
    snap = out.snapshot
    # The engine's decision on the same start (its first snapshot, the same ids and time).
    engine = decide(
        new_run_snapshot(_event(), TWO_FIRST, STARTED_AT_MS),
        _event(),
        AdvanceContext(now_ms=STARTED_AT_MS, new_id=_ids(), seq=STARTED_SEQ),
    )
    assert engine.snapshot is not None
    assert out.effects == engine.effects
    assert snap.steps == engine.snapshot.steps and snap.started
    assert [e.msg_id for e in out.effects if isinstance(e, PublishTask)] == [
        f"{RUN}.a.n0",
        f"{RUN}.b.n1",
    ]
    assert snap.steps["c"].status is StepStatus.PENDING
    assert snap.last_seq == SERVICE_START_SEQ
    assert snap.outbox == (OutboxEntry(SERVICE_START_SEQ, out.effects),)
    assert snap.created_at_ms == snap.updated_at_ms == STARTED_AT_MS
    # It survives the store, and is still recognised there.
    stored = decode_snapshot(encode_snapshot(snap))
    assert stored == snap and service_start_entry(stored) == snap.outbox[-1]
    assert started_msg_id(RUN) == f"{RUN}.started"


def test_a_decision_that_is_not_tasks_only_is_left_to_the_engine() -> None:
    timeout = wf({"id": "a", "task": "t", "timeout": "5s"})
    child = wf({"id": "a", "type": "sub_workflow", "sub_workflow": {"workflow": "other"}})
    bounded = wf(
        {
            "id": "a",
            "task": "t",
            "type": "agent_loop",
            "agent_loop": {"max_iterations": 10, "max_duration": "1h"},
        }
    )
    for definition in (timeout, child, bounded):
        assert first_dispatch(_event(), definition, _ids()) is None
    # The control: the same shapes without the timer or the child are dispatched.
    assert first_dispatch(_event(), wf({"id": "a", "task": "t"}), _ids()) is not None


def test_the_engine_repeats_the_services_tasks_and_dispatches_nothing_more() -> None:
    snap = _dispatched()
    out = decide(snap, _event(), _engine_ctx(STARTED_SEQ))
    assert out.replayed and out.snapshot is snap
    assert out.effects == snap.outbox[-1].effects  # the same tasks, the same msg ids
    # Again (a redelivery): the same answer; nothing saved, so nothing else changes.
    again = decide(snap, _event(), _engine_ctx(STARTED_SEQ))
    assert again.replayed and again.effects == out.effects


def test_once_an_event_was_applied_a_late_start_is_dropped() -> None:
    snap = _dispatched()
    a = snap.steps["a"].dispatch
    done = decide(snap, StepCompleted(RUN, "a", a, output=1), _engine_ctx(COMPLETED_SEQ, TWO_FIRST))
    assert done.snapshot is not None and done.snapshot is not snap
    assert done.snapshot.last_seq == COMPLETED_SEQ
    assert service_start_entry(done.snapshot) is None
    late = decide(done.snapshot, _event(), _engine_ctx(STARTED_SEQ))
    assert not late.replayed and late.effects == () and late.dropped == "run already started"

    cancelled = decide(snap, CancelRequested(RUN), _engine_ctx(COMPLETED_SEQ))
    assert cancelled.snapshot is not None
    assert cancelled.snapshot.status is RunStatus.CANCELLED
    late = decide(cancelled.snapshot, _event(), _engine_ctx(STARTED_SEQ))
    assert not late.replayed and late.effects == () and late.dropped


def test_an_engine_started_run_is_not_taken_for_a_service_start() -> None:
    """Only the entry under SERVICE_START_SEQ, newest and with no event since, is repeated: a
    snapshot the service wrote unstarted, or one the engine started, gives nothing."""
    plain = new_run_snapshot(_event(), TWO_FIRST, STARTED_AT_MS)
    assert service_start_entry(plain) is None
    started = decide(plain, _event(), _engine_ctx(STARTED_SEQ))
    assert started.snapshot is not None and not started.replayed
    assert service_start_entry(started.snapshot) is None
    again = decide(started.snapshot, _event(), _engine_ctx(STARTED_SEQ + 1))
    assert again.dropped == "run already started" and again.effects == ()
