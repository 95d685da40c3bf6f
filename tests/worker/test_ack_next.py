"""The worker's ack asks for its next task (``+NXT``), on a real nats-server, native client.

A worker busy with one task after another used to send, per task, a pull request of its loop
and, once the lifecycle event was stored, an ack: two messages, the request counted as a round
trip. The ack now carries the request for the place it frees, so the loop asks for nothing
while a request is waiting. The places still bound what is pulled: a worker at its
concurrency holds no more deliveries, and a worker that leaves leaves nothing pulled to it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import trio

from dagnats_trio.protocol import StepCompleted
from dagnats_trio.protocol.layout import TASK_STREAM, worker_durable
from dagnats_trio.transport import TrioNatsTransport, open_trio_nats_transport
from dagnats_trio.worker import TaskContext, Worker

from ._helpers import WAIT_S, make_task, publish_task, uid, wait_history

#: Tasks run one after another in the count test (the first one not counted).
SEQUENTIAL_TASKS: Final = 12
#: A lease no test waits out, so no heartbeat falls inside a counted task (one every 2.5 s).
LONG_ACK_WAIT_S: Final = 10.0
#: Poll marks out of the counted tasks (the first is written at the start).
POLL_MARK_INTERVAL_S: Final = 3600.0
#: Places of the concurrency test's worker, and tasks published at once to it.
PLACES: Final = 2
BURST_TASKS: Final = 4
#: How long the concurrency test watches that nothing more is pulled.
WATCH_S: Final = 1.5
#: Pause between two reads of a consumer's info while waiting for it to move.
INFO_POLL_S: Final = 0.02


async def _consumer(t: TrioNatsTransport, task_type: str) -> dict[str, int]:
    """The task consumer's deliveries not acked yet, messages not delivered yet, ack floor."""
    subject = f"$JS.API.CONSUMER.INFO.{TASK_STREAM}.{worker_durable(task_type)}"
    info = json.loads(await t.request(subject, b""))
    return {
        "ack_pending": int(info["num_ack_pending"]),
        "pending": int(info["num_pending"]),
        "ack_floor": int(info["ack_floor"]["stream_seq"]),
    }


async def _wait_acked(t: TrioNatsTransport, task_type: str, seq: int) -> None:
    with trio.fail_after(WAIT_S):
        while True:
            if (await _consumer(t, task_type))["ack_floor"] >= seq:
                return
            await trio.sleep(INFO_POLL_S)


@asynccontextmanager
async def _running(worker: Worker) -> AsyncIterator[None]:
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        yield
        nursery.cancel_scope.cancel()


async def test_tasks_one_after_another_cost_no_pull_request_each(
    nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    """Per task, the worker's transport counts one round trip (the lifecycle event) and its
    connection writes the event and the ack with next: 2 round trips and 3 socket writes
    before (a pull request of its own per task)."""
    t = trio_transport
    task_type = uid("t")

    async def complete(tc: TaskContext) -> None:
        await tc.complete("done")

    async with open_trio_nats_transport(nats_url, name="acknext-worker") as wt:
        worker = Worker(
            wt,
            {task_type: complete},
            ack_wait_s=LONG_ACK_WAIT_S,
            poll_mark_interval_s=POLL_MARK_INTERVAL_S,
        )
        async with _running(worker):
            tasks = [make_task(uid(), task_type=task_type) for _ in range(SEQUENTIAL_TASKS)]
            await _wait_acked(t, task_type, await publish_task(t, tasks[0]))
            trips, writes = wt.round_trips, wt.connection.stats().writes
            for task in tasks[1:]:
                await _wait_acked(t, task_type, await publish_task(t, task))
            counted = len(tasks) - 1
            trips_per_task = (wt.round_trips - trips) / counted
            writes_per_task = (wt.connection.stats().writes - writes) / counted
        for task in tasks:
            assert len(await wait_history(t, task.run_id, 1)) == 1
    print(f"per task: {trips_per_task:.2f} round trips, {writes_per_task:.2f} socket writes")
    # An idle poll (a request expired: every second while idle) may fall in on a loaded machine.
    assert 1 <= trips_per_task < 1.5
    assert 2 <= writes_per_task < 2.5


async def test_a_worker_at_its_concurrency_pulls_no_more(
    nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    """A task's ack asked for the next one (the worker had a place free then); tasks come in a
    burst; the worker takes as many as its places and the server keeps the rest until a place
    is free again."""
    t = trio_transport
    task_type = uid("t")
    release = {i: trio.Event() for i in range(BURST_TASKS + 1)}
    in_hand: list[int] = []
    most = 0
    started = trio.Event()

    async def handler(tc: TaskContext) -> None:
        nonlocal most
        n = int(tc.input)
        in_hand.append(n)
        most = max(most, len(in_hand))
        started.set()
        await release[n].wait()
        in_hand.remove(n)
        await tc.complete(n)

    async with open_trio_nats_transport(nats_url, name="acknext-places") as wt:
        worker = Worker(
            wt,
            {task_type: handler},
            concurrency=PLACES,
            ack_wait_s=LONG_ACK_WAIT_S,
            poll_mark_interval_s=POLL_MARK_INTERVAL_S,
        )
        async with _running(worker):
            first = make_task(uid(), task_type=task_type, input=0)
            seq = await publish_task(t, first)
            with trio.fail_after(WAIT_S):
                await started.wait()
            release[0].set()
            await _wait_acked(t, task_type, seq)
            burst = [make_task(uid(), task_type=task_type, input=i) for i in range(1, 5)]
            for task in burst:
                await publish_task(t, task)
            with trio.fail_after(WAIT_S):
                while True:
                    if len(in_hand) == PLACES:
                        break
                    await trio.sleep(INFO_POLL_S)
            with trio.move_on_after(WATCH_S):
                while True:
                    state = await _consumer(t, task_type)
                    assert state["ack_pending"] <= PLACES, state
                    assert len(in_hand) <= PLACES
                    await trio.sleep(INFO_POLL_S)
            state = await _consumer(t, task_type)
            print(f"at its concurrency ({PLACES}): {state}, in hand {in_hand}")
            assert state["ack_pending"] == PLACES
            assert state["pending"] == BURST_TASKS - PLACES
            for i in range(1, BURST_TASKS + 1):
                release[i].set()
            for task in burst:
                (event,) = await wait_history(t, task.run_id, 1)
                assert isinstance(event, StepCompleted) and event.output == int(task.input)
    assert most == PLACES


async def test_a_worker_that_leaves_leaves_no_task_pulled_to_it(
    nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    """The ack of a finished task asked for the next one; the worker then leaves (its
    transport stays open, as in a process that hosts more than the worker). A task stored
    next is fetched at once by whoever asks, as its first delivery: the request the ack
    carried left with the worker (before, the loop's own request outlived it and took the
    task into a dead inbox, redelivered only after the AckWait)."""
    t = trio_transport
    task_type = uid("t")

    async def complete(tc: TaskContext) -> None:
        await tc.complete("done")

    async with open_trio_nats_transport(nats_url, name="acknext-leaving") as wt:
        worker = Worker(
            wt,
            {task_type: complete},
            ack_wait_s=LONG_ACK_WAIT_S,
            poll_mark_interval_s=POLL_MARK_INTERVAL_S,
        )
        async with _running(worker):
            await _wait_acked(
                t, task_type, await publish_task(t, make_task(uid(), task_type=task_type))
            )
        task = make_task(uid(), task_type=task_type)
        seq = await publish_task(t, task)
        got = await t.fetch(TASK_STREAM, worker_durable(task_type), 1, WAIT_S)
    assert [(d.stream_seq, d.num_delivered) for d in got] == [(seq, 1)]
    await got[0].ack()
