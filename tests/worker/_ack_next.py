"""The test side of the ack-with-next victim (``_ack_next_victim.py``): its start, the acks on
its consumer, and the consumer settling. Shared by the kill and the stop tests."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import trio

from dagnats_trio.protocol import TaskMessage
from dagnats_trio.protocol.layout import TASK_STREAM, worker_durable
from dagnats_trio.transport import CoreMsg, TrioNatsTransport

from ._ack_next_victim import READY_LINE, go_subject, started_subject
from ._helpers import publish_task

VICTIM: Final = Path(__file__).with_name("_ack_next_victim.py")

#: Bound on the worker process starting (a Python start on a loaded machine).
PROCESS_START_S: Final = 60.0
#: Bound on every other wait: generous for a loaded machine, yet the task must come back long
#: before the 30 s a lost task would need to reach the top of the redelivery backoff.
WAIT_S: Final = 20.0
#: Pause between two reads of the consumer's info while waiting for it to settle.
INFO_POLL_S: Final = 0.05
#: What a heartbeat publishes to a delivery's ack subject: it restarts the AckWait and
#: settles nothing.
IN_PROGRESS: Final = b"+WPI"


async def start_victim(nursery: trio.Nursery, nats_url: str, task_type: str) -> trio.Process:
    """The victim process, started in ``nursery`` and pulling tasks of ``task_type``."""
    argv = [sys.executable, str(VICTIM), nats_url, task_type]
    process = functools.partial(trio.run_process, argv, stdout=subprocess.PIPE, check=False)
    proc: trio.Process = await nursery.start(process)
    with trio.fail_after(PROCESS_START_S):
        await _read_ready(proc)
    return proc


async def _read_ready(proc: trio.Process) -> None:
    assert proc.stdout is not None
    seen = b""
    while READY_LINE.encode() not in seen:
        chunk = await proc.stdout.receive_some()
        assert chunk, f"the worker process exited before it was ready: {seen!r}"
        seen += chunk


async def finish_first_task(
    t: TrioNatsTransport, proc: trio.Process, first: TaskMessage, acked: trio.Event
) -> None:
    """Hand the victim ``first`` (a ``"hold"`` task), let it complete, and wait for its ack (the
    first settlement :func:`collect_acks` sees, which sets ``acked``): with the victim's other
    place asked for by its loop, that ack asks for the next task (``+NXT``)."""
    async with t.subscribe(started_subject(first.run_id)) as started:
        await publish_task(t, first)
        with trio.fail_after(WAIT_S):
            async for msg in started:
                assert int(msg.data) == proc.pid
                break
    await t.core_publish(go_subject(first.run_id), b"")
    with trio.fail_after(WAIT_S):
        await acked.wait()


async def collect_acks(sub: AsyncIterator[CoreMsg], into: list[CoreMsg], first: trio.Event) -> None:
    """Every settlement published on the consumer's ack subjects into ``into``, ``first`` set at
    the first. Heartbeats are left out: one comes every 0.2 s (at the default lease) while a task
    is held, so on a loaded machine one can come before the ack a test waits for."""
    async for msg in sub:
        if msg.data != IN_PROGRESS:
            into.append(msg)
            first.set()


def ack_subjects(task_type: str) -> str:
    """Every ack subject of the consumer of ``task_type``."""
    return f"$JS.ACK.{TASK_STREAM}.{worker_durable(task_type)}.>"


async def consumer_counts(t: TrioNatsTransport, task_type: str) -> dict[str, int]:
    subject = f"$JS.API.CONSUMER.INFO.{TASK_STREAM}.{worker_durable(task_type)}"
    info = json.loads(await t.request(subject, b""))
    return {"ack_pending": int(info["num_ack_pending"]), "pending": int(info["num_pending"])}


async def wait_settled(t: TrioNatsTransport, task_type: str) -> None:
    """Until the consumer has nothing pending nor unacked (bounded)."""
    with trio.fail_after(WAIT_S):
        while True:
            if await consumer_counts(t, task_type) == {"ack_pending": 0, "pending": 0}:
                return
            await trio.sleep(INFO_POLL_S)
