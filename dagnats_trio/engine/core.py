"""The engine's decisions, with no I/O: ``advance(snapshot, event, ctx) -> (snapshot, effects)``.

Everything the engine knows about a run is in the snapshot, and everything it does is an effect,
so every rule here is tested by calling :func:`advance` directly. The clock and the id source
come in through :class:`AdvanceContext`, which keeps the function deterministic.

The working copy a decision is made on is in ``_decision`` (its moves) and ``_decision_events``
(the rule for each kind of event); the context, the outcome and the names the engine gives
things are in ``_advance_terms``. This module is the engine core's one import point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import final

from ..dag import WorkflowDef
from ..protocol import (
    CancelRequested,
    ChildFinished,
    InputSubmitted,
    RunEvent,
    RunStatus,
    SignalSent,
    StepCompleted,
    StepContinue,
    StepFailed,
    StepPaused,
    TimerFired,
    WorkflowStarted,
)
from ._advance_terms import (
    MAX_RUN_ID_CHARS,
    REASON_CHILD_FAILED,
    REASON_MAX_DURATION,
    REASON_MAX_ITERATIONS,
    REASON_NOT_A_LOOP,
    REASON_SNAPSHOT_TOO_LARGE,
    REASON_TIMEOUT,
    SERVICE_START_SEQ,
    TIMER_LOOP_DELAY,
    TIMER_MAX_DURATION,
    TIMER_PAUSE,
    TIMER_RETRY,
    TIMER_TIMEOUT,
    TIMER_WAIT,
    AdvanceContext,
    Outcome,
    child_run_id,
    started_msg_id,
    timer_id,
)
from ._decision_events import _Decision
from .effects import Effect, PublishTask
from .snapshot import OutboxEntry, RunSnapshot, StepState

__all__ = [
    "MAX_RUN_ID_CHARS",
    "REASON_CHILD_FAILED",
    "REASON_MAX_DURATION",
    "REASON_MAX_ITERATIONS",
    "REASON_NOT_A_LOOP",
    "REASON_SNAPSHOT_TOO_LARGE",
    "REASON_TIMEOUT",
    "SERVICE_START_SEQ",
    "TIMER_LOOP_DELAY",
    "TIMER_MAX_DURATION",
    "TIMER_PAUSE",
    "TIMER_RETRY",
    "TIMER_TIMEOUT",
    "TIMER_WAIT",
    "AdvanceContext",
    "Outcome",
    "advance",
    "child_run_id",
    "decide",
    "fail_too_large",
    "first_dispatch",
    "first_dispatch_again",
    "new_run_snapshot",
    "service_start_entry",
    "started_msg_id",
    "timer_id",
]


def advance(
    snapshot: RunSnapshot | None, event: RunEvent, ctx: AdvanceContext
) -> tuple[RunSnapshot | None, tuple[Effect, ...]]:
    """Apply ``event``. An unchanged snapshot object means nothing is to be written."""
    out = decide(snapshot, event, ctx)
    return out.snapshot, out.effects


def new_run_snapshot(
    event: WorkflowStarted, definition: WorkflowDef | None, now_ms: int
) -> RunSnapshot:
    """The snapshot of a run not yet started (what the service writes before publishing
    ``workflow.started``)."""
    steps = {s.id: StepState(s.id) for s in definition.steps} if definition else {}
    return RunSnapshot(
        run_id=event.run_id,
        status=RunStatus.RUNNING,
        workflow=event.workflow,
        definition=definition,
        input=event.input,
        parent=event.parent,
        idempotency_key=event.idempotency_key,
        created_at_ms=event.started_at_ms or now_ms,
        updated_at_ms=now_ms,
        steps=steps,
    )


def decide(snapshot: RunSnapshot | None, event: RunEvent, ctx: AdvanceContext) -> Outcome:
    """Like :func:`advance`, with the reason for a drop."""
    if snapshot is not None and ctx.seq is not None:
        for entry in snapshot.outbox:
            if entry.seq == ctx.seq:
                return Outcome(snapshot, entry.effects, replayed=True)
    if isinstance(event, WorkflowStarted):
        if snapshot is not None and (snapshot.started or snapshot.status.finished):
            decided = service_start_entry(snapshot)
            if decided is not None:
                # The service applied this start itself (first_dispatch): its effects are
                # repeated, as an engine's own outbox entry is when its event comes again.
                return Outcome(snapshot, decided.effects, replayed=True)
            return Outcome(snapshot, dropped="run already started")
        base = snapshot or new_run_snapshot(event, ctx.definition, ctx.now_ms)
        tx = _Decision(base, ctx)
        tx.start()
        return tx.finish()
    if snapshot is None:
        return Outcome(None, dropped="no snapshot for this run")
    if snapshot.status.finished:
        return Outcome(snapshot, dropped=f"run is {snapshot.status.value}")
    if not snapshot.started and not isinstance(event, CancelRequested):
        # Written by the service, not yet started by an engine: nothing can refer to it yet
        # but a cancel; anything else is early and is handed back for later.
        return Outcome(None, dropped="run not started yet")
    if isinstance(event, SignalSent):
        # Signals live in KV; the history record is for audit. Nothing to decide.
        return Outcome(snapshot)
    tx = _Decision(snapshot, ctx)
    if isinstance(event, StepCompleted | StepFailed | StepContinue | StepPaused):
        tx.lifecycle(event)
    elif isinstance(event, TimerFired):
        tx.timer(event)
    elif isinstance(event, CancelRequested):
        tx.cancel(event.reason)
    elif isinstance(event, InputSubmitted):
        tx.input_submitted(event)
    elif isinstance(event, ChildFinished):
        tx.child_finished(event)
    else:  # pragma: no cover - the union is exhaustive
        tx.drop(f"unhandled event {type(event).__name__}")
    return tx.finish()


def fail_too_large(
    snapshot: RunSnapshot, event: RunEvent, ctx: AdvanceContext, size_bytes: int, bound_bytes: int
) -> Outcome:
    """The run failed with :data:`REASON_SNAPSHOT_TOO_LARGE` in place of ``event`` applied, when
    the snapshot that applies it encodes to ``size_bytes``, over ``bound_bytes`` (the most a
    snapshot may be stored at): no save of it could ever succeed, and retrying it would leave
    the run running forever. Decided on ``snapshot``, the stored one, so what made it too large
    (a step's output, a failure message) is left out and the failed run fits. A step event
    fails its step with the reason; any other event fails the run."""
    error = (
        f"{REASON_SNAPSHOT_TOO_LARGE}: the run's snapshot would be {size_bytes} bytes, "
        f"over {bound_bytes}"
    )
    tx = _Decision(snapshot, ctx)
    step = snapshot.steps.get(event.step_id) if isinstance(event, _STEP_EVENTS) else None
    if step is not None and not step.status.finished:
        tx.fail_step_and_run(step.step_id, error, REASON_SNAPSHOT_TOO_LARGE)
    else:
        tx.fail_run(None, error)
    return tx.finish()


_STEP_EVENTS = (StepCompleted, StepFailed, StepContinue, StepPaused)


def first_dispatch(
    event: WorkflowStarted, definition: WorkflowDef, new_id: Callable[[], str]
) -> Outcome | None:
    """The decision on a run's ``workflow.started`` made before it is published, by the one
    who creates the run's first snapshot (the service, ``engine._store.start_dispatched``):
    :func:`decide` on no snapshot, at the event's ``started_at_ms``, its outbox entry under
    :data:`SERVICE_START_SEQ`. None unless every effect is a task to publish (a timer, a child
    run, a run that ends at once are left to the engine, which decides them when the event
    arrives, as before).

    The snapshot it gives is the first snapshot with that decision applied (``started``, its
    dispatches saved in its outbox); the engine, given the event later, repeats the outbox
    entry's tasks (:func:`service_start_entry`) instead of deciding again.
    """
    ctx = AdvanceContext(
        now_ms=event.started_at_ms,
        new_id=new_id,
        definition=definition,
        seq=SERVICE_START_SEQ,
    )
    out = decide(None, event, ctx)
    if out.snapshot is None or out.dropped is not None or out.snapshot.status.finished:
        return None
    if not out.effects or not all(isinstance(e, PublishTask) for e in out.effects):
        return None
    return out


def first_dispatch_again(event: WorkflowStarted, definition: WorkflowDef) -> RunSnapshot | None:
    """The snapshot :func:`first_dispatch` gave the service that published ``event``, made
    again from what the event says that decision drew (``event.dispatched.nonces``, its only
    input that is not the event or the definition): the same ids in the same order give the
    same snapshot. None when the event names no dispatch, or when the decision made again draws
    more or fewer ids than were drawn, or is not a dispatch (then it is not that decision: the
    caller reads the stored snapshot instead)."""
    if event.dispatched is None:
        return None
    drawn = _DrawnAgain(event.dispatched.nonces)
    out = first_dispatch(event, definition, drawn)
    if out is None or out.snapshot is None or drawn.used != len(drawn.ids):
        return None
    return out.snapshot


@final
class _DrawnAgain:
    """The ids a decision drew, handed out again in order; counts the draws (one past the end
    is an empty id, never used: the decision is refused by its count)."""

    def __init__(self, ids: tuple[str, ...]) -> None:
        self.ids = ids
        self.used = 0

    def __call__(self) -> str:
        i = self.used
        self.used += 1
        return self.ids[i] if i < len(self.ids) else ""


def service_start_entry(snapshot: RunSnapshot) -> OutboxEntry | None:
    """The outbox entry of a start decided by :func:`first_dispatch`, while no event has been
    applied since (every applied event moves ``last_seq`` to its own sequence, which is never
    :data:`SERVICE_START_SEQ`) and the run goes on: its tasks are still the step's current
    dispatches, so repeating them (deduplicated by their msg ids) sends no stale task."""
    if not snapshot.started or snapshot.status.finished:
        return None
    if snapshot.last_seq != SERVICE_START_SEQ or not snapshot.outbox:
        return None
    newest = snapshot.outbox[-1]
    return newest if newest.seq == SERVICE_START_SEQ else None
