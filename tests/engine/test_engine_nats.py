"""The engine shell end to end on a real nats-server, with a fake worker written here."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import trio

from dagnats_trio._seams import Seam, SeamContext, install_hook
from dagnats_trio.api import RunNotFound, Service
from dagnats_trio.engine import Park, RunSnapshot, StepStatus, child_run_id
from dagnats_trio.protocol import (
    CancelRequested,
    InputSubmitted,
    LifecycleEvent,
    RunStatus,
    StepCompleted,
    StepContinue,
    StepFailed,
    TaskMessage,
    Wait,
    encode_event,
    layout,
)
from dagnats_trio.transport import NatsTransport, Transport

from ._fakes import (
    RUN_TIMEOUT_S,
    FakeWorker,
    complete_with,
    running,
    test_engine,
    uid,
    wait_until,
)


async def register(service: Service, name: str, *steps: dict[str, Any]) -> None:
    await service.register_workflow({"name": name, "steps": list(steps)})


async def _linear_fan_out_fan_in(transport: Transport) -> None:
    service = Service(transport)
    task = uid("t")
    wf = uid("diamond")
    await register(
        service,
        wf,
        {"id": "a", "task": task},
        {"id": "b", "task": task, "depends_on": ["a"]},
        {"id": "c", "task": task, "depends_on": ["a"]},
        {"id": "d", "task": task, "depends_on": ["b", "c"]},
    )
    chain = uid("chain")
    await register(
        service,
        chain,
        {"id": "one", "task": task},
        {"id": "two", "task": task, "depends_on": ["one"]},
        {"id": "three", "task": task, "depends_on": ["two"]},
    )

    async def script(t: TaskMessage) -> LifecycleEvent:
        if t.step_id == "a":
            return await complete_with(t, t.input["n"] + 1)
        if t.step_id in ("b", "c"):
            return await complete_with(t, t.input * (2 if t.step_id == "b" else 3))
        if t.step_id == "d":
            return await complete_with(t, t.input["b"] + t.input["c"])
        return await complete_with(t, f"{t.input}>{t.step_id}")

    worker = FakeWorker(transport, task, script)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(test_engine(transport), worker):
            r1 = await service.start_run(wf, {"n": 1})
            r2 = await service.start_run(chain, "in")
            s1 = await service.wait_for_run(r1, RUN_TIMEOUT_S)
            s2 = await service.wait_for_run(r2, RUN_TIMEOUT_S)
    assert s1.status is RunStatus.COMPLETED
    assert {k: v.output for k, v in s1.steps.items()} == {"a": 2, "b": 4, "c": 6, "d": 10}
    assert s1.output == 10
    assert s2.status is RunStatus.COMPLETED and s2.output == "in>one>two>three"
    # b and c ran only after a; d only after both.
    order = [t.step_id for t in worker.seen if t.run_id == r1]
    assert order[0] == "a" and order[-1] == "d" and sorted(order[1:3]) == ["b", "c"]
    assert all(t.dispatch.attempt == 1 and t.dispatch.iteration == 0 for t in worker.seen)


async def _agent_loop_three_continues(transport: Transport) -> None:
    service = Service(transport)
    task = uid("agent")
    wf = uid("loop")
    await register(
        service,
        wf,
        {"id": "l", "task": task, "type": "agent_loop", "agent_loop": {"max_iterations": 10}},
    )

    async def script(t: TaskMessage) -> LifecycleEvent:
        i = t.dispatch.iteration
        if i < 3:
            return StepContinue(t.run_id, t.step_id, t.dispatch, output=i, journal_seq=100 + i)
        return await complete_with(t, "done")

    worker = FakeWorker(transport, task, script)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(test_engine(transport), worker):
            run = await service.start_run(wf, "prompt")
            snap = await service.wait_for_run(run, RUN_TIMEOUT_S)
    assert snap.status is RunStatus.COMPLETED and snap.output == "done"
    assert [t.dispatch.iteration for t in worker.seen] == [0, 1, 2, 3]
    assert [t.journal_seq for t in worker.seen] == [None, 100, 101, 102]
    assert all(t.is_loop and t.input == "prompt" for t in worker.seen)
    assert snap.steps["l"].iterations == 4


async def _retry_with_backoff(transport: Transport) -> None:
    service = Service(transport)
    task = uid("flaky")
    wf = uid("retry")
    await register(
        service,
        wf,
        {
            "id": "a",
            "task": task,
            "retry": {"max_attempts": 4, "strategy": "linear", "initial_delay": "100ms"},
        },
    )
    times: list[float] = []

    async def script(t: TaskMessage) -> LifecycleEvent:
        times.append(trio.current_time())
        if t.dispatch.attempt < 3:
            return StepFailed(t.run_id, t.step_id, t.dispatch, error=f"flake {t.dispatch.attempt}")
        return await complete_with(t, "ok")

    worker = FakeWorker(transport, task, script)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(test_engine(transport), worker):
            run = await service.start_run(wf)
            snap = await service.wait_for_run(run, RUN_TIMEOUT_S)
    assert snap.status is RunStatus.COMPLETED and snap.output == "ok"
    assert [t.dispatch.attempt for t in worker.seen] == [1, 2, 3]
    assert len({t.dispatch.nonce for t in worker.seen}) == 3
    # Linear backoff: 100 ms after the first failure, 200 ms after the second.
    assert times[1] - times[0] >= 0.09 and times[2] - times[1] >= 0.19
    assert snap.steps["a"].error == "flake 2"


async def test_permanent_failure_and_exhausted_attempts(nats_transport: NatsTransport) -> None:
    service = Service(nats_transport)
    task = uid("bad")
    perm, exhaust = uid("perm"), uid("exhaust")
    await register(service, perm, {"id": "a", "task": task})
    await register(
        service,
        exhaust,
        {"id": "a", "task": task, "retry": {"max_attempts": 2, "initial_delay": "50ms"}},
        {"id": "never", "task": task, "depends_on": ["a"]},
    )

    async def script(t: TaskMessage) -> LifecycleEvent:
        if t.workflow == perm:
            return StepFailed(t.run_id, t.step_id, t.dispatch, error="no way", retriable=False)
        return StepFailed(t.run_id, t.step_id, t.dispatch, error=f"try {t.dispatch.attempt}")

    worker = FakeWorker(nats_transport, task, script)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(test_engine(nats_transport), worker):
            r1 = await service.start_run(perm)
            r2 = await service.start_run(exhaust)
            s1 = await service.wait_for_run(r1, RUN_TIMEOUT_S)
            s2 = await service.wait_for_run(r2, RUN_TIMEOUT_S)
    assert s1.status is RunStatus.FAILED and s1.error is not None and "no way" in s1.error
    assert [t.dispatch.attempt for t in worker.seen if t.run_id == r1] == [1]
    assert s2.status is RunStatus.FAILED and s2.error is not None and "try 2" in s2.error
    assert s2.failed_step == "a"
    assert s2.steps["never"].status is StepStatus.CANCELLED
    assert [t.step_id for t in worker.seen if t.run_id == r2] == ["a", "a"]


async def test_step_timeout_then_retry(nats_transport: NatsTransport) -> None:
    service = Service(nats_transport)
    task = uid("slow")
    wf = uid("timeout")
    await register(
        service,
        wf,
        {
            "id": "a",
            "task": task,
            "timeout": "300ms",
            "retry": {"max_attempts": 2, "initial_delay": "50ms"},
        },
    )
    first: list[TaskMessage] = []

    async def script(t: TaskMessage) -> LifecycleEvent | None:
        if t.dispatch.attempt == 1:
            first.append(t)
            return None  # the handler hangs; only the engine's timeout moves the step on
        return await complete_with(t, "second")

    worker = FakeWorker(nats_transport, task, script)
    engine = test_engine(nats_transport)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, worker):
            run = await service.start_run(wf)
            snap = await service.wait_for_run(run, RUN_TIMEOUT_S)
            # The timed-out attempt finally answers: its event is dropped.
            dropped = engine.stats.dropped
            late = StepCompleted(run, "a", first[0].dispatch, output="late")
            await nats_transport.publish(layout.history_subject(run), encode_event(late))
            await engine.wait_stats(lambda st: st.dropped > dropped)
    assert snap.status is RunStatus.COMPLETED and snap.output == "second"
    assert snap.steps["a"].reason == "timeout"
    assert (await service.get_run(run)).output == "second"


async def test_max_iterations_and_max_duration_fail_the_run(
    nats_transport: NatsTransport,
) -> None:
    service = Service(nats_transport)
    task = uid("forever")
    iters, dur = uid("iters"), uid("dur")
    await register(
        service,
        iters,
        {"id": "l", "task": task, "type": "agent_loop", "agent_loop": {"max_iterations": 3}},
    )
    await register(
        service,
        dur,
        {
            "id": "l",
            "task": task,
            "type": "agent_loop",
            "agent_loop": {"max_iterations": 100000, "max_duration": "400ms"},
        },
    )

    async def script(t: TaskMessage) -> LifecycleEvent | None:
        if t.workflow == dur and t.dispatch.iteration == 1:
            return None  # stuck in iteration 1: only the max_duration timer can end it
        return StepContinue(t.run_id, t.step_id, t.dispatch)

    worker = FakeWorker(nats_transport, task, script)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(test_engine(nats_transport), worker):
            r1 = await service.start_run(iters)
            r2 = await service.start_run(dur)
            s1 = await service.wait_for_run(r1, RUN_TIMEOUT_S)
            s2 = await service.wait_for_run(r2, RUN_TIMEOUT_S)
    assert s1.status is RunStatus.FAILED and s1.steps["l"].reason == "max_iterations"
    assert [t.dispatch.iteration for t in worker.seen if t.run_id == r1] == [0, 1, 2]
    assert s2.status is RunStatus.FAILED and s2.steps["l"].reason == "max_duration"
    assert s2.finished_at_ms is not None and s2.finished_at_ms - s2.created_at_ms >= 400


@pytest.mark.parametrize("mode", ["loop_delay", "delay_wait"])
async def test_delays_survive_an_engine_restart(nats_transport: NatsTransport, mode: str) -> None:
    service = Service(nats_transport)
    task = uid("sleepy")
    wf = uid(mode.replace("_", "-"))
    loop_cfg: dict[str, Any] = {"max_iterations": 5}
    if mode == "loop_delay":
        loop_cfg["loop_delay"] = "600ms"
    await register(
        service, wf, {"id": "l", "task": task, "type": "agent_loop", "agent_loop": loop_cfg}
    )

    async def script(t: TaskMessage) -> LifecycleEvent:
        if t.dispatch.iteration == 0:
            wait = Wait(delay_ms=600) if mode == "delay_wait" else None
            return StepContinue(t.run_id, t.step_id, t.dispatch, output="first", wait=wait)
        return await complete_with(t, "after the restart")

    worker = FakeWorker(nats_transport, task, script)
    park = Park.LOOP_DELAY if mode == "loop_delay" else Park.WAIT
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(worker):
            async with running(test_engine(nats_transport)):
                run = await service.start_run(wf)
                parked = await wait_until(service, run, lambda s: s.steps["l"].park is park)
            # The first engine is gone while the step waits; a new one finishes the run.
            assert parked.status is RunStatus.RUNNING
            assert [t.dispatch.iteration for t in worker.seen] == [0]
            async with running(test_engine(nats_transport)):
                snap = await service.wait_for_run(run, RUN_TIMEOUT_S)
    assert snap.status is RunStatus.COMPLETED and snap.output == "after the restart"
    assert [t.dispatch.iteration for t in worker.seen] == [0, 1]
    assert snap.finished_at_ms is not None and parked.steps["l"].wake_at_ms is not None
    assert snap.finished_at_ms >= parked.steps["l"].wake_at_ms


async def test_duplicate_continue_is_dropped(nats_transport: NatsTransport) -> None:
    service = Service(nats_transport)
    task = uid("dup")
    wf = uid("dup")
    await register(
        service,
        wf,
        {"id": "l", "task": task, "type": "agent_loop", "agent_loop": {"max_iterations": 10}},
    )
    engine = test_engine(nats_transport)
    sent: list[StepContinue] = []

    async def script(t: TaskMessage) -> LifecycleEvent:
        if t.dispatch.iteration == 0:
            ev = StepContinue(t.run_id, t.step_id, t.dispatch, output=0)
            sent.append(ev)
            return ev
        if t.dispatch.iteration == 1:
            # Iteration 0's continue was applied; inject it again and see it dropped.
            dropped = engine.stats.dropped
            await nats_transport.publish(layout.history_subject(t.run_id), encode_event(sent[0]))
            with trio.fail_after(5):
                await engine.wait_stats(lambda st: st.dropped > dropped)
            return StepContinue(t.run_id, t.step_id, t.dispatch, output=1)
        return await complete_with(t, t.dispatch.iteration)

    worker = FakeWorker(nats_transport, task, script)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, worker):
            run = await service.start_run(wf)
            snap = await service.wait_for_run(run, RUN_TIMEOUT_S)
    assert snap.status is RunStatus.COMPLETED and snap.output == 2
    assert [t.dispatch.iteration for t in worker.seen] == [0, 1, 2]


@pytest.mark.parametrize("legacy", [True, False])
async def test_legacy_events_follow_the_flag(
    nats_transport: NatsTransport, legacy: bool, caplog: pytest.LogCaptureFixture
) -> None:
    service = Service(nats_transport)
    task = uid("old")
    wf = uid("legacy")
    await register(service, wf, {"id": "a", "task": task})

    async def script(t: TaskMessage) -> LifecycleEvent:
        return StepCompleted(t.run_id, t.step_id, None, output="from an old worker")

    worker = FakeWorker(nats_transport, task, script)
    engine = test_engine(nats_transport, legacy_step_events=legacy)
    # DEBUG: the engine logs each dropped event with its run, so the test waits for its own.
    caplog.set_level(logging.DEBUG, logger="dagnats_trio.engine")

    def own_event_dropped(run: str) -> bool:
        mine = f"dropped StepCompleted for run {run}: "
        return any(r.getMessage().startswith(mine) for r in caplog.records)

    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, worker):
            run = await service.start_run(wf)
            if legacy:
                snap = await service.wait_for_run(run, RUN_TIMEOUT_S)
                assert snap.status is RunStatus.COMPLETED
                assert snap.output == "from an old worker"
            else:
                # The engine's consumer is shared with other tests' leftovers: a drop counted
                # may be theirs, so wait until this run's event is the one dropped.
                while True:
                    dropped = engine.stats.dropped
                    if own_event_dropped(run):
                        break
                    await engine.wait_stats(lambda st, n=dropped: st.dropped > n)
                snap = await service.get_run(run)
                assert snap.status is RunStatus.RUNNING
                assert snap.steps["a"].status is StepStatus.RUNNING
                await service.cancel_run(run)
                await service.wait_for_run(run, RUN_TIMEOUT_S)
    warned = any("legacy_step_events is on" in r.getMessage() for r in caplog.records)
    assert warned is legacy


async def test_cancel_marks_run_and_announces(nats_transport: NatsTransport) -> None:
    service = Service(nats_transport)
    task = uid("stuck")
    wf = uid("cancel")
    await register(
        service, wf, {"id": "a", "task": task}, {"id": "b", "task": task, "depends_on": ["a"]}
    )
    got_task = trio.Event()

    async def script(t: TaskMessage) -> None:
        got_task.set()
        return None

    engine = test_engine(nats_transport)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, FakeWorker(nats_transport, task, script)):
            run = await service.start_run(wf)
            await got_task.wait()
            async with nats_transport.subscribe(layout.cancel_subject(run)) as announcements:
                await service.cancel_run(run)
                async for msg in announcements:
                    assert msg.data == run.encode()
                    break
            snap = await service.wait_for_run(run, RUN_TIMEOUT_S)
            # Later events of the run are dropped.
            dropped = engine.stats.dropped
            late = StepCompleted(run, "a", snap.steps["a"].dispatch, output="late")
            await nats_transport.publish(layout.history_subject(run), encode_event(late))
            await engine.wait_stats(lambda st: st.dropped > dropped)
    assert snap.status is RunStatus.CANCELLED
    assert {s.status for s in snap.steps.values()} == {StepStatus.CANCELLED}
    assert (await service.get_run(run)).steps["a"].output is None


async def _sub_workflow_and_cancel_cascade(transport: Transport) -> None:
    service = Service(transport)
    task = uid("kid")
    child_wf, parent_wf, stuck_wf = uid("child"), uid("parent"), uid("stuck-parent")
    stuck_child = uid("stuck-child")
    await register(service, child_wf, {"id": "c", "task": task})
    await register(service, stuck_child, {"id": "wait", "task": task})
    await register(
        service,
        parent_wf,
        {"id": "sub", "type": "sub_workflow", "sub_workflow": {"workflow": child_wf}},
        {"id": "after", "task": task, "depends_on": ["sub"]},
    )
    await register(
        service,
        stuck_wf,
        {"id": "sub", "type": "sub_workflow", "sub_workflow": {"workflow": stuck_child}},
    )

    async def script(t: TaskMessage) -> LifecycleEvent | None:
        if t.step_id == "wait":
            return None
        if t.step_id == "c":
            return await complete_with(t, {"child_saw": t.input})
        return await complete_with(t, {"parent_saw": t.input})

    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(test_engine(transport), FakeWorker(transport, task, script)):
            run = await service.start_run(parent_wf, 7)
            snap = await service.wait_for_run(run, RUN_TIMEOUT_S)
            kid = child_run_id(run, "sub", 1)
            child_snap = await service.get_run(kid)

            stuck = await service.start_run(stuck_wf)
            stuck_kid = child_run_id(stuck, "sub", 1)
            await _exists(service, stuck_kid)
            await wait_until(
                service, stuck_kid, lambda s: s.steps["wait"].status is StepStatus.RUNNING
            )
            await service.cancel_run(stuck)
            parent_end = await service.wait_for_run(stuck, RUN_TIMEOUT_S)
            kid_end = await service.wait_for_run(stuck_kid, RUN_TIMEOUT_S)
    assert snap.status is RunStatus.COMPLETED
    assert snap.output == {"parent_saw": {"child_saw": 7}}
    assert child_snap.status is RunStatus.COMPLETED and child_snap.parent is not None
    assert child_snap.parent.run_id == run
    assert parent_end.status is RunStatus.CANCELLED
    assert kid_end.status is RunStatus.CANCELLED


async def _exists(service: Service, run_id: str) -> None:
    """Wait for the engine to create a run (a child run has no snapshot until then)."""
    await wait_until(service, run_id, lambda s: True)


async def _crash_between_save_and_publish(transport: Transport) -> None:
    """The seam raises once after a dispatch is saved: the unacked event comes back, and the
    engine re-executes the effects it stored instead of deciding again."""
    service = Service(transport)
    task = uid("seam")
    wf = uid("seam")
    await register(
        service, wf, {"id": "a", "task": task}, {"id": "b", "task": task, "depends_on": ["a"]}
    )
    hits: list[SeamContext] = []

    class Boom(Exception):
        pass

    async def hook(ctx: SeamContext) -> None:
        if ctx.seam is Seam.ENGINE_AFTER_DISPATCH_SAVED and ctx.step_id == "b" and not hits:
            hits.append(ctx)
            raise Boom

    async def script(t: TaskMessage) -> LifecycleEvent:
        return await complete_with(t, t.step_id)

    engine = test_engine(transport)
    worker = FakeWorker(transport, task, script)
    with trio.fail_after(RUN_TIMEOUT_S), install_hook(hook):
        async with running(engine, worker):
            run = await service.start_run(wf)
            snap = await service.wait_for_run(run, RUN_TIMEOUT_S)
    assert hits and hits[0].run_id == run
    assert snap.status is RunStatus.COMPLETED and snap.output == "b"
    assert engine.stats.replayed >= 1
    # One dispatch of b (the republish was deduplicated or came from the same stored task).
    assert len({t.dispatch.nonce for t in worker.seen if t.step_id == "b"}) == 1


async def test_malformed_history_message_is_terminated(nats_transport: NatsTransport) -> None:
    service = Service(nats_transport)
    task = uid("ok")
    wf = uid("after-junk")
    await register(service, wf, {"id": "a", "task": task})
    engine = test_engine(nats_transport)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, FakeWorker(nats_transport, task, lambda t: complete_with(t, 1))):
            await nats_transport.publish(layout.history_subject(uid("junk")), b"{not json")
            await engine.wait_stats(lambda st: st.malformed > 0)
            run = await service.start_run(wf)
            snap = await service.wait_for_run(run, RUN_TIMEOUT_S)
    assert snap.status is RunStatus.COMPLETED


#: Levels of nesting past the interpreter's recursion limit (json's parser recurses per level).
TOO_DEEP_LEVELS = 100_000


async def test_a_history_message_nested_too_deep_is_terminated(
    nats_transport: NatsTransport,
) -> None:
    """A history message whose JSON nests past what the parser can follow is malformed like
    any other: terminated, counted, and the engine goes on (a RecursionError escaped the
    decoder and ended the engine; the message, redelivered, would end every restart)."""
    service = Service(nats_transport)
    task = uid("ok")
    wf = uid("after-deep")
    await register(service, wf, {"id": "a", "task": task})
    engine = test_engine(nats_transport)
    deep = b'{"type":' + b"[" * TOO_DEEP_LEVELS + b"]" * TOO_DEEP_LEVELS + b"}"
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, FakeWorker(nats_transport, task, lambda t: complete_with(t, 1))):
            await nats_transport.publish(layout.history_subject(uid("deep")), deep)
            await engine.wait_stats(lambda st: st.malformed > 0)
            run = await service.start_run(wf)
            snap = await service.wait_for_run(run, RUN_TIMEOUT_S)
    assert engine.stats.malformed == 1
    assert snap.status is RunStatus.COMPLETED


async def test_two_engines_fifty_runs(nats_transport: NatsTransport) -> None:
    service = Service(nats_transport)
    task = uid("many")
    wf = uid("many")
    await register(
        service,
        wf,
        {"id": "double", "task": task},
        {
            "id": "loop",
            "task": task,
            "type": "agent_loop",
            "depends_on": ["double"],
            "agent_loop": {"max_iterations": 5},
        },
    )

    async def script(t: TaskMessage) -> LifecycleEvent:
        if t.step_id == "double":
            return await complete_with(t, t.input * 2)
        if t.dispatch.iteration < 2:
            return StepContinue(t.run_id, t.step_id, t.dispatch)
        return await complete_with(t, t.input + t.dispatch.iteration)

    e1, e2 = test_engine(nats_transport), test_engine(nats_transport)
    runs: dict[str, int] = {}
    with trio.fail_after(40):
        async with running(
            e1,
            e2,
            FakeWorker(nats_transport, task, script),
            FakeWorker(nats_transport, task, script),
        ):
            for n in range(50):
                runs[await service.start_run(wf, n)] = n
            results = {}
            for run in runs:
                results[run] = await service.wait_for_run(run, 30)
    for run, n in runs.items():
        snap = results[run]
        assert snap.status is RunStatus.COMPLETED, snap.error
        assert snap.output == n * 2 + 2
    assert e1.stats.applied > 0 and e2.stats.applied > 0


async def test_linear_fan_out_fan_in_with_outputs(transport: Transport) -> None:
    await _linear_fan_out_fan_in(transport)


async def test_agent_loop_continues_three_times_then_completes(transport: Transport) -> None:
    await _agent_loop_three_continues(transport)


async def test_retry_with_backoff_then_success(transport: Transport) -> None:
    await _retry_with_backoff(transport)


async def test_crash_between_save_and_publish_is_repaired(transport: Transport) -> None:
    await _crash_between_save_and_publish(transport)


async def test_sub_workflow_and_cancel_cascade(transport: Transport) -> None:
    await _sub_workflow_and_cancel_cascade(transport)


class RecordingInputs:
    """Inputs hooks that report one queued input the first time they are asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []
        self.settled: list[tuple[str, str]] = []
        self._settled_changed = trio.Event()

    async def has_queued(self, run_id: str, step_id: str) -> bool:
        self.asked.append((run_id, step_id))
        return len(self.asked) == 1

    async def settle_step(self, run_id: str, step_id: str) -> None:
        self.settled.append((run_id, step_id))
        self._settled_changed.set()
        self._settled_changed = trio.Event()

    async def wait_settled(self, run_id: str) -> None:
        """Until a step of ``run_id`` is settled (the shared history consumer may hand this
        engine another test's leftover run too: those are not counted)."""
        while not any(r == run_id for r, _ in self.settled):
            await self._settled_changed.wait()


def _waits_in(iteration: int) -> Callable[[RunSnapshot], bool]:
    def pred(snap: RunSnapshot) -> bool:
        st = snap.steps["l"]
        return (
            st.park is Park.WAIT
            and st.dispatch is not None
            and (st.dispatch.iteration == iteration)
        )

    return pred


async def test_input_waits_use_the_inputs_hooks(nats_transport: NatsTransport) -> None:
    service = Service(nats_transport)
    task = uid("human")
    wf = uid("inputs")
    await register(
        service,
        wf,
        {"id": "l", "task": task, "type": "agent_loop", "agent_loop": {"max_iterations": 10}},
    )

    async def script(t: TaskMessage) -> LifecycleEvent:
        if t.dispatch.iteration < 2:
            wait = Wait(until_input=True, delay_ms=60_000)
            return StepContinue(t.run_id, t.step_id, t.dispatch, wait=wait)
        return await complete_with(t, "answered")

    hooks = RecordingInputs()
    worker = FakeWorker(nats_transport, task, script)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(test_engine(nats_transport, inputs=hooks), worker):
            run = await service.start_run(wf)
            # Iteration 0 waits, but an input is already queued: iteration 1 comes at once.
            # Iteration 1 waits with nothing queued, until an input is submitted.
            await wait_until(service, run, _waits_in(1))
            assert [t.dispatch.iteration for t in worker.seen] == [0, 1]
            submitted = InputSubmitted(run, "l", "req-1")
            await nats_transport.publish(layout.history_subject(run), encode_event(submitted))
            snap = await service.wait_for_run(run, RUN_TIMEOUT_S)
            # The engine settles a finished step's inputs after it saves the snapshot.
            await hooks.wait_settled(run)
    assert snap.status is RunStatus.COMPLETED and snap.output == "answered"
    assert [t.dispatch.iteration for t in worker.seen] == [0, 1, 2]
    assert hooks.asked == [(run, "l"), (run, "l")]
    assert [s for s in hooks.settled if s[0] == run] == [(run, "l")]


async def test_event_for_a_missing_run_is_handed_back(nats_transport: NatsTransport) -> None:
    engine = test_engine(nats_transport)
    ghost = uid("ghost")
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine):
            event = CancelRequested(ghost)
            await nats_transport.publish(layout.history_subject(ghost), encode_event(event))
            await engine.wait_stats(lambda st: st.missing_run >= 2)  # nak'd and redelivered
    with pytest.raises(RunNotFound):
        await Service(nats_transport).get_run(ghost)
