"""The engine's decisions, with no I/O: ``advance(snapshot, event, ctx) -> (snapshot, effects)``.

Everything the engine knows about a run is in the snapshot, and everything it does is an effect,
so every rule here is tested by calling :func:`advance` directly. The clock and the id source
come in through :class:`AdvanceContext`, which keeps the function deterministic.

The working copy a decision is made on is in ``_decision`` (its moves) and ``_decision_events``
(the rule for each kind of event); the context, the outcome and the names the engine gives
things are in ``_advance_terms``. This module is the engine core's one import point.
"""

from __future__ import annotations

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
    REASON_TIMEOUT,
    TIMER_LOOP_DELAY,
    TIMER_MAX_DURATION,
    TIMER_PAUSE,
    TIMER_RETRY,
    TIMER_TIMEOUT,
    TIMER_WAIT,
    AdvanceContext,
    Outcome,
    child_run_id,
    timer_id,
)
from ._decision_events import _Decision
from .effects import Effect
from .snapshot import RunSnapshot, StepState

__all__ = [
    "MAX_RUN_ID_CHARS",
    "REASON_CHILD_FAILED",
    "REASON_MAX_DURATION",
    "REASON_MAX_ITERATIONS",
    "REASON_NOT_A_LOOP",
    "REASON_TIMEOUT",
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
    "new_run_snapshot",
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
