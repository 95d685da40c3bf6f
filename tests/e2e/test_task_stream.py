"""The task stream on a real nats-server (issue 12, fsynced writes per run): an ack removes no
task (a work queue's ack writes a tombstone the file store fsyncs), a run's tasks stay until the
run ends and then go in one purge, another run's stay; and a store whose task stream an earlier
version made a work queue is provisioned without error, keeps it, and still runs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from dagnats_trio.engine import StepStatus
from dagnats_trio.protocol import RunStatus, layout
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import (
    StreamSpec,
    TrioNatsTransport,
    open_trio_nats_transport,
    provision,
)
from dagnats_trio.worker import TaskContext

from ._stack import WAIT_S, Stack, new_engine, new_worker, open_stack, uid

#: The task stream as the version before this one provisioned it.
OLD_TASK_STREAM = StreamSpec(layout.TASK_STREAM, ("task.*.*",), work_queue=True)
#: Pause between two reads of a consumer's ack floor.
POLL_S = 0.02


@asynccontextmanager
async def store(server: NatsServer, *, old_task_stream: bool) -> AsyncIterator[TrioNatsTransport]:
    async with open_trio_nats_transport(server.url, name="task-stream") as t:
        if old_task_stream:
            await t.ensure_stream(OLD_TASK_STREAM)
        await provision(t)
        yield t


async def two_steps(stack: Stack, first: str, second: str) -> str:
    """A workflow: ``a`` (task type ``first``), then ``b`` (``second``) on a's output."""

    return await stack.workflow(
        {
            "name": uid("wf"),
            "steps": [
                {"id": "a", "task": first},
                {"id": "b", "task": second, "depends_on": ["a"]},
            ],
        }
    )


async def echo(tc: TaskContext) -> None:
    await tc.complete({"seen": tc.input})


async def task_seq(t: TrioNatsTransport, task_type: str, run: str) -> int | None:
    msg = await t.get_last_msg(layout.TASK_STREAM, layout.task_subject(task_type, run))
    return None if msg is None else msg.seq


async def wait_acked(t: TrioNatsTransport, task_type: str, seq: int) -> None:
    """Until the consumer of ``task_type`` has acked everything up to ``seq``."""
    info = f"$JS.API.CONSUMER.INFO.{layout.TASK_STREAM}.{layout.worker_durable(task_type)}"
    with trio.fail_after(WAIT_S):
        while True:
            answer: dict[str, Any] = json.loads(await t.request(info, b""))
            if answer.get("ack_floor", {}).get("stream_seq", 0) >= seq:
                return
            await trio.sleep(POLL_S)


async def wait_gone(t: TrioNatsTransport, run: str, *task_types: str) -> None:
    """Until the task stream holds no task of ``run`` of these types."""
    with trio.fail_after(WAIT_S):
        while True:
            if all([await task_seq(t, task_type, run) is None for task_type in task_types]):
                return
            await trio.sleep(POLL_S)


def retention(info: dict[str, Any]) -> str:
    return str(info["config"]["retention"])


async def test_acked_tasks_stay_until_their_run_ends_then_go_in_one_purge(
    fresh_nats_server: NatsServer,
) -> None:
    first, second, idle = uid("ta"), uid("tb"), uid("idle")
    async with store(fresh_nats_server, old_task_stream=False) as t, open_stack(t) as stack:
        assert retention(await t.stream_info(layout.TASK_STREAM)) == "limits"
        wf = await two_steps(stack, first, second)
        stalled = await two_steps(stack, idle, second)  # no worker ever serves `idle`
        await stack.start(new_engine(t, stack.inputs))
        await stack.start(new_worker(t, stack.inputs, {first: echo}))
        run = await stack.service.start_run(wf, 1)
        other = await stack.service.start_run(stalled, 2)
        await stack.wait_run(run, lambda s: s.steps["b"].status is StepStatus.RUNNING)
        a_seq = await task_seq(t, first, run)
        assert a_seq is not None
        await wait_acked(t, first, a_seq)
        # Acked, and still stored: the ack wrote nothing.
        assert await task_seq(t, first, run) == a_seq
        await stack.start(new_worker(t, stack.inputs, {second: echo}))
        snap = await stack.wait_run(run, lambda s: s.status.finished)
        assert snap.status is RunStatus.COMPLETED
        assert snap.output == {"seen": {"seen": 1}}
        # The run's end removed its tasks, of both types; the running run keeps its own.
        await wait_gone(t, run, first, second)
        assert await task_seq(t, idle, other) is not None
        running = await stack.service.get_run(other)
        assert running.status is RunStatus.RUNNING


async def test_a_store_whose_task_stream_is_a_work_queue_keeps_it_and_runs(
    fresh_nats_server: NatsServer,
) -> None:
    first, second = uid("ta"), uid("tb")
    async with store(fresh_nats_server, old_task_stream=True) as t, open_stack(t) as stack:
        await provision(t)  # a second start provisions again
        assert retention(await t.stream_info(layout.TASK_STREAM)) == "workqueue"
        wf = await two_steps(stack, first, second)
        await stack.start(new_engine(t, stack.inputs))
        await stack.start(new_worker(t, stack.inputs, {first: echo, second: echo}))
        run = await stack.service.start_run(wf, 7)
        snap = await stack.wait_run(run, lambda s: s.status.finished)
        assert snap.status is RunStatus.COMPLETED
        assert snap.output == {"seen": {"seen": 7}}
        # A work queue's acks removed each task (the run's end purge found nothing left).
        await wait_gone(t, run, first, second)
