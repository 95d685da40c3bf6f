"""The pure core, rule by rule: ``advance(snapshot, event, ctx) -> (snapshot, effects)``."""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import pytest

from dagnats_trio.dag import WorkflowDef
from dagnats_trio.engine import (
    TIMER_LOOP_DELAY,
    TIMER_MAX_DURATION,
    TIMER_PAUSE,
    TIMER_RETRY,
    TIMER_TIMEOUT,
    TIMER_WAIT,
    AdvanceContext,
    AnnounceCancel,
    ArmTimer,
    CheckQueuedInputs,
    Effect,
    Park,
    PublishEvent,
    PublishTask,
    RunSnapshot,
    SettleInputs,
    StepStatus,
    advance,
    child_run_id,
    decide,
    decode_snapshot,
    encode_snapshot,
    new_run_snapshot,
)
from dagnats_trio.engine.snapshot import StepState
from dagnats_trio.protocol import (
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
    Wait,
    WorkflowStarted,
    decode_run_header,
)

RUN = "r1"


def wf(*steps: dict[str, Any], name: str = "wf") -> WorkflowDef:
    return WorkflowDef.from_json({"name": name, "steps": list(steps)})


class Harness:
    """A run driven through ``advance`` by hand, with a fake clock and counter ids."""

    def __init__(self, definition: WorkflowDef, *, legacy: bool = True, now: int = 1_000) -> None:
        self.definition = definition
        self.legacy = legacy
        self.now = now
        self.ids = itertools.count()
        self.seq = itertools.count(1)
        self.snap: RunSnapshot | None = None
        self.effects: tuple[Effect, ...] = ()

    def ctx(self, seq: int | None = None) -> AdvanceContext:
        return AdvanceContext(
            now_ms=self.now,
            new_id=lambda: f"n{next(self.ids)}",
            definition=self.definition,
            legacy_step_events=self.legacy,
            seq=seq if seq is not None else next(self.seq),
        )

    def send(self, event: RunEvent, seq: int | None = None) -> tuple[Effect, ...]:
        before = self.snap
        self.snap, self.effects = advance(self.snap, event, self.ctx(seq))
        # Every snapshot survives the wire, and a worker can read its header.
        if self.snap is not None and self.snap is not before:
            data = encode_snapshot(self.snap)
            assert decode_snapshot(data) == self.snap
            assert decode_run_header(data).status is self.snap.status
        return self.effects

    def start(self, input: Any = None) -> tuple[Effect, ...]:
        return self.send(WorkflowStarted(RUN, self.definition.name, input))

    @property
    def s(self) -> RunSnapshot:
        assert self.snap is not None
        return self.snap

    def d(self, step: str) -> DispatchId:
        dispatch = self.s.steps[step].dispatch
        assert dispatch is not None
        return dispatch


def tasks(effects: tuple[Effect, ...]) -> list[TaskMessage]:
    return [e.task for e in effects if isinstance(e, PublishTask)]


def timers(effects: tuple[Effect, ...], kind: str | None = None) -> list[ArmTimer]:
    return [e for e in effects if isinstance(e, ArmTimer) and kind in (None, e.event.kind)]


def fire(h: Harness, timer: ArmTimer) -> tuple[Effect, ...]:
    h.now = max(h.now, timer.due_ms)
    return h.send(timer.event)


LINEAR = wf(
    {"id": "a", "task": "ta"},
    {"id": "b", "task": "tb", "depends_on": ["a"]},
)


def test_start_dispatches_ready_steps_with_attempt_one() -> None:
    h = Harness(
        wf(
            {"id": "a", "task": "t"},
            {"id": "b", "task": "t"},
            {"id": "c", "task": "t", "depends_on": ["a", "b"]},
        )
    )
    effects = h.start({"x": 1})
    sent = tasks(effects)
    assert [t.step_id for t in sent] == ["a", "b"]
    for t in sent:
        assert t.dispatch.iteration == 0 and t.dispatch.attempt == 1
        assert t.input == {"x": 1} and t.journal_seq is None and not t.is_loop
    msg_ids = [e.msg_id for e in effects if isinstance(e, PublishTask)]
    assert msg_ids == [f"{RUN}.a.{sent[0].dispatch.nonce}", f"{RUN}.b.{sent[1].dispatch.nonce}"]
    assert h.s.steps["c"].status is StepStatus.PENDING
    h.send(StepCompleted(RUN, "a", h.d("a"), output=1))
    assert tasks(h.effects) == []
    h.send(StepCompleted(RUN, "b", h.d("b"), output=2))
    (c,) = tasks(h.effects)
    assert c.input == {"a": 1, "b": 2}
    h.send(StepCompleted(RUN, "c", h.d("c"), output="done"))
    assert h.s.status is RunStatus.COMPLETED
    assert h.s.output == "done"
    assert {k: v.output for k, v in h.s.steps.items()} == {"a": 1, "b": 2, "c": "done"}
    assert SettleInputs(RUN, "c") in h.effects


def test_second_workflow_started_is_dropped() -> None:
    h = Harness(LINEAR)
    h.start()
    before = h.snap
    out = decide(before, WorkflowStarted(RUN, "wf"), h.ctx())
    assert out.snapshot is before and out.effects == () and out.dropped


def test_unknown_workflow_fails_the_run_and_tells_the_parent() -> None:
    h = Harness(LINEAR)
    h.definition = None  # type: ignore[assignment]
    ev = WorkflowStarted("child", "nope", parent=ParentRef(RUN, "s"))
    snap, effects = advance(None, ev, AdvanceContext(now_ms=5, new_id=lambda: "x"))
    assert snap is not None and snap.status is RunStatus.FAILED
    assert snap.error is not None and "nope" in snap.error
    (pub,) = [e for e in effects if isinstance(e, PublishEvent)]
    assert pub.run_id == RUN and isinstance(pub.event, ChildFinished)
    assert pub.event.status == "failed" and pub.event.child_run_id == "child"


def test_event_before_snapshot_is_reported_missing() -> None:
    out = decide(None, StepCompleted(RUN, "a"), AdvanceContext(now_ms=1, new_id=lambda: "x"))
    assert out.snapshot is None and out.dropped


# --- acceptance rule ---------------------------------------------------------------------------


def test_acceptance_rule_drops_other_dispatches() -> None:
    h = Harness(LINEAR, legacy=False)
    h.start()
    current = h.d("a")
    before = h.snap
    for wrong in (
        attrs.evolve(current, nonce="other"),
        attrs.evolve(current, attempt=2),
        attrs.evolve(current, iteration=1),
        None,
    ):
        out = decide(before, StepCompleted(RUN, "a", wrong, output="x"), h.ctx())
        assert out.snapshot is before and out.effects == () and out.dropped
    out = decide(before, StepCompleted(RUN, "zzz", current), h.ctx())
    assert out.snapshot is before and out.dropped
    h.send(StepCompleted(RUN, "a", current, output="ok"))
    assert h.s.steps["a"].status is StepStatus.COMPLETED
    # A late duplicate of the applied event is dropped too.
    again = decide(h.snap, StepCompleted(RUN, "a", current, output="dup"), h.ctx())
    assert again.snapshot is h.snap and again.dropped
    assert h.s.steps["a"].output == "ok"


@pytest.mark.parametrize("legacy", [True, False])
def test_legacy_events_follow_the_flag(legacy: bool) -> None:
    h = Harness(LINEAR, legacy=legacy)
    h.start()
    before = h.snap
    h.send(StepCompleted(RUN, "a", None, output="old worker"))
    if legacy:
        assert h.s.steps["a"].status is StepStatus.COMPLETED
        assert [t.step_id for t in tasks(h.effects)] == ["b"]
    else:
        assert h.snap is before and h.effects == ()


LOOP = wf(
    {
        "id": "loop",
        "task": "agent",
        "type": "agent_loop",
        "agent_loop": {"max_iterations": 5, "loop_state_max_bytes": 1000},
    },
)


def test_loop_iterations_carry_journal_seq_and_same_input() -> None:
    h = Harness(LOOP)
    (t0,) = tasks(h.start("prompt"))
    assert t0.is_loop and t0.loop_state_max_bytes == 1000 and t0.journal_seq is None
    h.send(StepContinue(RUN, "loop", t0.dispatch, output="o0", journal_seq=17))
    (t1,) = tasks(h.effects)
    assert t1.dispatch.iteration == 1 and t1.dispatch.attempt == 1
    assert t1.dispatch.nonce != t0.dispatch.nonce
    assert t1.journal_seq == 17 and t1.input == "prompt"
    assert h.s.steps["loop"].output == "o0"
    h.send(StepCompleted(RUN, "loop", t1.dispatch, output="final"))
    assert h.s.status is RunStatus.COMPLETED and h.s.output == "final"
    assert h.s.steps["loop"].iterations == 2


def test_duplicate_continue_never_advances_twice() -> None:
    h = Harness(LOOP, legacy=False)
    (t0,) = tasks(h.start())
    ev = StepContinue(RUN, "loop", t0.dispatch, output=1)
    h.send(ev)
    after_first = h.snap
    h.send(ev)  # the same continue again (a different delivery, a new stream sequence)
    assert h.snap is after_first and h.effects == ()
    assert h.d("loop").iteration == 1


def test_legacy_duplicate_continue_does_advance_twice() -> None:
    """The documented hazard of legacy_step_events: why it should be turned off."""
    h = Harness(LOOP, legacy=True)
    h.start()
    h.send(StepContinue(RUN, "loop", None))
    h.send(StepContinue(RUN, "loop", None))
    assert h.d("loop").iteration == 2


def test_redelivered_event_re_executes_its_effects() -> None:
    h = Harness(LINEAR)
    h.start()
    h.send(StepCompleted(RUN, "a", h.d("a"), output=1), seq=40)
    first = h.effects
    saved = h.snap
    out = decide(saved, StepCompleted(RUN, "a", None), h.ctx(seq=40))
    assert out.replayed and out.snapshot is saved and out.effects == first
    assert tasks(out.effects)[0].step_id == "b"


def test_an_event_whose_effects_are_stored_keeps_its_seq_without_them() -> None:
    """The engine decides on its cached snapshot only once that snapshot's effects are stored
    (``outbox_stored``): the next save keeps the event's sequence without its effects, so the
    snapshot does not grow by a task per event, and a redelivery still replays (nothing)."""
    h = Harness(LOOP, legacy=False)
    (t0,) = tasks(h.start())
    h.send(StepContinue(RUN, "loop", t0.dispatch, output=1))
    assert [len(e.effects) for e in h.s.outbox] == [1, 1]  # not known stored: both kept
    (t1,) = tasks(h.effects)
    stored = attrs.evolve(h.ctx(), outbox_stored=True)
    out = decide(h.s, StepContinue(RUN, "loop", t1.dispatch, output=2), stored)
    assert out.snapshot is not None and tasks(out.effects)[0].dispatch.iteration == 2
    # Only the newest entry's effects were known stored: the older one is kept whole.
    assert [(e.seq, len(e.effects)) for e in out.snapshot.outbox] == [(1, 1), (2, 0), (3, 1)]
    again = decide(out.snapshot, StepContinue(RUN, "loop", t0.dispatch), h.ctx(seq=2))
    assert again.replayed and again.effects == () and again.snapshot is out.snapshot
    # Not stored: the newest entry keeps its effects for its redelivery.
    kept = decide(h.s, StepContinue(RUN, "loop", t1.dispatch, output=2), h.ctx(seq=3))
    assert kept.snapshot is not None
    assert [len(e.effects) for e in kept.snapshot.outbox] == [1, 1, 1]


# --- retries, timeouts --------------------------------------------------------------------------


RETRY = wf(
    {
        "id": "a",
        "task": "t",
        "timeout": "2s",
        "retry": {
            "max_attempts": 3,
            "strategy": "exponential",
            "initial_delay": "100ms",
            "multiplier": 2,
        },
    },
)


def test_retriable_failure_backs_off_then_retries_then_exhausts() -> None:
    h = Harness(RETRY)
    (t1,) = tasks(h.start())
    assert [x.due_ms for x in timers(h.effects, TIMER_TIMEOUT)] == [h.now + 2_000]
    h.send(StepFailed(RUN, "a", t1.dispatch, error="boom", reason="restart_limit"))
    st = h.s.steps["a"]
    assert st.status is StepStatus.WAITING and st.park is Park.RETRY
    assert st.reason == "restart_limit" and st.error == "boom"
    (retry,) = timers(h.effects, TIMER_RETRY)
    assert retry.due_ms == h.now + 100 and tasks(h.effects) == []
    # Late events of the failed attempt are dropped while it waits.
    parked = h.snap
    h.send(StepCompleted(RUN, "a", t1.dispatch))
    assert h.snap is parked
    (t2,) = tasks(fire(h, retry))
    assert (t2.dispatch.iteration, t2.dispatch.attempt) == (0, 2)
    # The retry timer firing again (a duplicate) does nothing more.
    before = h.snap
    h.send(retry.event)
    assert h.snap is before
    h.send(StepFailed(RUN, "a", t2.dispatch, error="boom2"))
    (retry2,) = timers(h.effects, TIMER_RETRY)
    assert retry2.due_ms == h.now + 200
    (t3,) = tasks(fire(h, retry2))
    assert t3.dispatch.attempt == 3
    h.send(StepFailed(RUN, "a", t3.dispatch, error="last"))
    assert h.s.status is RunStatus.FAILED
    assert h.s.error is not None and "last" in h.s.error and "3 attempts" in h.s.error
    assert h.s.failed_step == "a" and h.s.steps["a"].status is StepStatus.FAILED
    assert AnnounceCancel(RUN) in h.effects


def test_a_single_attempt_is_counted_in_the_singular() -> None:
    h = Harness(wf({"id": "a", "task": "t", "retry": {"max_attempts": 1}}))
    (t1,) = tasks(h.start())
    h.send(StepFailed(RUN, "a", t1.dispatch, error="boom"))
    assert h.s.status is RunStatus.FAILED
    assert h.s.error is not None and h.s.error.endswith("boom (after 1 attempt)")


def test_permanent_failure_fails_run_at_once() -> None:
    h = Harness(RETRY)
    (t1,) = tasks(h.start())
    h.send(StepFailed(RUN, "a", t1.dispatch, error="bad input", retriable=False))
    assert h.s.status is RunStatus.FAILED and h.s.error is not None
    assert "bad input" in h.s.error
    # Everything after the end is dropped.
    ended = h.snap
    h.send(StepCompleted(RUN, "a", t1.dispatch))
    assert h.snap is ended


def test_timeout_fails_attempt_as_retriable_and_drops_its_late_events() -> None:
    h = Harness(RETRY)
    (t1,) = tasks(h.start())
    (timeout,) = timers(h.effects, TIMER_TIMEOUT)
    fire(h, timeout)
    st = h.s.steps["a"]
    assert st.park is Park.RETRY and st.reason == "timeout"
    (retry,) = timers(h.effects, TIMER_RETRY)
    timed_out = h.snap
    h.send(StepCompleted(RUN, "a", t1.dispatch, output="too late"))
    assert h.snap is timed_out
    (t2,) = tasks(fire(h, retry))
    assert t2.dispatch.attempt == 2
    # The first dispatch's timeout firing late is no longer current.
    before = h.snap
    h.send(timeout.event)
    assert h.snap is before
    h.send(StepCompleted(RUN, "a", t2.dispatch, output="ok"))
    assert h.s.status is RunStatus.COMPLETED


# --- loops --------------------------------------------------------------------------------------


def test_max_iterations_fails_the_run() -> None:
    h = Harness(
        wf({"id": "l", "task": "t", "type": "agent_loop", "agent_loop": {"max_iterations": 2}})
    )
    (t0,) = tasks(h.start())
    h.send(StepContinue(RUN, "l", t0.dispatch))
    (t1,) = tasks(h.effects)
    h.send(StepContinue(RUN, "l", t1.dispatch))
    assert h.s.status is RunStatus.FAILED
    assert h.s.steps["l"].reason == "max_iterations"


def test_max_duration_by_timer_and_by_check_on_continue() -> None:
    d = wf(
        {
            "id": "l",
            "task": "t",
            "type": "agent_loop",
            "agent_loop": {"max_iterations": 100, "max_duration": "1s"},
        }
    )
    h = Harness(d)
    (t0,) = tasks(h.start())
    (md,) = timers(h.effects, TIMER_MAX_DURATION)
    assert md.due_ms == h.now + 1_000
    h.now += 400
    h.send(StepContinue(RUN, "l", t0.dispatch))
    assert timers(h.effects, TIMER_MAX_DURATION) == []  # armed once
    fire(h, md)
    assert h.s.status is RunStatus.FAILED and h.s.steps["l"].reason == "max_duration"

    h2 = Harness(d)
    (u0,) = tasks(h2.start())
    h2.now += 1_500
    h2.send(StepContinue(RUN, "l", u0.dispatch))
    assert h2.s.status is RunStatus.FAILED and h2.s.steps["l"].reason == "max_duration"


def test_loop_delay_is_a_timer() -> None:
    h = Harness(
        wf(
            {
                "id": "l",
                "task": "t",
                "type": "agent_loop",
                "agent_loop": {"max_iterations": 5, "loop_delay": "250ms"},
            }
        )
    )
    (t0,) = tasks(h.start())
    h.send(StepContinue(RUN, "l", t0.dispatch, journal_seq=3))
    assert tasks(h.effects) == []
    (delay,) = timers(h.effects, TIMER_LOOP_DELAY)
    assert delay.due_ms == h.now + 250 and h.s.steps["l"].park is Park.LOOP_DELAY
    (t1,) = tasks(fire(h, delay))
    assert t1.dispatch.iteration == 1 and t1.journal_seq == 3


def test_continue_on_normal_step_fails_it() -> None:
    h = Harness(LINEAR)
    (t,) = tasks(h.start())
    h.send(StepContinue(RUN, "a", t.dispatch))
    assert h.s.status is RunStatus.FAILED and h.s.steps["a"].reason == "not_a_loop"


# --- waits --------------------------------------------------------------------------------------


WAIT_LOOP = wf(
    {
        "id": "l",
        "task": "t",
        "type": "agent_loop",
        "timeout": "10s",
        "agent_loop": {"max_iterations": 10, "loop_delay": "5s"},
    }
)


def test_delay_wait_parks_without_task_and_skips_loop_delay() -> None:
    h = Harness(WAIT_LOOP)
    (t0,) = tasks(h.start())
    h.send(StepContinue(RUN, "l", t0.dispatch, wait=Wait(delay_ms=300)))
    assert tasks(h.effects) == [] and timers(h.effects, TIMER_LOOP_DELAY) == []
    (w,) = timers(h.effects, TIMER_WAIT)
    assert w.due_ms == h.now + 300
    st = h.s.steps["l"]
    assert st.park is Park.WAIT and st.wait == Wait(delay_ms=300)
    assert not any(isinstance(e, CheckQueuedInputs) for e in h.effects)
    (t1,) = tasks(fire(h, w))
    assert t1.dispatch.iteration == 1 and h.s.steps["l"].wait is None


def test_a_wait_timer_fired_again_is_dropped_even_while_the_step_waits_again() -> None:
    """A fired timer whose ack was lost (or whose consumer was created again) fires again,
    maybe past the history's duplicate window: the dispatch it names is no longer current."""
    h = Harness(WAIT_LOOP)
    (t0,) = tasks(h.start())
    h.send(StepContinue(RUN, "l", t0.dispatch, wait=Wait(delay_ms=300)))
    (w0,) = timers(h.effects, TIMER_WAIT)
    (t1,) = tasks(fire(h, w0))
    h.send(StepContinue(RUN, "l", t1.dispatch, wait=Wait(delay_ms=300)))
    (w1,) = timers(h.effects, TIMER_WAIT)
    parked = h.snap
    assert fire(h, w0) == () and h.snap is parked
    (t2,) = tasks(fire(h, w1))
    assert t2.dispatch.iteration == 2
    assert fire(h, w1) == () and tasks(fire(h, w0)) == []


def test_the_snapshot_records_once_the_run_armed_a_timer() -> None:
    """What the run's end reads to purge the run's timers (``engine._run_end``)."""
    h = Harness(LINEAR)
    tasks(h.start())
    h.send(StepCompleted(RUN, "a", h.d("a"), output=1))
    h.send(StepCompleted(RUN, "b", h.d("b"), output=2))
    assert h.s.status is RunStatus.COMPLETED and not h.s.timers_armed
    h = Harness(WAIT_LOOP)
    (t0,) = tasks(h.start())
    assert h.s.timers_armed  # the step's timeout
    h.send(StepCompleted(RUN, "l", t0.dispatch, output=1))
    assert h.s.status is RunStatus.COMPLETED and h.s.timers_armed


def test_until_and_delay_first_wins() -> None:
    h = Harness(WAIT_LOOP)
    (t0,) = tasks(h.start())
    h.send(StepContinue(RUN, "l", t0.dispatch, wait=Wait(delay_ms=5_000, until_ms=h.now + 700)))
    (w,) = timers(h.effects, TIMER_WAIT)
    assert w.due_ms == h.now + 700


def test_until_in_the_past_dispatches_at_once() -> None:
    h = Harness(WAIT_LOOP)
    (t0,) = tasks(h.start())
    h.send(StepContinue(RUN, "l", t0.dispatch, wait=Wait(until_ms=h.now - 1)))
    (t1,) = tasks(h.effects)
    assert t1.dispatch.iteration == 1


def test_until_input_checks_queue_and_wakes_on_input() -> None:
    h = Harness(WAIT_LOOP)
    (t0,) = tasks(h.start())
    h.send(StepContinue(RUN, "l", t0.dispatch, wait=Wait(until_input=True, delay_ms=60_000)))
    (check,) = [e for e in h.effects if isinstance(e, CheckQueuedInputs)]
    assert (check.run_id, check.step_id) == (RUN, "l")
    (w,) = timers(h.effects, TIMER_WAIT)
    h.send(InputSubmitted(RUN, "l", "req-1"))
    (t1,) = tasks(h.effects)
    assert t1.dispatch.iteration == 1
    # The time wait that lost the race is dropped when it fires.
    before = h.snap
    fire(h, w)
    assert h.snap is before


def test_input_for_a_step_not_waiting_for_input_is_dropped() -> None:
    h = Harness(WAIT_LOOP)
    (t0,) = tasks(h.start())
    before = h.snap
    h.send(InputSubmitted(RUN, "l"))
    assert h.snap is before
    h.send(StepContinue(RUN, "l", t0.dispatch, wait=Wait(delay_ms=100)))
    waiting = h.snap
    h.send(InputSubmitted(RUN, "l"))
    assert h.snap is waiting


def test_timeout_keeps_counting_while_waiting() -> None:
    h = Harness(WAIT_LOOP)
    (t0,) = tasks(h.start())
    (timeout,) = timers(h.effects, TIMER_TIMEOUT)
    h.send(StepContinue(RUN, "l", t0.dispatch, wait=Wait(until_input=True)))
    fire(h, timeout)
    assert h.s.status is RunStatus.FAILED and h.s.steps["l"].reason == "timeout"


# --- pause --------------------------------------------------------------------------------------


def test_pause_redispatches_same_iteration_and_attempt_with_new_nonce() -> None:
    h = Harness(
        wf(
            {
                "id": "l",
                "task": "t",
                "type": "agent_loop",
                "retry": {"max_attempts": 1},
                "agent_loop": {"max_iterations": 3},
            }
        )
    )
    (t0,) = tasks(h.start())
    for _ in range(3):  # pauses never use up the single attempt
        d = h.d("l")
        h.send(StepPaused(RUN, "l", d, duration_ms=500))
        assert tasks(h.effects) == [] and h.s.steps["l"].park is Park.PAUSE
        (p,) = timers(h.effects, TIMER_PAUSE)
        (t,) = tasks(fire(h, p))
        assert (t.dispatch.iteration, t.dispatch.attempt) == (d.iteration, d.attempt)
        assert t.dispatch.nonce != d.nonce
    assert h.s.status is RunStatus.RUNNING
    assert t0.dispatch.attempt == 1


# --- cancel -------------------------------------------------------------------------------------


def test_cancel_marks_run_and_steps_and_drops_later_events() -> None:
    h = Harness(LINEAR)
    (t,) = tasks(h.start())
    h.send(CancelRequested(RUN))
    assert h.s.status is RunStatus.CANCELLED
    assert {s.status for s in h.s.steps.values()} == {StepStatus.CANCELLED}
    assert AnnounceCancel(RUN) in h.effects and SettleInputs(RUN, "a") in h.effects
    # Steps not started yet take inputs too: every step of the run is settled.
    settled = {e.step_id for e in h.effects if isinstance(e, SettleInputs)}
    assert settled == set(h.s.steps) and len(settled) > 1
    ended = h.snap
    for ev in (StepCompleted(RUN, "a", t.dispatch), CancelRequested(RUN), SignalSent(RUN, "x")):
        h.send(ev)
        assert h.snap is ended and h.effects == ()


def test_service_written_snapshot_defers_early_events_but_takes_a_cancel() -> None:
    h = Harness(LINEAR)
    snap = new_run_snapshot(WorkflowStarted(RUN, "wf", 5), LINEAR, 10)
    early = decide(snap, StepCompleted(RUN, "a"), h.ctx())
    assert early.snapshot is None and early.dropped  # handed back for redelivery
    h.snap = snap
    h.send(CancelRequested(RUN))
    assert h.s.status is RunStatus.CANCELLED
    cancelled = h.snap
    h.send(WorkflowStarted(RUN, "wf", 5))
    assert h.snap is cancelled and tasks(h.effects) == []

    h2 = Harness(LINEAR)
    h2.snap = snap
    (t,) = tasks(h2.send(WorkflowStarted(RUN, "wf", 5)))
    assert t.input == 5 and h2.s.started


# --- sub_workflow -------------------------------------------------------------------------------


PARENT = wf(
    {"id": "prep", "task": "t"},
    {
        "id": "sub",
        "type": "sub_workflow",
        "sub_workflow": {"workflow": "child"},
        "depends_on": ["prep"],
        "retry": {"max_attempts": 2, "initial_delay": 0},
    },
    name="parent",
)


def test_sub_workflow_starts_child_and_finishes_with_its_output() -> None:
    h = Harness(PARENT)
    (t,) = tasks(h.start())
    h.send(StepCompleted(RUN, "prep", t.dispatch, output={"q": 1}))
    (start,) = [e for e in h.effects if isinstance(e, PublishEvent)]
    child = child_run_id(RUN, "sub", 1)
    assert start.run_id == child and isinstance(start.event, WorkflowStarted)
    assert start.event.workflow == "child" and start.event.input == {"q": 1}
    assert start.event.parent == ParentRef(RUN, "sub")
    assert h.s.steps["sub"].child_run_id == child
    # Another child's report, or a wrong status, is dropped.
    before = h.snap
    h.send(ChildFinished(RUN, "sub", "someone-else", "completed"))
    assert h.snap is before
    # A failed child is retried as a new child run (new id per attempt).
    h.send(ChildFinished(RUN, "sub", child, "failed", error="child broke"))
    (again,) = [e for e in h.effects if isinstance(e, PublishEvent)]
    child2 = child_run_id(RUN, "sub", 2)
    assert again.run_id == child2 != child
    h.send(ChildFinished(RUN, "sub", child2, "completed", output=42))
    assert h.s.status is RunStatus.COMPLETED and h.s.output == 42


def test_child_run_reports_to_parent_and_parent_cancel_cascades() -> None:
    child = Harness(LINEAR)
    child.send(WorkflowStarted("kid", "wf", parent=ParentRef(RUN, "sub")))
    (ta,) = tasks(child.effects)
    child.send(StepCompleted("kid", "a", ta.dispatch, output=1))
    (tb,) = tasks(child.effects)
    child.send(StepCompleted("kid", "b", tb.dispatch, output=2))
    (report,) = [e for e in child.effects if isinstance(e, PublishEvent)]
    assert report.run_id == RUN
    assert report.event == ChildFinished(RUN, "sub", "kid", "completed", output=2)

    h = Harness(PARENT)
    (t,) = tasks(h.start())
    h.send(StepCompleted(RUN, "prep", t.dispatch))
    h.send(CancelRequested(RUN))
    (cascade,) = [e for e in h.effects if isinstance(e, PublishEvent)]
    kid = child_run_id(RUN, "sub", 1)
    assert cascade.run_id == kid and cascade.event == CancelRequested(kid, cascade.event.reason)


def test_child_run_id_is_deterministic_and_a_token() -> None:
    long_run = "r" * 128
    a = child_run_id(long_run, "step", 1)
    assert a == child_run_id(long_run, "step", 1) != child_run_id(long_run, "step", 2)
    assert len(a) <= 128 and "." not in a


def test_an_agent_loop_event_copies_the_step_state_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A continue that dispatches the next iteration, and the completion that ends the loop,
    each make one copy of the step's state (what the ended iteration leaves is set with the
    dispatch): the engine's per-event path, counted, not timed."""
    from dagnats_trio.engine import _decision

    copies: list[type] = []
    real = _decision.replace

    def counting(inst: Any, **changes: Any) -> Any:
        copies.append(type(inst))
        return real(inst, **changes)

    h = Harness(LOOP)
    (t0,) = tasks(h.start("prompt"))
    monkeypatch.setattr(_decision, "replace", counting)
    h.send(StepContinue(RUN, "loop", t0.dispatch, output="o0", journal_seq=17))
    assert copies.count(StepState) == 1
    st = h.s.steps["loop"]
    assert (st.output, st.journal_seq, st.iterations, st.status) == (
        "o0",
        17,
        1,
        StepStatus.RUNNING,
    )
    (t1,) = tasks(h.effects)
    assert t1.journal_seq == 17
    copies.clear()
    h.send(StepCompleted(RUN, "loop", t1.dispatch, output="final"))
    assert copies.count(StepState) == 1
    assert h.s.steps["loop"].iterations == 2 and h.s.status is RunStatus.COMPLETED
