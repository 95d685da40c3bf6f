"""A tiny fake worker and helpers for engine tests on a real server (the real SDK is tested by its
own suite): it pulls task messages from TASK_QUEUES and publishes the lifecycle event a script
returns."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from dagnats_trio.api import RunNotFound, Service
from dagnats_trio.engine import Engine, RunSnapshot, decode_snapshot
from dagnats_trio.protocol import (
    LifecycleEvent,
    StepCompleted,
    TaskMessage,
    decode_task,
    encode_event,
    layout,
)
from dagnats_trio.transport import ConsumerConfig, Transport

#: AckWait of the fake worker's consumer and of test engines: short, so redeliveries are quick.
TEST_ACK_WAIT_S = 2.0
#: One fetch of the fake worker waits this long at most.
WORKER_FETCH_WAIT_S = 0.2
#: Bound on any single end-to-end test step.
RUN_TIMEOUT_S = 20.0

Script = Callable[[TaskMessage], Awaitable[LifecycleEvent | None]]


def uid(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


async def complete_with(task: TaskMessage, output: Any) -> LifecycleEvent:
    return StepCompleted(task.run_id, task.step_id, task.dispatch, output=output)


class FakeWorker:
    """Runs ``script`` for every task of ``task_type``; None from the script means: say
    nothing (a stuck or crashed handler), but still take the task off the queue."""

    def __init__(self, transport: Transport, task_type: str, script: Script) -> None:
        self.transport = transport
        self.task_type = task_type
        self.script = script
        self.seen: list[TaskMessage] = []

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        durable = layout.worker_durable(self.task_type)
        await self.transport.ensure_consumer(
            ConsumerConfig(
                stream=layout.TASK_STREAM,
                durable=durable,
                filter_subject=layout.task_filter(self.task_type),
                ack_wait_s=TEST_ACK_WAIT_S,
            )
        )
        task_status.started()
        while True:
            deliveries = await self.transport.fetch(
                layout.TASK_STREAM, durable, 16, WORKER_FETCH_WAIT_S
            )
            for d in deliveries:
                task = decode_task(d.data)
                self.seen.append(task)
                event = await self.script(task)
                if event is not None:
                    await self.transport.publish(
                        layout.history_subject(task.run_id), encode_event(event)
                    )
                await d.ack()


def test_engine(transport: Transport, **kwargs: Any) -> Engine:
    kwargs.setdefault("ack_wait_s", TEST_ACK_WAIT_S)
    kwargs.setdefault("timer_ack_wait_s", TEST_ACK_WAIT_S)
    kwargs.setdefault("fetch_wait_s", 0.2)
    kwargs.setdefault("legacy_step_events", False)
    return Engine(transport, **kwargs)


test_engine.__test__ = False  # type: ignore[attr-defined]


@asynccontextmanager
async def running(*parts: Any) -> AsyncIterator[trio.Nursery]:
    """Start each part (``await nursery.start(part.run)``) and cancel them all on exit."""
    async with trio.open_nursery() as nursery:
        for part in parts:
            await nursery.start(part.run)
        yield nursery
        nursery.cancel_scope.cancel()


async def wait_until(
    service: Service, run_id: str, pred: Callable[[RunSnapshot], bool], timeout_s: float = 10.0
) -> RunSnapshot:
    """Watch the run's snapshot until ``pred`` holds (the run may not exist yet)."""
    key = layout.run_key(run_id)
    with trio.fail_after(timeout_s):
        async with service.transport.kv_watch(layout.RUNS_BUCKET, key) as changes:
            try:
                snap = await service.get_run(run_id)
                if pred(snap):
                    return snap
            except RunNotFound:
                pass
            async for entry in changes:
                if entry.key == key and entry.value is not None:
                    snap = decode_snapshot(entry.value)
                    if pred(snap):
                        return snap
    raise AssertionError("unreachable: the watch ended")
