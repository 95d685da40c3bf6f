"""A worker process to kill: ``python -m bench._takeover_worker NATS_URL TASK_TYPE WORKER_ID``.

Used by the takeover benchmark and its test (tests/worker/test_takeover.py). The worker runs
at the default AckWait. Its handler says on core NATS when it starts (``takeover.{run}.started``)
and, inside an unsafe tool recorded in the journal, when it is there (``takeover.{run}.in_tool``);
on a task's first delivery it then waits in the tool to be killed. A redelivery finds the
intent without a result, records it interrupted (the tool is not started again) and completes.
The process prints ``ready`` once it pulls tasks.
"""

from __future__ import annotations

import os
import sys
from typing import Final

import attrs
import trio

from dagnats_trio.journal import Replay, ToolCall
from dagnats_trio.protocol import from_json, to_json
from dagnats_trio.transport import Transport, open_nats_transport
from dagnats_trio.worker import Handler, TaskContext, Worker

#: What the process prints once its worker pulls tasks.
READY_LINE: Final = "ready"
STARTED: Final = "started"
IN_TOOL: Final = "in_tool"
#: The unsafe tool the handler is killed in.
TOOL_NAME: Final = "send_message"


def signal_subject(run_id: str, phase: str) -> str:
    return f"takeover.{run_id}.{phase}"


def signals_of(run_id: str) -> str:
    """Every signal of one run's task."""
    return f"takeover.{run_id}.*"


@attrs.frozen
class Signal:
    """Where a handler is: which process and worker, which delivery of the task."""

    phase: str
    pid: int
    worker_id: str
    delivered: int


def decode_signal(data: bytes) -> Signal:
    return from_json(data, Signal, "takeover signal")


def takeover_handler(transport: Transport) -> Handler:
    """The handler described in the module docstring, signalling on ``transport``."""

    async def say(tc: TaskContext, phase: str) -> None:
        signal = Signal(phase, os.getpid(), tc.worker_id, tc.num_delivered)
        await transport.core_publish(signal_subject(tc.run_id, phase), to_json(signal))

    async def handler(tc: TaskContext) -> None:
        await say(tc, STARTED)
        j = await tc.journal()

        async def send(call: ToolCall) -> str:
            await say(tc, IN_TOOL)
            if tc.num_delivered == 1:
                await trio.sleep_forever()  # killed here
            return "sent"

        result = await j.tool(ToolCall(TOOL_NAME, tc.input), Replay.UNSAFE, send)
        await tc.complete({"interrupted": result.interrupted, "worker": tc.worker_id})

    return handler


async def _main(url: str, task_type: str, worker_id: str) -> None:
    async with open_nats_transport(url, name=worker_id) as transport, trio.open_nursery() as n:
        worker = Worker(transport, {task_type: takeover_handler(transport)}, worker_id=worker_id)
        await n.start(worker.run)
        print(READY_LINE, flush=True)


if __name__ == "__main__":
    url, task_type, worker_id = sys.argv[1:4]
    trio.run(_main, url, task_type, worker_id)
