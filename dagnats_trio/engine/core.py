"""The engine's decisions, with no I/O: ``advance(snapshot, event, ctx) -> (snapshot, effects)``.

Everything the engine knows about a run is in the snapshot, and everything it does is an effect,
so every rule here is tested by calling :func:`advance` directly. The clock and the id source
come in through :class:`AdvanceContext`, which keeps the function deterministic.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, final

import attrs

from ..dag import StepDef, StepType, WorkflowDef, ready_steps, run_output, step_input
from ..protocol import (
    ID_MAX_CHARS,
    CancelRequested,
    ChildFinished,
    DispatchId,
    InputSubmitted,
    ParentRef,
    RunEvent,
    RunStatus,
    SignalSent,
    StepCompleted,
    StepContinue,
    StepFailed,
    StepPaused,
    TaskMessage,
    TimerFired,
    Wait,
    WorkflowStarted,
    check_id,
)
from .effects import (
    AnnounceCancel,
    ArmTimer,
    CheckQueuedInputs,
    Effect,
    PublishEvent,
    PublishTask,
    SettleInputs,
)
from .snapshot import OUTBOX_KEEP_EVENTS, OutboxEntry, Park, RunSnapshot, StepState, StepStatus

# Timer kinds (``TimerFired.kind``).
TIMER_RETRY = "retry"
TIMER_TIMEOUT = "timeout"
TIMER_LOOP_DELAY = "loop_delay"
TIMER_WAIT = "wait"
TIMER_PAUSE = "pause"
TIMER_MAX_DURATION = "max_duration"

# Failure reasons the engine itself sets on a step.
REASON_TIMEOUT = "timeout"
REASON_MAX_ITERATIONS = "max_iterations"
REASON_MAX_DURATION = "max_duration"
REASON_CHILD_FAILED = "child_failed"
REASON_NOT_A_LOOP = "not_a_loop"

#: Longest token a run id may be (see :func:`protocol.check_id`).
MAX_RUN_ID_CHARS = ID_MAX_CHARS


@final
@attrs.frozen
class AdvanceContext:
    """What :func:`advance` may know beyond the snapshot and the event.

    ``definition`` is needed only when ``workflow.started`` arrives for a run with no snapshot;
    ``seq`` is the history stream sequence of the event (None when it has none, e.g. in tests).
    """

    now_ms: int
    new_id: Callable[[], str]
    definition: WorkflowDef | None = None
    legacy_step_events: bool = True
    seq: int | None = None


@final
@attrs.frozen
class Outcome:
    """The result of one decision. ``dropped`` names why an event was ignored; ``replayed`` is
    true when the event had already been applied and its stored effects are returned again.
    ``snapshot`` None means the run does not exist (or has not started): retry the event later."""

    snapshot: RunSnapshot | None
    effects: tuple[Effect, ...] = ()
    dropped: str | None = None
    replayed: bool = False


def advance(
    snapshot: RunSnapshot | None, event: RunEvent, ctx: AdvanceContext
) -> tuple[RunSnapshot | None, tuple[Effect, ...]]:
    """Apply ``event``. An unchanged snapshot object means nothing is to be written."""
    out = decide(snapshot, event, ctx)
    return out.snapshot, out.effects


def child_run_id(parent_run: str, step_id: str, attempt: int) -> str:
    """The run id of a ``sub_workflow`` step's child: the same for every engine and every
    redelivery, and a new one per attempt."""
    plain = f"{parent_run}-{step_id}-{attempt}"
    if len(plain) <= MAX_RUN_ID_CHARS:
        return plain
    digest = hashlib.sha256(plain.encode()).hexdigest()[:40]
    return check_id("run_id", f"c{attempt}-{digest}")


def timer_id(run_id: str, step_id: str, kind: str, dispatch: DispatchId) -> str:
    return f"{run_id}.{step_id}.{kind}.{dispatch.nonce}"


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


class _Decision:
    """One decision under construction: a private, mutable working copy."""

    def __init__(self, snapshot: RunSnapshot, ctx: AdvanceContext) -> None:
        self.orig = snapshot
        self.snap = snapshot
        self.steps = dict(snapshot.steps)
        self.ctx = ctx
        self.now = ctx.now_ms
        self.effects: list[Effect] = []
        self.dropped: str | None = None

    # --- bookkeeping -----------------------------------------------------------------------

    def drop(self, why: str) -> None:
        self.dropped = why

    def finish(self) -> Outcome:
        if self.dropped is not None:
            return Outcome(self.orig, dropped=self.dropped)
        changes: dict[str, Any] = {"steps": self.steps, "updated_at_ms": self.now}
        if self.ctx.seq is not None:
            entry = OutboxEntry(self.ctx.seq, tuple(self.effects))
            changes["outbox"] = (*self.snap.outbox, entry)[-OUTBOX_KEEP_EVENTS:]
            changes["last_seq"] = self.ctx.seq
        # One copy of the snapshot per advance (``evolve`` reads every field).
        return Outcome(attrs.evolve(self.snap, **changes), tuple(self.effects))

    @property
    def definition(self) -> WorkflowDef:
        assert self.snap.definition is not None
        return self.snap.definition

    def set(self, step_id: str, **changes: Any) -> StepState:
        st = attrs.evolve(self.steps[step_id], **changes)
        self.steps[step_id] = st
        return st

    def arm(self, step_id: str, kind: str, dispatch: DispatchId, due_ms: int) -> None:
        run = self.snap.run_id
        self.effects.append(
            ArmTimer(
                timer_id(run, step_id, kind, dispatch),
                due_ms,
                TimerFired(run, step_id, kind, dispatch),
            )
        )

    # --- start and dispatch ----------------------------------------------------------------

    def start(self) -> None:
        self.snap = attrs.evolve(self.snap, started=True)
        if self.snap.definition is None:
            self.fail_run(None, f"workflow {self.snap.workflow!r} is not registered")
            return
        self.dispatch_ready()

    def dispatch_ready(self) -> None:
        completed = [s for s, st in self.steps.items() if st.status is StepStatus.COMPLETED]
        started = [s for s, st in self.steps.items() if st.status is not StepStatus.PENDING]
        for sid in ready_steps(self.definition, completed, started):
            self.dispatch(sid, iteration=0, attempt=1)

    def dispatch(self, step_id: str, *, iteration: int, attempt: int) -> None:
        sdef = self.definition.step(step_id)
        st = self.steps[step_id]
        run = self.snap.run_id
        nonce = self.ctx.new_id()
        dispatch = DispatchId(iteration, attempt, nonce)
        started_at = st.started_at_ms if st.started_at_ms is not None else self.now
        common = {
            "status": StepStatus.RUNNING,
            "dispatch": dispatch,
            "park": None,
            "wait": None,
            "wake_at_ms": None,
            "started_at_ms": started_at,
            "dispatched_at_ms": self.now,
        }
        outputs = {
            sid: other.output
            for sid, other in self.steps.items()
            if other.status is StepStatus.COMPLETED
        }
        value = step_input(sdef, self.snap.input, outputs)
        if sdef.type is StepType.SUB_WORKFLOW:
            assert sdef.sub_workflow is not None
            child = child_run_id(run, step_id, attempt)
            self.set(step_id, child_run_id=child, **common)
            started = WorkflowStarted(
                run_id=child,
                workflow=sdef.sub_workflow.workflow,
                input=value,
                parent=ParentRef(run, step_id),
                started_at_ms=self.now,
            )
            self.effects.append(PublishEvent(child, started, f"{child}.started"))
            return
        self.set(step_id, **common)
        loop = sdef.agent_loop
        task = TaskMessage(
            run_id=run,
            step_id=step_id,
            task=sdef.task,
            workflow=self.snap.workflow,
            dispatch=dispatch,
            input=value,
            journal_seq=st.journal_seq,
            loop_state_max_bytes=loop.loop_state_max_bytes if loop else None,
            is_loop=sdef.is_loop,
        )
        self.effects.append(PublishTask(task, f"{run}.{step_id}.{nonce}"))
        if sdef.timeout is not None:
            self.arm(step_id, TIMER_TIMEOUT, dispatch, self.now + sdef.timeout)
        if loop is not None and loop.max_duration is not None and st.started_at_ms is None:
            self.arm(step_id, TIMER_MAX_DURATION, dispatch, started_at + loop.max_duration)

    # --- lifecycle events ------------------------------------------------------------------

    def lifecycle(self, ev: StepCompleted | StepFailed | StepContinue | StepPaused) -> None:
        st = self.steps.get(ev.step_id)
        if st is None:
            return self.drop(f"unknown step {ev.step_id!r}")
        if st.status is not StepStatus.RUNNING:
            return self.drop(f"step is {st.status.value}")
        if self.definition.step(ev.step_id).type is StepType.SUB_WORKFLOW:
            return self.drop("a sub_workflow step is settled by its child run")
        if ev.dispatch is None:
            if not self.ctx.legacy_step_events:
                return self.drop("no dispatch identity and legacy_step_events is off")
        elif ev.dispatch != st.dispatch:
            return self.drop("not the current dispatch")
        sid = ev.step_id
        if isinstance(ev, StepCompleted):
            self.complete_step(sid, ev.output)
        elif isinstance(ev, StepFailed):
            self.set(sid, reason=ev.reason)
            self.attempt_failed(sid, ev.error, ev.reason, retriable=ev.retriable)
        elif isinstance(ev, StepContinue):
            self.continue_step(sid, ev)
        else:
            self.pause_step(sid, ev.duration_ms)

    def complete_step(self, sid: str, output: object) -> None:
        st = self.set(sid, status=StepStatus.COMPLETED, output=output, finished_at_ms=self.now)
        if st.dispatch is not None:
            self.set(sid, iterations=st.dispatch.iteration + 1)
        self.effects.append(SettleInputs(self.snap.run_id, sid))
        if all(s.status is StepStatus.COMPLETED for s in self.steps.values()):
            self.complete_run()
        else:
            self.dispatch_ready()

    def continue_step(self, sid: str, ev: StepContinue) -> None:
        sdef = self.definition.step(sid)
        loop = sdef.agent_loop
        if loop is None:
            self.attempt_failed(
                sid,
                "step.continue is only valid for an agent_loop step",
                REASON_NOT_A_LOOP,
                retriable=False,
            )
            return
        st = self.steps[sid]
        assert st.dispatch is not None
        done = st.dispatch.iteration + 1
        ended = st.dispatch
        st = self.set(sid, output=ev.output, journal_seq=ev.journal_seq, iterations=done)
        if done >= loop.max_iterations:
            self.fail_step_and_run(
                sid,
                f"agent loop reached max_iterations ({loop.max_iterations})",
                REASON_MAX_ITERATIONS,
            )
            return
        if self.max_duration_exceeded(sdef, st):
            self.fail_step_and_run(
                sid,
                f"agent loop exceeded max_duration ({loop.max_duration} ms)",
                REASON_MAX_DURATION,
            )
            return
        wait = ev.wait
        if wait is not None and not wait.is_empty():
            self.enter_wait(sid, wait)
        elif loop.loop_delay > 0:
            self.set(
                sid,
                status=StepStatus.WAITING,
                park=Park.LOOP_DELAY,
                wake_at_ms=self.now + loop.loop_delay,
            )
            self.arm(sid, TIMER_LOOP_DELAY, ended, self.now + loop.loop_delay)
        else:
            self.dispatch(sid, iteration=done, attempt=1)

    def enter_wait(self, sid: str, wait: Wait) -> None:
        st = self.steps[sid]
        assert st.dispatch is not None
        dues = [
            d
            for d in (
                self.now + wait.delay_ms if wait.delay_ms is not None else None,
                wait.until_ms,
            )
            if d is not None
        ]
        due = min(dues) if dues else None
        if due is not None and due <= self.now:
            self.dispatch(sid, iteration=st.dispatch.iteration + 1, attempt=1)
            return
        self.set(sid, status=StepStatus.WAITING, park=Park.WAIT, wait=wait, wake_at_ms=due)
        if due is not None:
            self.arm(sid, TIMER_WAIT, st.dispatch, due)
        if wait.until_input:
            msg_id = f"{self.snap.run_id}.{sid}.queued.{st.dispatch.nonce}"
            self.effects.append(CheckQueuedInputs(self.snap.run_id, sid, msg_id))

    def pause_step(self, sid: str, duration_ms: int) -> None:
        st = self.steps[sid]
        assert st.dispatch is not None
        if duration_ms <= 0:
            self.dispatch(sid, iteration=st.dispatch.iteration, attempt=st.dispatch.attempt)
            return
        due = self.now + duration_ms
        self.set(sid, status=StepStatus.WAITING, park=Park.PAUSE, wake_at_ms=due)
        self.arm(sid, TIMER_PAUSE, st.dispatch, due)

    def max_duration_exceeded(self, sdef: StepDef, st: StepState) -> bool:
        loop = sdef.agent_loop
        if loop is None or loop.max_duration is None or st.started_at_ms is None:
            return False
        return self.now - st.started_at_ms >= loop.max_duration

    # --- failures ----------------------------------------------------------------------------

    def attempt_failed(self, sid: str, error: str, reason: str | None, *, retriable: bool) -> None:
        st = self.steps[sid]
        policy = self.definition.step(sid).retry
        attempt = st.dispatch.attempt if st.dispatch is not None else 1
        if retriable and attempt < policy.max_attempts:
            assert st.dispatch is not None
            delay = policy.delay_ms(attempt)
            self.set(sid, error=error, reason=reason)
            if delay <= 0:
                self.dispatch(sid, iteration=st.dispatch.iteration, attempt=attempt + 1)
                return
            self.set(sid, status=StepStatus.WAITING, park=Park.RETRY, wake_at_ms=self.now + delay)
            self.arm(sid, TIMER_RETRY, st.dispatch, self.now + delay)
            return
        if retriable:
            error = f"{error} (after {attempt} attempt{'' if attempt == 1 else 's'})"
        self.fail_step_and_run(sid, error, reason)

    def fail_step_and_run(self, sid: str, error: str, reason: str | None) -> None:
        self.set(
            sid,
            status=StepStatus.FAILED,
            error=error,
            reason=reason,
            park=None,
            finished_at_ms=self.now,
        )
        self.effects.append(SettleInputs(self.snap.run_id, sid))
        self.fail_run(sid, f"step {sid!r} failed: {error}")

    def fail_run(self, sid: str | None, error: str) -> None:
        self.snap = attrs.evolve(
            self.snap,
            status=RunStatus.FAILED,
            error=error,
            failed_step=sid,
            finished_at_ms=self.now,
        )
        self.stop_unfinished_steps()
        self.notify_parent(RunStatus.FAILED, None, error)

    # --- timers, inputs, children ------------------------------------------------------------

    def timer(self, ev: TimerFired) -> None:
        st = self.steps.get(ev.step_id)
        if st is None:
            return self.drop(f"unknown step {ev.step_id!r}")
        sid = ev.step_id
        sdef = self.definition.step(sid)
        if ev.kind == TIMER_MAX_DURATION:
            # Armed once, at the loop's first dispatch; it bounds the step, not one dispatch.
            if st.status.finished or st.status is StepStatus.PENDING or not sdef.agent_loop:
                return self.drop("step not active")
            if not self.max_duration_exceeded(sdef, st):
                return self.drop("max_duration not reached")
            self.fail_step_and_run(
                sid,
                f"agent loop exceeded max_duration ({sdef.agent_loop.max_duration} ms)",
                REASON_MAX_DURATION,
            )
            return
        if ev.dispatch is None or ev.dispatch != st.dispatch:
            return self.drop("timer for a dispatch that is no longer current")
        d = ev.dispatch
        if ev.kind == TIMER_TIMEOUT:
            if st.status is StepStatus.RUNNING:
                self.attempt_failed(
                    sid, f"timed out after {sdef.timeout} ms", REASON_TIMEOUT, retriable=True
                )
            elif st.park is Park.WAIT:
                self.fail_step_and_run(
                    sid, f"timed out after {sdef.timeout} ms while waiting", REASON_TIMEOUT
                )
            else:
                self.drop("timeout does not count while parked by the engine")
            return
        wanted = {
            TIMER_RETRY: Park.RETRY,
            TIMER_LOOP_DELAY: Park.LOOP_DELAY,
            TIMER_WAIT: Park.WAIT,
            TIMER_PAUSE: Park.PAUSE,
        }.get(ev.kind)
        if wanted is None:
            return self.drop(f"unknown timer kind {ev.kind!r}")
        if st.status is not StepStatus.WAITING or st.park is not wanted:
            return self.drop(f"step is not parked for {ev.kind}")
        self.wake(sid, d)

    def wake(self, sid: str, d: DispatchId) -> None:
        park = self.steps[sid].park
        if park is Park.RETRY:
            self.dispatch(sid, iteration=d.iteration, attempt=d.attempt + 1)
        elif park is Park.PAUSE:
            self.dispatch(sid, iteration=d.iteration, attempt=d.attempt)
        else:
            self.dispatch(sid, iteration=d.iteration + 1, attempt=1)

    def input_submitted(self, ev: InputSubmitted) -> None:
        st = self.steps.get(ev.step_id)
        if st is None or st.status is not StepStatus.WAITING or st.park is not Park.WAIT:
            return self.drop("step is not waiting")
        if st.wait is None or not st.wait.until_input or st.dispatch is None:
            return self.drop("step is not waiting for input")
        self.wake(ev.step_id, st.dispatch)

    def child_finished(self, ev: ChildFinished) -> None:
        st = self.steps.get(ev.step_id)
        if st is None or st.status is not StepStatus.RUNNING:
            return self.drop("step is not running")
        if st.child_run_id != ev.child_run_id:
            return self.drop("not the current child run")
        if ev.status == RunStatus.COMPLETED.value:
            self.complete_step(ev.step_id, ev.output)
        elif ev.status == RunStatus.CANCELLED.value:
            self.attempt_failed(
                ev.step_id,
                f"child run {ev.child_run_id} was cancelled",
                REASON_CHILD_FAILED,
                retriable=False,
            )
        else:
            self.attempt_failed(
                ev.step_id,
                ev.error or f"child run {ev.child_run_id} failed",
                REASON_CHILD_FAILED,
                retriable=True,
            )

    # --- run ends ----------------------------------------------------------------------------

    def cancel(self, reason: str) -> None:
        self.snap = attrs.evolve(
            self.snap, status=RunStatus.CANCELLED, error=reason, finished_at_ms=self.now
        )
        self.stop_unfinished_steps()
        self.notify_parent(RunStatus.CANCELLED, None, reason)

    def stop_unfinished_steps(self) -> None:
        """Cancel every unfinished step, announce it to workers and cascade to children."""
        run = self.snap.run_id
        for sid, st in list(self.steps.items()):
            if st.status.finished:
                continue
            if st.status is StepStatus.RUNNING and st.child_run_id is not None:
                child = st.child_run_id
                reason = f"parent run {run} ended"
                self.effects.append(
                    PublishEvent(child, CancelRequested(child, reason), f"{child}.cancel")
                )
            self.set(sid, status=StepStatus.CANCELLED, park=None, finished_at_ms=self.now)
            # A pending step takes inputs too (queued for its first iteration): settle it as well.
            self.effects.append(SettleInputs(run, sid))
        self.effects.append(AnnounceCancel(run))

    def complete_run(self) -> None:
        output = run_output(self.definition, {s: st.output for s, st in self.steps.items()})
        self.snap = attrs.evolve(
            self.snap, status=RunStatus.COMPLETED, output=output, finished_at_ms=self.now
        )
        self.notify_parent(RunStatus.COMPLETED, output, None)

    def notify_parent(self, status: RunStatus, output: object, error: str | None) -> None:
        parent = self.snap.parent
        if parent is None:
            return
        run = self.snap.run_id
        event = ChildFinished(parent.run_id, parent.step_id, run, status.value, output, error)
        self.effects.append(PublishEvent(parent.run_id, event, f"{run}.finished"))
