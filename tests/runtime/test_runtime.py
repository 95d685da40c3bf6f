"""The public embedding runtime on a real nats-server: runs started through the client, results
through one shared watch, cancel, inputs, the journal iterator, plain model and tool functions."""

from __future__ import annotations

import logging
import secrets
import time

import pytest
import trio

from dagnats_trio import (
    Replay,
    RunFailed,
    RunNotFound,
    TaskContext,
    ToolCall,
    open_runtime,
)
from dagnats_trio.api.service import RunWaitTimeout
from dagnats_trio.inputs import Mode, SubmissionStatus
from dagnats_trio.journal import NextTool
from dagnats_trio.protocol import (
    ClaimRecord,
    CommitRecord,
    ModelRecord,
    RunStatus,
    ToolIntentRecord,
    ToolResultRecord,
)

#: Generous: the machine is shared by several test runs.
WAIT_S = 60.0
#: Runs waited on at once in the shared-watch test.
CONCURRENT_RUNS = 50


def uid(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def one_step(name: str, task: str, *, loop: bool = False) -> dict[str, object]:
    step: dict[str, object] = {"id": "s", "task": task}
    if loop:
        step |= {"type": "agent_loop", "agent_loop": {"max_iterations": 10}}
    return {"name": name, "steps": [step]}


async def test_fifty_results_share_one_watch(nats_url: str) -> None:
    task, wf = uid("echo"), uid("wf")

    async def echo(tc: TaskContext) -> None:
        await tc.complete({"echo": tc.input})

    async with open_runtime({task: echo}, nats_urls=[nats_url]) as rt:
        await rt.client.register_workflow(one_step(wf, task))
        results: dict[int, object] = {}

        async def start_and_wait(i: int) -> None:
            handle = await rt.client.start_run(wf, {"n": i})
            results[i] = await handle.result(timeout_s=WAIT_S)

        began = time.monotonic()
        async with trio.open_nursery() as nursery:
            for i in range(CONCURRENT_RUNS):
                nursery.start_soon(start_and_wait, i)
        took = time.monotonic() - began
        opened = rt.watch.watches_opened
        print(f"{CONCURRENT_RUNS} results in {took:.2f} s; watches opened: {opened}")
        assert results == {i: {"echo": {"n": i}} for i in range(CONCURRENT_RUNS)}
        assert rt.watch.watches_opened == 1
        with pytest.raises(RunNotFound):
            await rt.client.get_run("no-such-run")
        with pytest.raises(RunNotFound):
            await rt.client.wait("no-such-run", WAIT_S)


async def test_failed_and_cancelled_runs_raise_run_failed(nats_url: str) -> None:
    fail_task, block_task, wf_fail, wf_block = uid("fail"), uid("block"), uid("wf"), uid("wf")
    started = trio.Event()

    async def fail(tc: TaskContext) -> None:
        await tc.fail_permanent(ValueError("no such city"))

    async def block(tc: TaskContext) -> None:
        started.set()
        await trio.sleep_forever()

    async with open_runtime({fail_task: fail, block_task: block}, nats_urls=[nats_url]) as rt:
        await rt.client.register_workflow(one_step(wf_fail, fail_task))
        await rt.client.register_workflow(one_step(wf_block, block_task))
        failing = await rt.client.start_run(wf_fail, None)
        with pytest.raises(RunFailed) as info:
            await failing.result(timeout_s=WAIT_S)
        assert info.value.snapshot.status is RunStatus.FAILED
        assert "no such city" in str(info.value)

        blocked = await rt.client.start_run(wf_block, None)
        with trio.fail_after(WAIT_S):
            await started.wait()
        with pytest.raises(RunWaitTimeout):
            await blocked.result(timeout_s=0.2)
        await blocked.cancel("not needed")
        with pytest.raises(RunFailed) as info:
            await blocked.result(timeout_s=WAIT_S)
        assert info.value.snapshot.status is RunStatus.CANCELLED


async def test_inputs_send_get_withdraw_through_the_handle(nats_url: str) -> None:
    task, wf = uid("loop"), uid("wf")
    running, release = trio.Event(), trio.Event()

    async def hold(tc: TaskContext) -> None:
        running.set()
        await release.wait()
        await tc.complete("done")

    async with open_runtime({task: hold}, nats_urls=[nats_url]) as rt:
        await rt.client.register_workflow(one_step(wf, task, loop=True))
        run = await rt.client.start_run(wf, None)
        with trio.fail_after(WAIT_S):
            await running.wait()
        sub = await run.send_input("s", {"text": "hi"}, mode=Mode.STEER, request_id="in-1")
        assert sub.status is SubmissionStatus.QUEUED
        assert (await run.get_input("s", "in-1")).content == {"text": "hi"}
        withdrawn = await run.withdraw_input("s", "in-1")
        assert withdrawn.status is SubmissionStatus.WITHDRAWN
        assert (await run.get_input("s", "in-1")).status is SubmissionStatus.WITHDRAWN
        release.set()
        assert await run.result(timeout_s=WAIT_S) == "done"


@pytest.mark.parametrize("paired", [False, True], ids=["alone", "paired"])
async def test_plain_functions_as_model_and_tool_and_the_journal_iterator(
    nats_url: str, paired: bool
) -> None:
    """The journal iterator gives every record, in order; paired, the model response and the
    tool intent are one message and share its sequence."""
    task, wf = uid("agent"), uid("wf")

    def model() -> dict[str, str]:  # a plain function, not a coroutine function
        return {"say": "hello"}

    def send(call: ToolCall) -> dict[str, object]:
        return {"sent": call.input}

    async def agent(tc: TaskContext) -> None:
        j = await tc.journal()
        if paired:
            reply = await j.model(
                model, then_tool=lambda r: NextTool(ToolCall("send", r), Replay.UNSAFE)
            )
        else:
            reply = await j.model(model)
        result = await j.tool(ToolCall("send", reply), Replay.UNSAFE, send)
        await tc.complete(result.output)

    async with open_runtime({task: agent}, nats_urls=[nats_url]) as rt:
        await rt.client.register_workflow(one_step(wf, task))
        run = await rt.client.start_run(wf, None)
        snap = await run.wait(timeout_s=WAIT_S)
        assert snap.status is RunStatus.COMPLETED, snap.error
        assert snap.steps["s"].output == {"sent": {"say": "hello"}}
        records = [e.record async for e in run.journal("s")]
        kinds = [type(r) for r in records]
        assert ModelRecord in kinds and ToolIntentRecord in kinds and ToolResultRecord in kinds
        model_rec = next(r for r in records if isinstance(r, ModelRecord))
        assert model_rec.response == {"say": "hello"}
        seqs = [e.seq async for e in run.journal("s", follow=False)]
        assert seqs == sorted(seqs) and len(seqs) == len(records)
        assert [type(r) for r in records] == [ClaimRecord, ModelRecord, ToolIntentRecord,
                                              ToolResultRecord, CommitRecord]  # fmt: skip
        assert (seqs[1] == seqs[2]) is paired and len(set(seqs)) == 5 - paired


async def test_embedded_server_runtime_starts_and_stops() -> None:
    task, wf = uid("echo"), uid("wf")

    async def echo(tc: TaskContext) -> None:
        await tc.complete(tc.input)

    async with open_runtime({task: echo}) as rt:
        assert rt.info.server is not None and rt.info.nats_urls == (rt.info.server.url,)
        await rt.client.register_workflow(one_step(wf, task))
        run = await rt.client.start_run(wf, 7)
        assert await run.result(timeout_s=WAIT_S) == 7
        assert [w.name for w in await rt.client.list_workflows()] == [wf]


async def test_a_handler_failure_is_logged_with_its_traceback_and_kept_on_the_run(
    nats_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    task, wf = uid("boom"), uid("wf")

    def parse(text: str) -> int:
        return int(text)

    async def boom(tc: TaskContext) -> None:
        await tc.complete(parse("not a number"))

    caplog.set_level(logging.INFO)
    async with open_runtime({task: boom}, nats_urls=[nats_url]) as rt:
        await rt.client.register_workflow(one_step(wf, task))
        run = await rt.client.start_run(wf, None)
        with pytest.raises(RunFailed) as info:
            await run.result(timeout_s=WAIT_S)
    snap = info.value.snapshot
    assert snap.failed_step == "s" and snap.error is not None and "not a number" in snap.error
    failures = [
        r for r in caplog.records if r.levelno == logging.WARNING and run.run_id in r.getMessage()
    ]
    assert failures, [r.getMessage() for r in caplog.records]
    assert failures[0].exc_info is not None and failures[0].exc_info[0] is ValueError
    assert "in parse" in caplog.text  # the handler's own frames, not only the message
    # the engine says nothing about legacy step events: every event here has its identity
    assert not [r for r in caplog.records if "legacy_step_events" in r.getMessage()]
