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

import json
import os
import signal

import pytest
import trio

from dagnats_trio.protocol import StepCompleted
from dagnats_trio.transport import CoreMsg, TrioNatsTransport
from dagnats_trio.worker import DEFAULT_ACK_WAIT_S, TaskContext, Worker

from ._ack_next import (
    WAIT_S,
    ack_subjects,
    collect_acks,
    finish_first_task,
    start_victim,
    wait_settled,
)
from ._ack_next_victim import DIE, HOLD, PLACES
from ._helpers import make_task, publish_task, uid, wait_history


@pytest.mark.parametrize("case", ["in_handler", "before"])
async def test_tasks_pulled_by_the_ack_of_a_killed_worker_run_once(
    case: str, nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    t = trio_transport
    task_type = uid("ackkill")
    first = make_task(uid(), task_type=task_type, input=HOLD)
    later = [make_task(uid(), task_type=task_type, input=DIE) for _ in range(PLACES)]
    acks: list[CoreMsg] = []
    acked = trio.Event()
    successor_deliveries: list[tuple[str, int]] = []

    async def successor_handler(tc: TaskContext) -> None:
        successor_deliveries.append((tc.run_id, tc.num_delivered))
        await tc.complete({"pid": os.getpid(), "delivered": tc.num_delivered})

    async with (
        trio.open_nursery() as nursery,
        t.subscribe(ack_subjects(task_type)) as ack_sub,
    ):
        nursery.start_soon(collect_acks, ack_sub, acks, acked)
        proc = await start_victim(nursery, nats_url, task_type)
        try:
            await finish_first_task(t, proc, first, acked)
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
        victim_acks = [a.data for a in acks]

        successor = Worker(t, {task_type: successor_handler}, concurrency=1)
        assert successor.ack_wait_s == DEFAULT_ACK_WAIT_S
        await nursery.start(successor.run)
        later_events = [await wait_history(t, task.run_id, 1) for task in later]
        took_s = trio.current_time() - killed_at
        await wait_settled(t, task_type)
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
