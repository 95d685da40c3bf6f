"""A worker process SIGSTOPped holding tasks its ack with next (``+NXT``) pulled, on a real
nats-server.

A real worker process (tests/worker/_ack_next_victim.py: two places, the default AckWait)
finishes a first task, whose ack asks for the next one; two more tasks are published, one for
that request and one for the loop's request for the other place. Each is claimed in its
journal and enters an unsafe tool, and there the process is stopped (SIGSTOP): it holds both
deliveries and beats for neither. A worker in this process (the successor) gets both after the
AckWait, finds each tool's intent without a result, records the call interrupted (the tool is
not started again) and completes the step.

Then the stopped process is resumed (SIGCONT) and its tools return: every write it then tries
is fenced by the successor's claim, so nothing it writes is stored (each journal and each
history as they were) and no step completes twice; ``journal check`` passes on both.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator

import trio

from dagnats_trio.journal import Replay, ToolCall, check, read_journal
from dagnats_trio.protocol import (
    ClaimRecord,
    StepCompleted,
    ToolIntentRecord,
    ToolResultRecord,
)
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
from ._ack_next_victim import (
    HOLD,
    PLACES,
    STOP,
    TOOL_NAME,
    ended_subject,
    in_tool_subject,
    release_subject,
)
from ._helpers import history, make_task, publish_task, uid, wait_history


async def _gather(sub: AsyncIterator[CoreMsg], runs: set[str], into: dict[str, bytes]) -> None:
    """Until each of ``runs`` has said something on ``sub`` (bounded): its first word, by run.
    The run is the subject's second token (``ackkill.{run}.{what}``)."""
    with trio.fail_after(WAIT_S):
        async for msg in sub:
            run_id = msg.subject.split(".")[1]
            if run_id in runs:
                into.setdefault(run_id, msg.data)
            if runs <= into.keys():
                return


async def test_tasks_pulled_by_the_ack_of_a_stopped_worker_complete_once_and_it_is_fenced(
    nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    t = trio_transport
    task_type = uid("ackstop")
    first = make_task(uid(), task_type=task_type, input=HOLD)
    later = [make_task(uid(), task_type=task_type, input=STOP) for _ in range(PLACES)]
    runs = {task.run_id for task in later}
    acks: list[CoreMsg] = []
    acked = trio.Event()
    successor_deliveries: list[tuple[str, int]] = []
    successor_tool_starts: list[str] = []

    async def successor_handler(tc: TaskContext) -> None:
        successor_deliveries.append((tc.run_id, tc.num_delivered))
        j = await tc.journal()

        async def send(call: ToolCall) -> str:
            successor_tool_starts.append(tc.run_id)
            return "sent"

        result = await j.tool(ToolCall(TOOL_NAME, tc.run_id), Replay.UNSAFE, send)
        await tc.complete({"pid": os.getpid(), "interrupted": result.interrupted})

    in_tool: dict[str, bytes] = {}
    ended: dict[str, bytes] = {}
    async with (
        trio.open_nursery() as nursery,
        t.subscribe(ack_subjects(task_type)) as ack_sub,
        t.subscribe(in_tool_subject("*")) as in_tool_sub,
        t.subscribe(ended_subject("*")) as ended_sub,
    ):
        nursery.start_soon(collect_acks, ack_sub, acks, acked)
        proc = await start_victim(nursery, nats_url, task_type)
        try:
            await finish_first_task(t, proc, first, acked)
            for task in later:
                await publish_task(t, task)
            await _gather(in_tool_sub, runs, in_tool)  # both claimed, both inside the tool
            proc.send_signal(signal.SIGSTOP)
            stopped_at = trio.current_time()
            victim_acks = [a.data for a in acks]

            successor = Worker(t, {task_type: successor_handler}, concurrency=PLACES)
            assert successor.ack_wait_s == DEFAULT_ACK_WAIT_S
            await nursery.start(successor.run)
            events = {task.run_id: await wait_history(t, task.run_id, 1) for task in later}
            took_s = trio.current_time() - stopped_at
            journals = {run_id: await read_journal(t, run_id, "agent") for run_id in runs}

            proc.send_signal(signal.SIGCONT)
            for run_id in runs:
                await t.core_publish(release_subject(run_id), b"")
            await _gather(ended_sub, runs, ended)  # each zombie handler has ended
            journals_after = {run_id: await read_journal(t, run_id, "agent") for run_id in runs}
            events_after = {run_id: await history(t, run_id) for run_id in runs}
            await wait_settled(t, task_type)
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
        nursery.cancel_scope.cancel()

    print(
        f"{len(later)} tasks held by the stopped process completed by the successor within "
        f"{took_s:.3f} s of the stop (AckWait {DEFAULT_ACK_WAIT_S} s); the resumed process's "
        f"handlers ended with {sorted(ended.values())}"
    )
    # The first task: completed once, by the process; its ack asked for the next task.
    (first_event,) = await wait_history(t, first.run_id, 1)
    assert isinstance(first_event, StepCompleted) and first_event.dispatch == first.dispatch
    assert first_event.output == {"pid": proc.pid, "delivered": 1}
    ((kind, request),) = [a.split(b" ", 1) for a in victim_acks]
    assert kind == b"+NXT" and json.loads(request)["batch"] == 1
    # Both later tasks reached the process, which started each one's unsafe tool.
    assert in_tool == {run_id: str(proc.pid).encode() for run_id in runs}
    # The successor had each once, on its redelivery, and started no tool again.
    assert sorted(successor_deliveries) == sorted((run_id, 2) for run_id in runs)
    assert successor_tool_starts == []
    for task in later:
        (event,) = events[task.run_id]
        assert isinstance(event, StepCompleted) and event.dispatch == task.dispatch
        assert event.output == {"pid": os.getpid(), "interrupted": True}
        records = [record for _, record in journals[task.run_id]]
        claims = [r.claim_id for r in records if isinstance(r, ClaimRecord)]
        assert len(claims) == 2 and claims[0] != claims[1]  # the process's, the successor's
        (intent,) = [r for r in records if isinstance(r, ToolIntentRecord)]
        assert (intent.name, intent.claim_id) == (TOOL_NAME, claims[0])
        (result,) = [r for r in records if isinstance(r, ToolResultRecord)]
        assert result.interrupted and result.claim_id == claims[1]
        assert check(journals[task.run_id], engine_iterations=1).ok
    # The resumed process was fenced: it stored nothing, in the journals or the histories.
    assert ended == {run_id: b"Fenced" for run_id in runs}
    assert journals_after == journals
    assert events_after == events
