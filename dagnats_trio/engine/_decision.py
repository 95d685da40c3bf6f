"""One decision under construction: the private, mutable working copy of a run, and the moves
every rule makes with it (dispatch a step, fail an attempt, end the run). The rules for each
kind of event build on it in :mod:`._decision_events`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..dag import StepType, WorkflowDef, ready_steps, run_output, step_input
from ..protocol import (
    CancelRequested,
    ChildFinished,
    DispatchId,
    ParentRef,
    RunStatus,
    TaskMessage,
    TimerFired,
    WorkflowStarted,
)
from ._advance_terms import (
    TIMER_MAX_DURATION,
    TIMER_RETRY,
    TIMER_TIMEOUT,
    AdvanceContext,
    Outcome,
    child_run_id,
    started_msg_id,
    timer_id,
)
from ._replace import replace
from .effects import AnnounceCancel, ArmTimer, Effect, PublishEvent, PublishTask, SettleInputs
from .snapshot import (
    OUTBOX_KEEP_EVENTS,
    OutboxEntry,
    Park,
    RunSnapshot,
    StepState,
    StepStatus,
    stored_outbox,
)


class _Working:
    """One decision under construction: a private, mutable working copy."""

    def __init__(self, snapshot: RunSnapshot, ctx: AdvanceContext) -> None:
        self.orig = snapshot
        self.snap = snapshot
        self.steps = dict(snapshot.steps)
        self.ctx = ctx
        self.now = ctx.now_ms
        self.effects: list[Effect] = []
        self.dropped: str | None = None
        #: Set by :meth:`arm`: the snapshot records that the run stored a timer (``_run_end``).
        self.armed = False

    # --- bookkeeping -----------------------------------------------------------------------

    def drop(self, why: str) -> None:
        self.dropped = why

    def finish(self) -> Outcome:
        if self.dropped is not None:
            return Outcome(self.orig, dropped=self.dropped)
        changes: dict[str, Any] = {"steps": self.steps, "updated_at_ms": self.now}
        if self.armed:
            changes["timers_armed"] = True
        if self.ctx.seq is not None:
            entry = OutboxEntry(self.ctx.seq, tuple(self.effects))
            kept = self.snap.outbox
            if self.ctx.outbox_stored:
                kept = stored_outbox(kept)
            changes["outbox"] = (*kept, entry)[-OUTBOX_KEEP_EVENTS:]
            changes["last_seq"] = self.ctx.seq
        # One copy of the snapshot per advance.
        return Outcome(replace(self.snap, **changes), tuple(self.effects))

    @property
    def definition(self) -> WorkflowDef:
        assert self.snap.definition is not None
        return self.snap.definition

    def set(self, step_id: str, **changes: Any) -> StepState:
        st = replace(self.steps[step_id], **changes)
        self.steps[step_id] = st
        return st

    def arm(self, step_id: str, kind: str, dispatch: DispatchId, due_ms: int) -> None:
        run = self.snap.run_id
        self.armed = True
        self.effects.append(
            ArmTimer(
                timer_id(run, step_id, kind, dispatch),
                due_ms,
                TimerFired(run, step_id, kind, dispatch),
            )
        )

    # --- start and dispatch ----------------------------------------------------------------

    def start(self) -> None:
        self.snap = replace(self.snap, started=True)
        if self.snap.definition is None:
            self.fail_run(None, f"workflow {self.snap.workflow!r} is not registered")
            return
        self.dispatch_ready()

    def dispatch_ready(self) -> None:
        completed = [s for s, st in self.steps.items() if st.status is StepStatus.COMPLETED]
        started = [s for s, st in self.steps.items() if st.status is not StepStatus.PENDING]
        for sid in ready_steps(self.definition, completed, started):
            self.dispatch(sid, iteration=0, attempt=1)

    def dispatch(
        self,
        step_id: str,
        *,
        iteration: int,
        attempt: int,
        ending: Mapping[str, Any] | None = None,
    ) -> None:
        """``ending``: what the iteration that ended leaves on the step (``continue_step``), set
        in the same copy of its state as the dispatch; the task carries its ``journal_seq``."""
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
        if ending is not None:
            common.update(ending)
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
            self.effects.append(PublishEvent(child, started, started_msg_id(child)))
            return
        now_running = self.set(step_id, **common)
        loop = sdef.agent_loop
        task = TaskMessage(
            run_id=run,
            step_id=step_id,
            task=sdef.task,
            workflow=self.snap.workflow,
            dispatch=dispatch,
            input=value,
            journal_seq=now_running.journal_seq,
            loop_state_max_bytes=loop.loop_state_max_bytes if loop else None,
            is_loop=sdef.is_loop,
        )
        self.effects.append(PublishTask(task, f"{run}.{step_id}.{nonce}"))
        if sdef.timeout is not None:
            self.arm(step_id, TIMER_TIMEOUT, dispatch, self.now + sdef.timeout)
        if loop is not None and loop.max_duration is not None and st.started_at_ms is None:
            self.arm(step_id, TIMER_MAX_DURATION, dispatch, started_at + loop.max_duration)

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
        self.snap = replace(
            self.snap,
            status=RunStatus.FAILED,
            error=error,
            failed_step=sid,
            finished_at_ms=self.now,
        )
        self.stop_unfinished_steps()
        self.notify_parent(RunStatus.FAILED, None, error)

    # --- run ends ----------------------------------------------------------------------------

    def cancel(self, reason: str) -> None:
        self.snap = replace(
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
        self.snap = replace(
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
