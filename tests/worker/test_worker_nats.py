"""The worker on a real nats-server: task messages in, lifecycle events out (no engine)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from dagnats_trio._seams import Seam, SeamContext, install_hook
from dagnats_trio.journal import (
    RESTART_LIMIT_REASON,
    CommittedIteration,
    Completion,
    Fenced,
    Replay,
    ScriptedModel,
    ToolCall,
    check,
    read_journal,
)
from dagnats_trio.protocol import (
    InputPlacedRecord,
    StepCompleted,
    StepContinue,
    StepFailed,
    StepPaused,
    TaskMessage,
    Wait,
)
from dagnats_trio.protocol.layout import (
    RUNS_BUCKET,
    TASK_STREAM,
    cancel_subject,
    run_key,
    worker_durable,
)
from dagnats_trio.transport import NatsTransport
from dagnats_trio.worker import (
    AlreadySettled,
    CheckpointTooLarge,
    Delay,
    RunCancelled,
    TaskContext,
    Until,
    UntilInput,
    Worker,
)
from dagnats_trio.worker import _context as context_module

from ._helpers import WAIT_S, history, make_task, publish_task, uid, wait_history

ACK_WAIT_S = 1.0
#: Tasks of the busy type run one after another beside an idle type (one place between them).
BUSY_TASKS = 3
Handler = Callable[[TaskContext], Awaitable[None]]


@asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[Worker]:
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        yield worker
        nursery.cancel_scope.cancel()


def worker_for(t: NatsTransport, task_type: str, handler: Handler, **kw: Any) -> Worker:
    kw.setdefault("ack_wait_s", ACK_WAIT_S)
    return Worker(t, {task_type: handler}, **kw)


async def wait_acked(t: NatsTransport, seq: int) -> None:
    """Until the task at ``seq`` is acked: its type's consumer's ack floor reaches it (the task
    stream keeps an acked task until its run ends, so the message itself stays)."""
    task_type = (await t.get_msg(TASK_STREAM, seq)).subject.split(".")[1]
    info = f"$JS.API.CONSUMER.INFO.{TASK_STREAM}.{worker_durable(task_type)}"
    with trio.fail_after(WAIT_S):
        while True:
            if json.loads(await t.request(info, b""))["ack_floor"]["stream_seq"] >= seq:
                return
            await trio.sleep(0.02)


async def run_one(
    t: NatsTransport, handler: Handler, task: TaskMessage | None = None, **kw: Any
) -> tuple[TaskMessage, list[Any]]:
    """Publish one task, run a worker until the task is acked; return the run's events."""
    task = task or make_task(uid(), task_type=uid("t"))
    async with running(worker_for(t, task.task, handler, **kw)):
        seq = await publish_task(t, task)
        await wait_acked(t, seq)
    return task, await history(t, task.run_id)


async def test_settles_complete_fail_continue_pause_with_dispatch(
    nats_transport: NatsTransport,
) -> None:
    async def complete(tc: TaskContext) -> None:
        await tc.complete({"echo": tc.input})

    task, (ev,) = await run_one(
        nats_transport, complete, make_task(uid(), task_type=uid("t"), input=[1])
    )
    assert ev == StepCompleted(task.run_id, "agent", task.dispatch, output={"echo": [1]})

    async def fail(tc: TaskContext) -> None:
        await tc.fail("try again")

    task, (ev,) = await run_one(nats_transport, fail)
    assert ev == StepFailed(task.run_id, "agent", task.dispatch, error="try again")

    async def fail_permanent(tc: TaskContext) -> None:
        await tc.fail_permanent(ValueError("bad input"))

    task, (ev,) = await run_one(nats_transport, fail_permanent)
    assert isinstance(ev, StepFailed) and not ev.retriable
    assert ev.error == "ValueError: bad input" and ev.dispatch == task.dispatch

    async def cont(tc: TaskContext) -> None:
        await tc.continue_("o", wait=(UntilInput(), Delay(hours=1), Until(2_000_000_000_000)))

    task, (ev,) = await run_one(nats_transport, cont)
    assert ev == StepContinue(
        task.run_id,
        "agent",
        task.dispatch,
        output="o",
        wait=Wait(delay_ms=3_600_000, until_ms=2_000_000_000_000, until_input=True),
    )

    async def pause(tc: TaskContext) -> None:
        await tc.pause(1.5)

    task, (ev,) = await run_one(nats_transport, pause)
    assert ev == StepPaused(task.run_id, "agent", task.dispatch, duration_ms=1500)


async def test_an_idle_task_type_does_not_starve_another(nats_transport: NatsTransport) -> None:
    """Two task types share the worker's one place: whichever pull loop holds it gives it back
    when its fetch ends and asks again at once; the place is handed to the other type's loop
    first, so each task of the busy type runs. (While the loop that gave back could take every
    place again, the idle type's loop kept it for good once it had it: one of the tasks below
    waited forever, the fetches' order deciding which.)"""

    async def complete(tc: TaskContext) -> None:
        await tc.complete("done")

    idle_type, busy_type = uid("idle"), uid("t")
    worker = Worker(
        nats_transport,
        {idle_type: complete, busy_type: complete},
        ack_wait_s=ACK_WAIT_S,
        concurrency=1,
    )
    tasks = [make_task(uid(), task_type=busy_type) for _ in range(BUSY_TASKS)]
    async with running(worker):
        for task in tasks:
            await wait_acked(nats_transport, await publish_task(nats_transport, task))
    for task in tasks:
        (ev,) = await history(nats_transport, task.run_id)
        assert ev == StepCompleted(task.run_id, "agent", task.dispatch, output="done")


async def test_step_output_is_checked_not_encoded_by_the_context(
    nats_transport: NatsTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settling checks the step output by the JSON policy without encoding it (the event that
    carries it encodes it; the context's bytes were thrown away); output that breaks the policy
    is still the same TypeError at the same call, and the step can then settle."""
    encoded: list[Any] = []
    real = context_module.encode_json

    def counted(value: Any, *, where: str = "value") -> bytes:
        encoded.append(value)
        return real(value, where=where)

    monkeypatch.setattr(context_module, "encode_json", counted)
    errors: list[str] = []

    async def complete(tc: TaskContext) -> None:
        try:
            await tc.complete({"bad": [float("nan")]})
        except TypeError as exc:
            errors.append(str(exc))
        await tc.complete({"echo": tc.input})

    task, (ev,) = await run_one(
        nats_transport, complete, make_task(uid(), task_type=uid("t"), input=[1])
    )
    assert ev == StepCompleted(task.run_id, "agent", task.dispatch, output={"echo": [1]})
    assert errors == [
        "step output is not a JSON value: step output.bad[0]: nan is not a JSON number "
        "(finite numbers only)"
    ]
    assert encoded == []


async def test_a_journaled_complete_checks_its_output_once(
    nats_transport: NatsTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tc.complete`` on a journaled step walks the output by the JSON policy once (the
    context's check, before it begins settling; the journal's commit does not walk it again),
    and a bad output is still refused there with the step left to settle."""
    from dagnats_trio.journal import _calls as calls_module

    checked: list[Any] = []
    for module in (context_module, calls_module):
        real = module.check_json

        def counted(value: Any, *, where: str = "value", real: Any = real) -> None:
            checked.append(value)
            real(value, where=where)

        monkeypatch.setattr(module, "check_json", counted)
    output = {"echo": [1, 2]}
    errors: list[str] = []

    async def complete(tc: TaskContext) -> None:
        await tc.journal()
        try:
            await tc.complete({"bad": [float("nan")]})
        except TypeError as exc:
            errors.append(str(exc))
        await tc.complete(output)

    task, (ev,) = await run_one(
        nats_transport, complete, make_task(uid(), task_type=uid("t"), input=[1])
    )
    assert isinstance(ev, StepCompleted) and ev.output == output
    assert errors == [
        "step output is not a JSON value: step output.bad[0]: nan is not a JSON number "
        "(finite numbers only)"
    ]
    assert sum(1 for v in checked if v is output) == 1
    records = await read_journal(nats_transport, task.run_id, "agent")
    assert [type(r).__name__ for _, r in records] == ["ClaimRecord", "CommitRecord"]


async def test_return_completes_and_exception_fails(nats_transport: NatsTransport) -> None:
    async def returns(tc: TaskContext) -> None:
        return None

    task, (ev,) = await run_one(nats_transport, returns)
    assert ev == StepCompleted(task.run_id, "agent", task.dispatch, output=None)

    async def raises(tc: TaskContext) -> None:
        raise KeyError("missing")

    task, (ev,) = await run_one(nats_transport, raises)
    assert isinstance(ev, StepFailed) and ev.retriable and ev.dispatch == task.dispatch
    assert ev.error == "KeyError: 'missing'"


async def test_settling_twice_is_an_error(nats_transport: NatsTransport) -> None:
    errors: list[Exception] = []

    async def twice(tc: TaskContext) -> None:
        await tc.complete(1)
        try:
            await tc.fail("again")
        except AlreadySettled as exc:
            errors.append(exc)

    _, events = await run_one(nats_transport, twice)
    assert len(events) == 1 and isinstance(events[0], StepCompleted)
    assert len(errors) == 1 and "already settled" in str(errors[0])


async def test_complete_after_then_complete_is_refused(nats_transport: NatsTransport) -> None:
    """``then_complete`` settled the task with the answer's message: a later ``tc.complete``
    raises AlreadySettled and writes nothing (one event, the journal's claim and one group)."""
    errors: list[Exception] = []

    async def answers(tc: TaskContext) -> None:
        j = await tc.journal()
        await j.model(lambda: {"answer": 42}, then_complete=lambda r: Completion(r, {"h": [r]}))
        assert tc.settled
        try:
            await tc.complete("again")
        except AlreadySettled as exc:
            errors.append(exc)

    task, events = await run_one(nats_transport, answers)
    assert len(errors) == 1 and "already settled" in str(errors[0])
    assert len(events) == 1 and isinstance(events[0], StepCompleted)
    assert events[0].output == {"answer": 42}
    records = await read_journal(nats_transport, task.run_id, "agent")
    assert [type(r).__name__ for _, r in records] == ["ClaimRecord", "ModelRecord", "CommitRecord"]
    assert records[1][0] == records[2][0] == events[0].journal_seq  # one message
    assert check(records, engine_iterations=1).ok


async def test_cancel_announcement_cancels_the_handler(nats_transport: NatsTransport) -> None:
    started = trio.Event()
    outcome: list[str] = []

    async def forever(tc: TaskContext) -> None:
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            outcome.append("cancelled")
            raise

    task = make_task(uid(), task_type=uid("t"))
    async with running(worker_for(nats_transport, task.task, forever)):
        seq = await publish_task(nats_transport, task)
        with trio.fail_after(WAIT_S):
            await started.wait()
        await nats_transport.core_publish(cancel_subject(task.run_id), b"")
        await wait_acked(nats_transport, seq)
    assert outcome == ["cancelled"]
    assert await history(nats_transport, task.run_id) == []


async def test_dropped_announcement_is_caught_by_heartbeat(nats_transport: NatsTransport) -> None:
    beats: list[str] = []

    async def beating(tc: TaskContext) -> None:
        while True:
            try:
                await tc.heartbeat()
            except RunCancelled:
                beats.append("cancelled")
                raise
            beats.append("beat")
            if len(beats) == 2:
                snapshot = {"run_id": tc.run_id, "status": "cancelled", "steps": {}}
                await nats_transport.kv_put(
                    RUNS_BUCKET, run_key(tc.run_id), json.dumps(snapshot).encode()
                )

    _, events = await run_one(nats_transport, beating)
    assert beats == ["beat", "beat", "cancelled"]
    assert events == []


async def test_background_heartbeat_outlives_ack_wait(nats_transport: NatsTransport) -> None:
    calls: list[int] = []

    async def slow(tc: TaskContext) -> None:
        calls.append(tc.num_delivered)
        await trio.sleep(ACK_WAIT_S * 2.5)  # the work itself, longer than the AckWait
        await tc.complete("slow")

    _, events = await run_one(nats_transport, slow, concurrency=2)
    assert calls == [1]
    assert [type(e) for e in events] == [StepCompleted]


async def test_kill_leaves_the_task_unacked_for_redelivery(nats_transport: NatsTransport) -> None:
    calls: list[int] = []

    async def handler(tc: TaskContext) -> None:
        calls.append(tc.num_delivered)
        await tc.complete(len(calls))

    async def kill_first(ctx: SeamContext) -> None:
        if ctx.seam is Seam.AFTER_LIFECYCLE_EVENT and len(calls) == 1:
            raise RuntimeError("kill")

    with install_hook(kill_first):
        _, events = await run_one(nats_transport, handler)
    assert calls == [1, 2]  # redelivered after the AckWait: the first was never acked
    # one event per dispatch: the second publish of the same dispatch is deduplicated
    assert [e.output for e in events] == [1]  # type: ignore[union-attr]


async def test_checkpoint_in_kv_and_its_cap(nats_transport: NatsTransport) -> None:
    seen: list[Any] = []

    async def handler(tc: TaskContext) -> None:
        seen.append(await tc.load_checkpoint())
        await tc.checkpoint({"n": 1})
        seen.append(await tc.load_checkpoint())
        with pytest.raises(CheckpointTooLarge, match="loop_state_max_bytes is 32"):
            await tc.checkpoint({"n": "x" * 100})
        assert tc.key() == f"{tc.run_id}.{tc.step_id}.0"
        assert tc.key("a", 2) == f"{tc.run_id}.{tc.step_id}.0.a.2"
        with pytest.raises(RuntimeError, match="built without inputs"):
            await tc.place_inputs("steer")
        await tc.put_stream("token")

    task = make_task(uid(), task_type=uid("t"), loop_state_max_bytes=32)
    _, events = await run_one(nats_transport, handler, task)
    assert seen == [None, {"n": 1}]
    assert [type(e) for e in events] == [StepCompleted]


async def test_worker_arguments_are_checked(nats_transport: NatsTransport) -> None:
    async def h(tc: TaskContext) -> None:
        return None

    for bad in (0, 1001, -1):
        with pytest.raises(ValueError, match="restart_limit"):
            Worker(nats_transport, {"t": h}, restart_limit=bad)
    for ok in (1, 1000):
        Worker(nats_transport, {"t": h}, restart_limit=ok)
    with pytest.raises(ValueError, match="task_type"):
        Worker(nats_transport, {"a.b": h})
    with pytest.raises(ValueError, match="concurrency"):
        Worker(nats_transport, {"t": h}, concurrency=0)
    with pytest.raises(ValueError, match="ack_wait_s"):
        Worker(nats_transport, {"t": h}, ack_wait_s=0)


# --- journal steps through the worker -------------------------------------------------------


async def test_agent_loop_through_the_journal(nats_transport: NatsTransport) -> None:
    model = ScriptedModel([{"tool": "search"}, {"done": True}])
    committed: list[CommittedIteration] = []
    tool_starts: list[str] = []

    async def agent(tc: TaskContext) -> None:
        j = await tc.journal()
        history_ = await tc.load_checkpoint() or [tc.input]
        if tc.iteration == 0:
            await j.append(InputPlacedRecord(0, tc.attempt, j.claim_id, "req-1", "steer", "hi"))
        reply = await j.model(model)
        if reply.get("done"):
            await tc.checkpoint([*history_, "answer"])
            await tc.complete(history_)
            return

        async def search(call: ToolCall) -> Any:
            tool_starts.append(call.key)
            return ["hit"]

        result = await j.tool(ToolCall("search", "q"), Replay.SAFE, search)
        await tc.checkpoint([*history_, result.output])
        await tc.continue_()

    async def on_committed(info: CommittedIteration) -> None:
        committed.append(info)

    run, task_type = uid(), uid("t")
    worker = worker_for(nats_transport, task_type, agent, on_committed=on_committed)
    async with running(worker):
        await publish_task(nats_transport, make_task(run, task_type=task_type, input="start"))
        (ev0,) = await wait_history(nats_transport, run, 1)
        assert isinstance(ev0, StepContinue) and ev0.journal_seq is not None
        nxt = make_task(run, task_type=task_type, iteration=1, journal_seq=ev0.journal_seq)
        await publish_task(nats_transport, nxt)
        _, ev1 = await wait_history(nats_transport, run, 2)
    assert isinstance(ev1, StepCompleted)
    assert ev1.output == ["start", ["hit"]] and ev1.dispatch == nxt.dispatch
    assert tool_starts == [f"{run}.agent.0.1"]
    assert [(c.iteration, c.request_ids) for c in committed] == [(0, ("req-1",)), (1, ())]
    report = check(await read_journal(nats_transport, run, "agent"), engine_iterations=2)
    assert report.ok, report.render()


async def test_stale_redelivery_is_acked_without_an_event(nats_transport: NatsTransport) -> None:
    ran: list[int] = []

    async def agent(tc: TaskContext) -> None:
        await tc.journal()
        ran.append(tc.iteration)
        await tc.continue_()

    run, task_type = uid(), uid("t")
    async with running(worker_for(nats_transport, task_type, agent)):
        await publish_task(nats_transport, make_task(run, task_type=task_type, iteration=1))
        await wait_history(nats_transport, run, 1)
        seq = await publish_task(nats_transport, make_task(run, task_type=task_type))
        await wait_acked(nats_transport, seq)
    assert ran == [1]
    assert len(await history(nats_transport, run)) == 1


async def test_restart_limit_one_through_the_worker(nats_transport: NatsTransport) -> None:
    claims: list[int] = []

    async def agent(tc: TaskContext) -> None:
        await tc.journal()
        await tc.complete("never")

    async def kill_after_claim(ctx: SeamContext) -> None:
        if ctx.seam is Seam.AFTER_CLAIM:
            claims.append(1)
            if len(claims) == 1:
                raise RuntimeError("kill")

    with install_hook(kill_after_claim):
        task, events = await run_one(nats_transport, agent, restart_limit=1)
    (ev,) = events
    assert isinstance(ev, StepFailed) and ev.reason == RESTART_LIMIT_REASON and ev.retriable
    assert ev.dispatch == task.dispatch and ev.journal_seq is not None
    assert len(claims) == 2


async def test_stalled_holder_is_fenced_by_its_successor(nats_transport: NatsTransport) -> None:
    """Stall after the unsafe intent past the AckWait: the redelivery records interrupted and
    settles; the zombie, released, may start its tool but writes nothing and publishes nothing."""
    release = trio.Event()
    successor_done = trio.Event()
    zombie_fenced = trio.Event()
    starts: list[int] = []
    results: list[Any] = []

    async def agent(tc: TaskContext) -> None:
        j = await tc.journal()

        async def charge(call: ToolCall) -> Any:
            starts.append(tc.num_delivered)
            return "charged"

        try:
            r = await j.tool(ToolCall("charge", 5), Replay.UNSAFE, charge)
        except Fenced:
            zombie_fenced.set()
            raise
        results.append((tc.num_delivered, r))
        await tc.complete({"interrupted": r.interrupted})
        successor_done.set()

    stalls: list[int] = []

    async def stall_first(ctx: SeamContext) -> None:
        if ctx.seam is Seam.AFTER_TOOL_INTENT and not stalls:
            stalls.append(1)
            await release.wait()

    task = make_task(uid(), task_type=uid("t"))
    with install_hook(stall_first):
        async with running(worker_for(nats_transport, task.task, agent, concurrency=2)):
            await publish_task(nats_transport, task)
            with trio.fail_after(WAIT_S):
                await successor_done.wait()
            release.set()
            recs_before = await read_journal(nats_transport, task.run_id, "agent")
            with trio.fail_after(WAIT_S):
                await zombie_fenced.wait()
    (ev,) = await history(nats_transport, task.run_id)
    assert isinstance(ev, StepCompleted) and ev.dispatch == task.dispatch
    assert ev.output == {"interrupted": True}
    assert starts == [1]  # at most once, by the stalled holder
    assert [n for n, _ in results] == [2]
    recs = await read_journal(nats_transport, task.run_id, "agent")
    assert recs == recs_before
    assert check(recs, engine_iterations=1).ok
