"""Inputs and waits end to end on a real nats-server: the spec's example handler driven by steer
and follow-up inputs, settlement, durable input waits across an engine restart, and the crash
cases of placement. Real Engine(inputs=...), real Worker(inputs=...), runs started through the
API service."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import trio

from dagnats_trio._seams import Seam, SeamContext, install_hook
from dagnats_trio.engine import StepStatus
from dagnats_trio.inputs import (
    ConflictError,
    InputsService,
    Mode,
    StoredSubmission,
    SubmissionStatus,
)
from dagnats_trio.journal import ToolResult
from dagnats_trio.protocol import CommitRecord, JsonValue, RunStatus
from dagnats_trio.transport import NatsTransport
from dagnats_trio.worker import (
    Delay,
    InputsQueued,
    InputsUnavailable,
    TaskContext,
    UntilInput,
    Worker,
)
from examples import agent_turn
from examples.agent_turn import History, make_agent_turn

from ._stack import (
    WAIT_S,
    Stack,
    journal_audit,
    new_engine,
    new_worker,
    open_stack,
    placed_ids,
    uid,
)

STEP = agent_turn.STEP_ID
PROMPT: History = [{"role": "user", "content": {"text": "flights to Porto"}}]
HOUR_MS = 3600 * 1000
#: The short wait of the "time as well" case.
SHORT_DELAY_S = 0.3


def user_inputs(history: History) -> list[str]:
    """The request ids of the inputs a history holds, in order."""
    return [m["id"] for m in history if m["role"] == "user" and "id" in m]


def last_state(records: list[Any]) -> Any:
    return [r for r in records if isinstance(r, CommitRecord)][-1].state


async def loop_workflow(stack: Stack, task: str) -> str:
    return await stack.workflow(agent_turn.workflow(uid("wf"), task))


async def test_the_example_agent_takes_a_steer_and_answers_a_follow_up(
    nats_transport: NatsTransport,
) -> None:
    t = nats_transport
    task = uid("agent")
    prompts: list[History] = []
    tool_running = trio.Event()
    release_tool = trio.Event()

    async def model(history: History) -> JsonValue:
        prompts.append(copy.deepcopy(history))
        return await agent_turn.call_model(history)

    async def tool(name: str, input: JsonValue, key: str) -> JsonValue:
        if not tool_running.is_set():  # the first tool round: hold it until the steer is in
            tool_running.set()
            await release_tool.wait()
        return await agent_turn.run_tool(name, input, key)

    async with open_stack(t) as stack:
        wf = await loop_workflow(stack, task)
        await stack.start(new_engine(t, stack.inputs))
        await stack.start(new_worker(t, stack.inputs, {task: make_agent_turn(model, tool)}))
        run = await stack.service.start_run(wf, PROMPT)

        with trio.fail_after(WAIT_S):
            await tool_running.wait()
        steer, created = await stack.inputs.submit(
            run, STEP, "steer-1", Mode.STEER, {"text": "only direct flights"}
        )
        assert created and steer.status is SubmissionStatus.QUEUED
        release_tool.set()
        await stack.wait_input(run, STEP, "steer-1", SubmissionStatus.DONE)
        # search, search (for the steer), answer: then it waits for a follow-up.
        snap = await stack.wait_waiting(run, STEP, iterations=3)
        waiting = snap.steps[STEP]
        assert waiting.wait is not None and waiting.wait.until_input

        # The steer joined after the tool round, and the next model call saw it.
        assert user_inputs(prompts[0]) == []
        assert prompts[1][-2]["role"] == "tool"
        assert prompts[1][-1] == {
            "role": "user",
            "content": {"text": "only direct flights"},
            "mode": "steer",
            "id": "steer-1",
        }
        assert prompts[2][-1]["output"] == {"results": ["top result for 'only direct flights'"]}

        _, created = await stack.inputs.submit(
            run, STEP, "follow-1", "follow_up", {"text": "and the way back?"}
        )
        assert created
        await stack.wait_input(run, STEP, "follow-1", SubmissionStatus.DONE)
        snap = await stack.wait_waiting(run, STEP, iterations=5)

    # The follow-up woke the agent, its next model call saw it, and the agent answered it.
    assert len(prompts) == 5  # one model call per turn: nothing was repeated
    assert user_inputs(prompts[3]) == ["steer-1", "follow-1"]
    assert prompts[3][-1]["mode"] == "follow_up"
    report, records = await journal_audit(t, snap, STEP)
    assert report.ok, report.render()
    assert report.commits == 5
    assert placed_ids(records) == ["steer-1", "follow-1"]  # every input placed once
    final = last_state(records)
    assert agent_turn.answered(final)
    assert final[-1]["turn"]["text"].startswith("and the way back?: ")
    for rid, iteration in (("steer-1", 1), ("follow-1", 3)):
        sub = await stack.inputs.get(run, STEP, rid)
        assert (sub.status, sub.placed_iteration) == (SubmissionStatus.DONE, iteration)


async def test_inputs_left_queued_become_unanswered_when_the_step_completes(
    nats_transport: NatsTransport,
) -> None:
    t = nats_transport
    task = uid("finisher")
    running = trio.Event()
    release = trio.Event()

    async def handler(tc: TaskContext) -> None:
        await tc.journal()
        running.set()
        await release.wait()
        await tc.complete("finished without looking")

    async with open_stack(t) as stack:
        wf = await loop_workflow(stack, task)
        await stack.start(new_engine(t, stack.inputs))
        await stack.start(new_worker(t, stack.inputs, {task: handler}))
        run = await stack.service.start_run(wf, PROMPT)
        with trio.fail_after(WAIT_S):
            await running.wait()
        await stack.inputs.submit(run, STEP, "late-1", "steer", 1)
        await stack.inputs.submit(run, STEP, "late-2", "follow_up", 2)
        release.set()
        snap = await stack.wait_run(run, lambda s: s.status is RunStatus.COMPLETED)
        for rid in ("late-1", "late-2"):
            sub = await stack.wait_input(run, STEP, rid, SubmissionStatus.UNANSWERED)
            assert sub.placed_iteration is None and sub.settled_at_ms is not None
        assert not await stack.inputs.has_queued(run, STEP)

        with pytest.raises(ConflictError) as refused:
            await stack.inputs.submit(run, STEP, "later", "steer", 3)
        assert (refused.value.status, refused.value.code) == (409, "step_finished")
        # A retry of an accepted id still answers with the original (200), now unanswered.
        again, created = await stack.inputs.submit(run, STEP, "late-1", "steer", "other")
        assert not created and (again.content, again.status) == (1, SubmissionStatus.UNANSWERED)

    report, records = await journal_audit(t, snap, STEP)
    assert report.ok, report.render()
    assert placed_ids(records) == []


async def test_an_agent_waiting_an_hour_holds_no_worker_and_survives_an_engine_restart(
    nats_transport: NatsTransport,
) -> None:
    t = nats_transport
    agent_task, quick_task = uid("agent"), uid("quick")

    async def quick(tc: TaskContext) -> None:
        await tc.complete("quick done")

    async with open_stack(t) as stack:
        wf = await loop_workflow(stack, agent_task)
        quick_wf = uid("quick")
        await stack.workflow({"name": quick_wf, "steps": [{"id": "q", "task": quick_task}]})
        engine = await stack.start(new_engine(t, stack.inputs))
        handlers = {agent_task: agent_turn.make_agent_turn(), quick_task: quick}
        # One slot: if the waiting agent held it, nothing else could run.
        await stack.start(new_worker(t, stack.inputs, handlers, concurrency=1))

        run = await stack.service.start_run(wf, PROMPT)
        snap = await stack.wait_waiting(run, STEP, iterations=2)
        waiting = snap.steps[STEP]
        assert waiting.wait is not None and waiting.wait.until_input
        assert waiting.wait.delay_ms == HOUR_MS
        assert waiting.wake_at_ms is not None
        assert waiting.wake_at_ms - snap.updated_at_ms > HOUR_MS - 60_000

        other = await stack.service.start_run(quick_wf, None)
        done = await stack.wait_run(other, lambda s: s.status.finished)
        assert (done.status, done.output) == (RunStatus.COMPLETED, "quick done")
        assert (await stack.service.get_run(run)).steps[STEP].status is StepStatus.WAITING

        # The engine goes away during the wait and a new one takes over.
        engine.stop()
        with trio.fail_after(WAIT_S):
            await engine.done.wait()
        await stack.start(new_engine(t, stack.inputs))

        await stack.inputs.submit(run, STEP, "follow-1", "follow_up", {"text": "are you there?"})
        await stack.wait_input(run, STEP, "follow-1", SubmissionStatus.DONE)
        snap = await stack.wait_waiting(run, STEP, iterations=4)

    report, records = await journal_audit(t, snap, STEP)
    assert report.ok, report.render()
    assert placed_ids(records) == ["follow-1"]
    assert last_state(records)[-1]["turn"]["text"].startswith("are you there?: ")


async def test_continue_until_input_raises_inputs_queued_while_inputs_are_queued(
    nats_transport: NatsTransport,
) -> None:
    t = nats_transport
    task = uid("queued")
    running = trio.Event()
    release = trio.Event()
    raised: list[str] = []
    placed: dict[int, list[str]] = {}

    async def handler(tc: TaskContext) -> None:
        await tc.journal()
        if tc.iteration == 0:
            running.set()
            await release.wait()
            try:
                await tc.continue_(wait=UntilInput())
            except InputsQueued as exc:
                raised.append(str(exc))
            placed[0] = [p.request_id for p in await tc.place_inputs("steer")]
            await tc.continue_(wait=UntilInput())  # nothing queued now: the step waits
            return
        placed[tc.iteration] = [p.request_id for p in await tc.place_inputs(Mode.STEER)]
        await tc.complete(placed[tc.iteration])

    async with open_stack(t) as stack:
        wf = await loop_workflow(stack, task)
        await stack.start(new_engine(t, stack.inputs))
        await stack.start(new_worker(t, stack.inputs, {task: handler}))
        run = await stack.service.start_run(wf, PROMPT)
        with trio.fail_after(WAIT_S):
            await running.wait()
        await stack.inputs.submit(run, STEP, "s1", "steer", 1)
        release.set()
        await stack.wait_waiting(run, STEP, iterations=1)
        assert len(raised) == 1 and "inputs are queued" in raised[0]
        assert placed == {0: ["s1"]}
        await stack.wait_input(run, STEP, "s1", SubmissionStatus.DONE)

        await stack.inputs.submit(run, STEP, "s2", "steer", 2)
        snap = await stack.wait_run(run, lambda s: s.status.finished)
    assert (snap.status, snap.output) == (RunStatus.COMPLETED, ["s2"])
    assert placed == {0: ["s1"], 1: ["s2"]}
    report, records = await journal_audit(t, snap, STEP)
    assert report.ok, report.render()
    assert placed_ids(records) == ["s1", "s2"]


async def test_the_engine_check_on_entering_the_wait_closes_the_race(
    nats_transport: NatsTransport,
) -> None:
    """The input arrives after the worker's own check, while the waiting turn is still going (its
    commit stored, its event not yet out): the engine's check as it enters the wait wakes the
    step at once. Without that check the step would wait forever (there is no time wait)."""
    t = nats_transport
    task = uid("race")
    committed = trio.Event()
    release = trio.Event()

    async def handler(tc: TaskContext) -> None:
        await tc.journal()
        if tc.iteration == 0:
            await tc.continue_(wait=UntilInput())
            return
        await tc.complete([p.request_id for p in await tc.place_inputs(Mode.STEER)])

    async with open_stack(t) as stack:
        wf = await loop_workflow(stack, task)
        await stack.start(new_engine(t, stack.inputs))
        worker = new_worker(t, stack.inputs, {task: handler}, ack_wait_s=5.0)

        async def hold_after_commit(ctx: SeamContext) -> None:
            if (ctx.seam, ctx.iteration, ctx.worker_id) == (
                Seam.AFTER_COMMIT,
                0,
                worker.worker_id,
            ):
                committed.set()
                await release.wait()

        with install_hook(hold_after_commit):
            await stack.start(worker)
        run = await stack.service.start_run(wf, PROMPT)
        with trio.fail_after(WAIT_S):
            await committed.wait()
        await stack.inputs.submit(run, STEP, "s1", "steer", "in the gap")
        release.set()
        snap = await stack.wait_run(run, lambda s: s.status.finished)

    assert (snap.status, snap.output) == (RunStatus.COMPLETED, ["s1"])
    report, records = await journal_audit(t, snap, STEP)
    assert report.ok, report.render()
    first = next(r for r in records if isinstance(r, CommitRecord))
    assert first.iteration == 0 and first.wait is not None and first.wait.until_input


async def test_a_time_with_the_input_wait_wakes_on_whichever_comes_first(
    nats_transport: NatsTransport,
) -> None:
    t = nats_transport
    task = uid("either")
    ended_at: dict[int, float] = {}
    started_at: dict[int, float] = {}

    async def handler(tc: TaskContext) -> None:
        await tc.journal()
        started_at[tc.iteration] = trio.current_time()
        placed = [p.request_id for p in await tc.place_inputs(Mode.FOLLOW_UP)]
        if tc.iteration == 0:  # nobody writes: the time wins
            await tc.continue_(wait=(UntilInput(), Delay(seconds=SHORT_DELAY_S)))
        elif tc.iteration == 1:  # an input comes long before the hour: the input wins
            await tc.continue_(placed, wait=(Delay(hours=1), UntilInput()))
        else:
            await tc.complete(placed)
            return
        ended_at[tc.iteration] = trio.current_time()

    async with open_stack(t) as stack:
        wf = await loop_workflow(stack, task)
        await stack.start(new_engine(t, stack.inputs))
        await stack.start(new_worker(t, stack.inputs, {task: handler}))
        run = await stack.service.start_run(wf, PROMPT)
        await stack.wait_waiting(run, STEP, iterations=2)
        assert started_at[1] - ended_at[0] >= SHORT_DELAY_S * 0.8
        await stack.inputs.submit(run, STEP, "f1", "follow_up", "hello")
        snap = await stack.wait_run(run, lambda s: s.status.finished)
    assert (snap.status, snap.output) == (RunStatus.COMPLETED, ["f1"])
    assert started_at[2] - ended_at[1] < 60  # woken by the input, not the hour


async def test_a_redelivered_iteration_returns_earlier_placements_once(
    nats_transport: NatsTransport,
) -> None:
    """The holder of the iteration that placed a steer dies after the tool intent; AckWait
    hands the same task to a new delivery, whose place_inputs returns the steer once more, from
    the record, and the model response is reused."""
    t = nats_transport
    task = uid("agent")
    prompts: list[History] = []
    tool_calls: list[str] = []
    tool_running = trio.Event()
    release_tool = trio.Event()
    deliveries: list[tuple[int, int]] = []
    killed: list[SeamContext] = []

    async def model(history: History) -> JsonValue:
        prompts.append(copy.deepcopy(history))
        return await agent_turn.call_model(history)

    async def tool(name: str, input: JsonValue, key: str) -> JsonValue:
        tool_calls.append(key)
        if not tool_running.is_set():
            tool_running.set()
            await release_tool.wait()
        return await agent_turn.run_tool(name, input, key)

    example = make_agent_turn(model, tool)

    async def counted(tc: TaskContext) -> None:
        deliveries.append((tc.iteration, tc.num_delivered))
        await example(tc)

    async with open_stack(t) as stack:
        wf = await loop_workflow(stack, task)
        await stack.start(new_engine(t, stack.inputs))
        worker = new_worker(t, stack.inputs, {task: counted})

        async def kill_once(ctx: SeamContext) -> None:
            if (
                ctx.seam is Seam.AFTER_TOOL_INTENT
                and ctx.iteration == 1
                and ctx.worker_id == worker.worker_id
                and not killed
            ):
                killed.append(ctx)
                raise RuntimeError("the holder dies after its tool intent")

        with install_hook(kill_once):
            await stack.start(worker)
        run = await stack.service.start_run(wf, PROMPT)
        with trio.fail_after(WAIT_S):
            await tool_running.wait()
        await stack.inputs.submit(run, STEP, "steer-1", "steer", {"text": "only direct flights"})
        release_tool.set()
        await stack.wait_input(run, STEP, "steer-1", SubmissionStatus.DONE)
        snap = await stack.wait_waiting(run, STEP, iterations=3)

    assert len(killed) == 1
    assert deliveries == [(0, 1), (1, 1), (1, 2), (2, 1)]
    assert len(prompts) == 3  # the redelivery reused the recorded model response
    # Position 0 is the model call, 1 the tool: the dead holder wrote the intent and never
    # started the tool; the redelivery ran it (a safe intent without a result runs again).
    assert tool_calls == [f"{run}.{STEP}.0.1", f"{run}.{STEP}.1.1"]
    report, records = await journal_audit(t, snap, STEP)
    assert report.ok, report.render()
    assert placed_ids(records) == ["steer-1"]
    # The redelivery's history holds the steer once, in the same place.
    iteration_1 = [r for r in records if isinstance(r, CommitRecord) and r.iteration == 1]
    assert [user_inputs(c.state) for c in iteration_1] == [["steer-1"]]


class FreezeAfterClaim(InputsService):
    """An inputs service whose holder freezes right after its KV claim, before the record (the
    process is then stopped: a crash between claim and record)."""

    def __init__(self, transport: NatsTransport) -> None:
        super().__init__(transport)
        self.claimed = trio.Event()

    async def claim(self, stored: StoredSubmission, iteration: int) -> StoredSubmission | None:
        result = await super().claim(stored, iteration)
        self.claimed.set()
        await trio.sleep_forever()
        return result


async def test_a_crash_between_claim_and_record_keeps_the_input(
    nats_transport: NatsTransport,
) -> None:
    """Worker A claims the steer and dies before recording it. Its successor runs iteration 0
    without asking for steer inputs (a handler is free to), so no delivery of iteration 0 adopts
    the claim; iteration 1 finds it claimed but unrecorded and records it. Placed once."""
    t = nats_transport
    task = uid("claim")
    may_place = trio.Event()

    async def first_build(tc: TaskContext) -> None:
        await tc.journal()
        await may_place.wait()
        await tc.place_inputs(Mode.STEER)  # freezes after the claim
        raise AssertionError("unreachable: the worker is stopped while frozen")

    async def second_build(tc: TaskContext) -> None:
        await tc.journal()
        if tc.iteration == 0:
            await tc.continue_()
            return
        placed = await tc.place_inputs(Mode.STEER)
        await tc.complete([[p.request_id, p.iteration, p.content] for p in placed])

    async with open_stack(t) as stack:
        wf = await loop_workflow(stack, task)
        await stack.start(new_engine(t, stack.inputs))
        freezing = FreezeAfterClaim(t)
        first = await stack.start(Worker(t, {task: first_build}, inputs=freezing, ack_wait_s=1.0))
        run = await stack.service.start_run(wf, PROMPT)
        await stack.inputs.submit(run, STEP, "s1", "steer", "keep me")
        may_place.set()
        with trio.fail_after(WAIT_S):
            await freezing.claimed.wait()
        first.stop()  # the process dies between the claim and the record
        with trio.fail_after(WAIT_S):
            await first.done.wait()
        claimed = await stack.inputs.get(run, STEP, "s1")
        assert (claimed.status, claimed.placed_iteration) == (SubmissionStatus.PLACED, 0)

        await stack.start(new_worker(t, stack.inputs, {task: second_build}))
        snap = await stack.wait_run(run, lambda s: s.status.finished)
        sub = await stack.wait_input(run, STEP, "s1", SubmissionStatus.DONE)

    assert (snap.status, snap.output) == (RunStatus.COMPLETED, [["s1", 1, "keep me"]])
    assert sub.placed_iteration == 1
    report, records = await journal_audit(t, snap, STEP)
    assert report.ok, report.render()
    assert placed_ids(records) == ["s1"]  # placed once, by iteration 1


async def test_place_inputs_needs_the_journal_and_a_mode(nats_transport: NatsTransport) -> None:
    t = nats_transport
    task = uid("misuse")
    errors: list[str] = []

    async def handler(tc: TaskContext) -> None:
        with pytest.raises(InputsUnavailable, match=r"call `await tc.journal\(\)` first"):
            await tc.place_inputs(Mode.STEER)
        await tc.journal()
        for bad in ("shout", 3):
            with pytest.raises(ValueError, match="mode must be a Mode or one of") as info:
                await tc.place_inputs(bad)  # type: ignore[arg-type]
            errors.append(str(info.value))
        assert await tc.place_inputs("follow_up") == []
        await tc.complete("ok")

    async with open_stack(t) as stack:
        wf = await loop_workflow(stack, task)
        await stack.start(new_engine(t, stack.inputs))
        await stack.start(new_worker(t, stack.inputs, {task: handler}))
        run = await stack.service.start_run(wf, PROMPT)
        snap = await stack.wait_run(run, lambda s: s.status.finished)
    assert (snap.status, snap.output) == (RunStatus.COMPLETED, "ok")
    assert len(errors) == 2 and "'steer', 'follow_up'" in errors[0]


def test_tool_result_shape_is_what_the_example_appends() -> None:
    """The example's history holds what a tool returned, its error and whether it was cut off."""
    history = agent_turn.append_turn(
        PROMPT, {"done": False, "tool": "x"}, ToolResult(error="boom", interrupted=True)
    )
    assert history[-1] == {"role": "tool", "output": None, "error": "boom", "interrupted": True}
    assert not agent_turn.answered(history)
    assert agent_turn.answered([*history, {"role": "assistant", "turn": {"done": True}}])
