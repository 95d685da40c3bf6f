"""A worker process SIGKILLed around its ack with next (``+NXT``), on a real nats-server.

The ack of a finished task asks for the next one in the same frame (worker/_worker.py), so a
task can be pulled to a worker by an ack, with no pull request of its loop. A real worker process
(tests/worker/_ack_next_victim.py: two places, the default AckWait) finishes a first task, whose
ack carries a request; while that request and the loop's own request for the other place are
pending on the server, two more tasks are published, then:

- ``in_handler``: the process dies (SIGKILL) the moment either of them reaches its handler,
  before any claim; what reached it (one by the ack's request, or both) was pulled to a dead
  process and must come back after AckWait to a successor;
- ``before``: the test SIGKILLs the process before the two tasks are published, with its two
  requests not expired: the server may hand them to the dead process's inbox.

Either way each task is completed once, by the successor, and the first task (completed by the
killed process) never runs again.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest
import trio

from dagnats_trio.protocol import StepCompleted
from dagnats_trio.protocol.layout import TASK_STREAM, worker_durable
from dagnats_trio.transport import CoreMsg, TrioNatsTransport
from dagnats_trio.worker import DEFAULT_ACK_WAIT_S, TaskContext, Worker

from ._ack_next_victim import DIE, HOLD, PLACES, READY_LINE, go_subject, started_subject
from ._helpers import make_task, publish_task, uid, wait_history

VICTIM: Final = Path(__file__).with_name("_ack_next_victim.py")
#: Bound on the worker process starting (a Python start on a loaded machine).
PROCESS_START_S: Final = 60.0
#: Bound on every other wait: generous for a loaded machine, yet the task must come back long
#: before the 30 s a lost task would need to reach the top of the redelivery backoff.
WAIT_S: Final = 20.0
#: Pause between two reads of the consumer's info while waiting for it to settle.
INFO_POLL_S: Final = 0.05


async def _read_ready(proc: trio.Process) -> None:
    assert proc.stdout is not None
    seen = b""
    while READY_LINE.encode() not in seen:
        chunk = await proc.stdout.receive_some()
        assert chunk, f"the worker process exited before it was ready: {seen!r}"
        seen += chunk


async def _collect(sub: AsyncIterator[CoreMsg], into: list[bytes], first: trio.Event) -> None:
    async for msg in sub:
        into.append(msg.data)
        first.set()


async def _consumer(t: TrioNatsTransport, task_type: str) -> dict[str, int]:
    subject = f"$JS.API.CONSUMER.INFO.{TASK_STREAM}.{worker_durable(task_type)}"
    info = json.loads(await t.request(subject, b""))
    return {"ack_pending": int(info["num_ack_pending"]), "pending": int(info["num_pending"])}


async def _wait_settled(t: TrioNatsTransport, task_type: str) -> None:
    """Until the consumer has nothing pending nor unacked (bounded)."""
    with trio.fail_after(WAIT_S):
        while True:
            if await _consumer(t, task_type) == {"ack_pending": 0, "pending": 0}:
                return
            await trio.sleep(INFO_POLL_S)


@pytest.mark.parametrize("case", ["in_handler", "before"])
async def test_tasks_pulled_by_the_ack_of_a_killed_worker_run_once(
    case: str, nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    t = trio_transport
    task_type = uid("ackkill")
    durable = worker_durable(task_type)
    first = make_task(uid(), task_type=task_type, input=HOLD)
    later = [make_task(uid(), task_type=task_type, input=DIE) for _ in range(PLACES)]
    acks: list[bytes] = []
    acked = trio.Event()
    successor_deliveries: list[tuple[str, int]] = []

    async def successor_handler(tc: TaskContext) -> None:
        successor_deliveries.append((tc.run_id, tc.num_delivered))
        await tc.complete({"pid": os.getpid(), "delivered": tc.num_delivered})

    async with (
        trio.open_nursery() as nursery,
        t.subscribe(f"$JS.ACK.{TASK_STREAM}.{durable}.>") as ack_sub,
        t.subscribe(started_subject(first.run_id)) as started,
    ):
        nursery.start_soon(_collect, ack_sub, acks, acked)
        argv = [sys.executable, str(VICTIM), nats_url, task_type]
        process = functools.partial(trio.run_process, argv, stdout=subprocess.PIPE, check=False)
        proc: trio.Process = await nursery.start(process)
        try:
            with trio.fail_after(PROCESS_START_S):
                await _read_ready(proc)
            await publish_task(t, first)
            with trio.fail_after(WAIT_S):
                async for msg in started:
                    assert int(msg.data) == proc.pid
                    break
            await t.core_publish(go_subject(first.run_id), b"")
            with trio.fail_after(WAIT_S):  # the first task's ack, carrying a request
                await acked.wait()
            if case == "before":
                proc.send_signal(signal.SIGKILL)
            for task in later:
                await publish_task(t, task)
            with trio.fail_after(WAIT_S):
                assert await proc.wait() == -signal.SIGKILL
            killed_at = trio.current_time()
        finally:
            if proc.returncode is None:
                proc.kill()
        victim_acks = list(acks)

        successor = Worker(t, {task_type: successor_handler}, concurrency=1)
        assert successor.ack_wait_s == DEFAULT_ACK_WAIT_S
        await nursery.start(successor.run)
        later_events = [await wait_history(t, task.run_id, 1) for task in later]
        took_s = trio.current_time() - killed_at
        await _wait_settled(t, task_type)
        nursery.cancel_scope.cancel()

    first_events = await wait_history(t, first.run_id, 1)
    redelivered = sum(1 for _, n in successor_deliveries if n > 1)
    print(
        f"{case}: {len(later)} tasks completed by the successor within {took_s:.3f} s of the "
        f"kill (AckWait {DEFAULT_ACK_WAIT_S} s); {redelivered} of them had reached the killed "
        f"process; its acks {[a[:4] for a in victim_acks]}"
    )
    # The first task: completed once, by the killed process, never delivered again; its ack
    # carried a request for one task.
    (first_event,) = first_events
    assert isinstance(first_event, StepCompleted) and first_event.dispatch == first.dispatch
    assert first_event.output == {"pid": proc.pid, "delivered": 1}
    ((kind, request),) = [a.split(b" ", 1) for a in victim_acks]
    assert kind == b"+NXT" and json.loads(request)["batch"] == 1
    # The later tasks: each completed once, by the successor.
    assert sorted(r for r, _ in successor_deliveries) == sorted(task.run_id for task in later)
    delivered = dict(successor_deliveries)
    for task, events in zip(later, later_events, strict=True):
        (event,) = events
        assert isinstance(event, StepCompleted) and event.dispatch == task.dispatch
        assert event.output == {"pid": os.getpid(), "delivered": delivered[task.run_id]}
    if case == "in_handler":
        assert redelivered >= 1  # the process died in the handler of one it was handed
