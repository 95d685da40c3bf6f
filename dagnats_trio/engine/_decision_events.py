"""How each kind of event changes a run: a step's lifecycle events (completed, failed,
continue, paused), its timers, a submitted input and a child run's end. Built on the working
copy of :mod:`._decision`; pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from ..dag import StepDef, StepType
from ..protocol import (
    ChildFinished,
    DispatchId,
    InputSubmitted,
    RunStatus,
    StepCompleted,
    StepContinue,
    StepFailed,
    StepPaused,
    TimerFired,
    Wait,
)
from ._advance_terms import (
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
)
from ._decision import _Working
from .effects import CheckQueuedInputs, SettleInputs
from .snapshot import Park, StepState, StepStatus


class _Decision(_Working):
    """One decision under construction, with the rule for each kind of event."""

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
        dispatch = self.steps[sid].dispatch
        changes: dict[str, Any] = {
            "status": StepStatus.COMPLETED,
            "output": output,
            "finished_at_ms": self.now,
        }
        if dispatch is not None:
            changes["iterations"] = dispatch.iteration + 1
        self.set(sid, **changes)  # one copy of the step's state
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
        # What the ended iteration leaves on the step, set with the step's next move: one copy
        # of its state per event (the agent loop's path: continue, dispatch the next iteration).
        ending: dict[str, Any] = {
            "output": ev.output,
            "journal_seq": ev.journal_seq,
            "iterations": done,
        }
        if done >= loop.max_iterations:
            self.set(sid, **ending)
            self.fail_step_and_run(
                sid,
                f"agent loop reached max_iterations ({loop.max_iterations})",
                REASON_MAX_ITERATIONS,
            )
            return
        if self.max_duration_exceeded(sdef, st):  # ``ending`` leaves started_at_ms as it is
            self.set(sid, **ending)
            self.fail_step_and_run(
                sid,
                f"agent loop exceeded max_duration ({loop.max_duration} ms)",
                REASON_MAX_DURATION,
            )
            return
        wait = ev.wait
        if wait is not None and not wait.is_empty():
            self.set(sid, **ending)
            self.enter_wait(sid, wait)
        elif loop.loop_delay > 0:
            self.set(
                sid,
                status=StepStatus.WAITING,
                park=Park.LOOP_DELAY,
                wake_at_ms=self.now + loop.loop_delay,
                **ending,
            )
            self.arm(sid, TIMER_LOOP_DELAY, ended, self.now + loop.loop_delay)
        else:
            self.dispatch(sid, iteration=done, attempt=1, ending=ending)

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
