"""Every submission reaches ``done`` or ``unanswered`` on a real nats-server: an input placed by
an iteration that then fails for good, is cancelled or times out, and the crashes between a
commit and the update of the input (the worker's marking lost, the engine killed between saving
the finished step and settling its inputs). A client long-polling the input sees the final state.
Each case runs on nats-server and again on SimTransport (real clock).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import Any, Final

import trio

from dagnats_trio.engine import Engine
from dagnats_trio.inputs import MAX_GET_WAIT_S, InputsService, Submission, SubmissionStatus
from dagnats_trio.protocol import RunStatus
from dagnats_trio.transport import Transport, TransportError
from dagnats_trio.worker import TaskContext, UntilInput
from examples import agent_turn
from examples.agent_turn import History

from ._stack import (
    ENGINE_ACK_WAIT_S,
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
PROMPT: History = [{"role": "user", "content": {"text": "plan a trip"}}]
#: The step timeout of the timeout case.
STEP_TIMEOUT: Final = "1s"
#: Bound on a long-poll's final answer: the run's end plus a redelivery to a new engine.
LONG_POLL_S: Final = WAIT_S + 4 * ENGINE_ACK_WAIT_S


class Placer:
    """A handler that places the steer inputs queued when told to, then does what the test
    says (fail for good, hang until cancelled, continue) and reports each step by events."""

    def __init__(self, then: str) -> None:
        self.then = then
        self.running = trio.Event()
        self.go = trio.Event()
        self.placed_evt = trio.Event()
        self.proceed = trio.Event()
        self.placed: list[str] = []
        self.iterations: list[int] = []

    async def __call__(self, tc: TaskContext) -> None:
        await tc.journal()
        self.iterations.append(tc.iteration)
        if tc.iteration > 0:
            await tc.fail_permanent("the second iteration fails for good")
            return
        self.running.set()
        await self.go.wait()
        self.placed = [p.request_id for p in await tc.place_inputs("steer")]
        self.placed_evt.set()
        await self.proceed.wait()
        if self.then == "fail":
            await tc.fail_permanent("the tool said no")
        elif self.then == "hang":
            await trio.sleep_forever()
        elif self.then == "continue":
            await tc.continue_()
        else:
            await tc.complete("answered")


async def long_poll(stack: Stack, run: str, rid: str, out: builtins.list[Submission]) -> None:
    """A client asking ``?wait=`` from ``placed`` until the state changes."""
    with trio.fail_after(LONG_POLL_S):
        while True:
            sub = await stack.inputs.get(
                run, STEP, rid, MAX_GET_WAIT_S, since=SubmissionStatus.PLACED
            )
            if sub.status is not SubmissionStatus.PLACED:
                out.append(sub)
                return


async def place_one_then(
    stack: Stack, handler: Placer, workflow: dict[str, Any], nursery: trio.Nursery
) -> tuple[str, builtins.list[Submission]]:
    """Start a run, place "s1" in iteration 0 and queue "q1" after it; a client long-polls "s1"."""
    await stack.workflow(workflow)
    run = await stack.service.start_run(str(workflow["name"]), PROMPT)
    with trio.fail_after(WAIT_S):
        await handler.running.wait()
    await stack.inputs.submit(run, STEP, "s1", "steer", {"text": "only trains"})
    handler.go.set()
    with trio.fail_after(WAIT_S):
        await handler.placed_evt.wait()
    assert handler.placed == ["s1"]
    assert (await stack.inputs.get(run, STEP, "s1")).status is SubmissionStatus.PLACED
    await stack.inputs.submit(run, STEP, "q1", "follow_up", {"text": "and hotels"})
    answers: builtins.list[Submission] = []
    nursery.start_soon(long_poll, stack, run, "s1", answers)
    return run, answers


async def assert_final(
    stack: Stack, run: str, expected: dict[str, tuple[SubmissionStatus, int | None]]
) -> None:
    for rid, (status, placed_iteration) in expected.items():
        sub = await stack.wait_input(run, STEP, rid, status)
        assert sub.placed_iteration == placed_iteration, rid
        assert sub.settled_at_ms is not None
    assert not await stack.inputs.has_queued(run, STEP)


def agent_workflow(task: str, **step: Any) -> dict[str, Any]:
    wf = agent_turn.workflow(uid("wf"), task)
    wf["steps"][0].update(step)  # type: ignore[index, union-attr]
    return wf


async def test_a_placed_input_of_an_iteration_that_fails_for_good_ends_unanswered(
    transport: Transport,
) -> None:
    t = transport
    task = uid("fails")
    handler = Placer("fail")
    async with open_stack(t) as stack:
        await stack.start(new_engine(t, stack.inputs))
        await stack.start(new_worker(t, stack.inputs, {task: handler}))
        async with trio.open_nursery() as clients:
            run, answers = await place_one_then(stack, handler, agent_workflow(task), clients)
            handler.proceed.set()
            snap = await stack.wait_run(run, lambda s: s.status.finished)
        assert snap.status is RunStatus.FAILED
        [answer] = answers
        assert (answer.status, answer.placed_iteration) == (SubmissionStatus.UNANSWERED, 0)
        await assert_final(
            stack,
            run,
            {"s1": (SubmissionStatus.UNANSWERED, 0), "q1": (SubmissionStatus.UNANSWERED, None)},
        )
    report, records = await journal_audit(t, snap, STEP)
    assert report.ok, report.render()
    assert placed_ids(records) == ["s1"]


async def test_a_placed_input_of_a_cancelled_run_ends_unanswered(
    transport: Transport,
) -> None:
    t = transport
    task = uid("cancelled")
    handler = Placer("hang")
    async with open_stack(t) as stack:
        await stack.start(new_engine(t, stack.inputs))
        await stack.start(new_worker(t, stack.inputs, {task: handler}))
        async with trio.open_nursery() as clients:
            run, answers = await place_one_then(stack, handler, agent_workflow(task), clients)
            handler.proceed.set()
            await stack.service.cancel_run(run, "the user left")
            snap = await stack.wait_run(run, lambda s: s.status.finished)
        assert snap.status is RunStatus.CANCELLED
        [answer] = answers
        assert (answer.status, answer.placed_iteration) == (SubmissionStatus.UNANSWERED, 0)
        await assert_final(
            stack,
            run,
            {"s1": (SubmissionStatus.UNANSWERED, 0), "q1": (SubmissionStatus.UNANSWERED, None)},
        )


async def test_a_placed_input_of_a_timed_out_step_ends_unanswered(
    transport: Transport,
) -> None:
    t = transport
    task = uid("slow")
    handler = Placer("hang")
    wf = agent_workflow(task, timeout=STEP_TIMEOUT, retry={"max_attempts": 1})
    async with open_stack(t) as stack:
        await stack.start(new_engine(t, stack.inputs))
        await stack.start(new_worker(t, stack.inputs, {task: handler}))
        async with trio.open_nursery() as clients:
            run, answers = await place_one_then(stack, handler, wf, clients)
            handler.proceed.set()
            snap = await stack.wait_run(run, lambda s: s.status.finished)
        assert snap.status is RunStatus.FAILED
        assert snap.steps[STEP].reason == "timeout"
        [answer] = answers
        assert (answer.status, answer.placed_iteration) == (SubmissionStatus.UNANSWERED, 0)
        await assert_final(
            stack,
            run,
            {"s1": (SubmissionStatus.UNANSWERED, 0), "q1": (SubmissionStatus.UNANSWERED, None)},
        )


class LosesMarking(InputsService):
    """The worker's inputs service, dying between the commit and the marking: the marking
    never reaches the store (the journal's ``on_committed`` logs the failure and goes on)."""

    def __init__(self, transport: Transport) -> None:
        super().__init__(transport)
        self.lost: list[str] = []

    async def mark_committed(
        self, run_id: str, step_id: str, request_ids: Iterable[str]
    ) -> list[Submission]:
        await trio.lowlevel.checkpoint()
        self.lost.extend(request_ids)
        raise TransportError("the process died before marking the inputs done")


async def test_a_lost_done_is_settled_from_the_journal_when_the_step_finishes(
    transport: Transport,
) -> None:
    t = transport
    task = uid("lost-done")
    handler = Placer("continue")  # iteration 0 places "s1" and commits; iteration 1 fails
    worker_inputs = LosesMarking(t)
    async with open_stack(t) as stack:
        await stack.start(new_engine(t, stack.inputs))
        await stack.start(new_worker(t, worker_inputs, {task: handler}))
        async with trio.open_nursery() as clients:
            run, answers = await place_one_then(stack, handler, agent_workflow(task), clients)
            handler.proceed.set()
            snap = await stack.wait_run(run, lambda s: s.status.finished)
        assert snap.status is RunStatus.FAILED
        assert handler.iterations == [0, 1]
        assert worker_inputs.lost == ["s1"]
        [answer] = answers
        # Its iteration committed: done, though the worker's marking never arrived.
        assert (answer.status, answer.placed_iteration) == (SubmissionStatus.DONE, 0)
        await assert_final(
            stack,
            run,
            {"s1": (SubmissionStatus.DONE, 0), "q1": (SubmissionStatus.UNANSWERED, None)},
        )


class DiesBeforeSettling:
    """The engine's inputs hooks in a process killed right after it saved the finished step and
    before it settled its inputs: the settlement never returns."""

    def __init__(self, inner: InputsService) -> None:
        self.inner = inner
        self.reached = trio.Event()

    async def has_queued(self, run_id: str, step_id: str) -> bool:
        return await self.inner.has_queued(run_id, step_id)

    async def settle_step(self, run_id: str, step_id: str) -> None:
        self.reached.set()
        await trio.sleep_forever()


async def test_an_engine_killed_between_the_commit_and_the_settlement_settles_on_redelivery(
    transport: Transport,
) -> None:
    t = transport
    task = uid("engine-dies")
    handler = Placer("complete")
    worker_inputs = LosesMarking(t)  # so only the engine's settlement can make it done
    dying = DiesBeforeSettling(stack_inputs := InputsService(t))
    async with open_stack(t) as stack:
        first = await stack.start(
            Engine(t, inputs=dying, legacy_step_events=False, ack_wait_s=ENGINE_ACK_WAIT_S)
        )
        await stack.start(new_worker(t, worker_inputs, {task: handler}))
        async with trio.open_nursery() as clients:
            run, answers = await place_one_then(stack, handler, agent_workflow(task), clients)
            handler.proceed.set()
            with trio.fail_after(WAIT_S):
                await dying.reached.wait()
            # The finished run is saved; its inputs are not settled yet.
            snap = await stack.service.get_run(run)
            assert snap.status is RunStatus.COMPLETED
            assert (await stack.inputs.get(run, STEP, "s1")).status is SubmissionStatus.PLACED
            first.stop()
            with trio.fail_after(WAIT_S):
                await first.done.wait()
            await stack.start(new_engine(t, stack_inputs))
        [answer] = answers
        assert (answer.status, answer.placed_iteration) == (SubmissionStatus.DONE, 0)
        await assert_final(
            stack,
            run,
            {"s1": (SubmissionStatus.DONE, 0), "q1": (SubmissionStatus.UNANSWERED, None)},
        )


class FailsToMarkAtFirst(InputsService):
    """The worker's inputs service, with NATS unavailable for its first two markings."""

    def __init__(self, transport: Transport) -> None:
        super().__init__(transport)
        self.failures = 0

    async def mark_done(
        self, run_id: str, step_id: str, request_ids: Iterable[str]
    ) -> list[Submission]:
        if self.failures < TRANSIENT_MARKING_FAILURES:
            self.failures += 1
            await trio.lowlevel.checkpoint()
            raise TransportError("NATS is not answering right now")
        return await super().mark_done(run_id, step_id, request_ids)


#: Markings that fail before one goes through.
TRANSIENT_MARKING_FAILURES: Final = 2


async def test_a_transient_failure_to_mark_done_does_not_wait_for_the_step_to_finish(
    transport: Transport,
) -> None:
    t = transport
    task = uid("transient")
    worker_inputs = FailsToMarkAtFirst(t)
    placed: list[str] = []

    async def handler(tc: TaskContext) -> None:
        await tc.journal()
        placed.extend(p.request_id for p in await tc.place_inputs("steer"))
        await tc.continue_(wait=UntilInput())

    async with open_stack(t) as stack:
        await stack.start(new_engine(t, stack.inputs))
        wf = agent_workflow(task)
        await stack.workflow(wf)
        run = await stack.service.start_run(str(wf["name"]), PROMPT)
        await stack.inputs.submit(run, STEP, "s1", "steer", {"text": "hello"})
        await stack.start(new_worker(t, worker_inputs, {task: handler}))
        sub = await stack.wait_input(run, STEP, "s1", SubmissionStatus.DONE)
        assert (sub.placed_iteration, placed) == (0, ["s1"])
        assert worker_inputs.failures == TRANSIENT_MARKING_FAILURES
        # Done while the step still waits for its next input: not left for the settlement.
        snap = await stack.wait_waiting(run, STEP, iterations=1)
        assert snap.status is RunStatus.RUNNING
