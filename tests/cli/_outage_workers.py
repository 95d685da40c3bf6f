"""The agent a ``dagnats worker`` runs in tests/cli/test_outage_processes.py.

Its unsafe tool says it started on stdout (one line per start: the test counts them), then
holds until the test writes to the named pipe ``$DAGNATS_OUTAGE_FIFO``: opening the pipe for
writing is what tells the test the tool is in flight, and the test releases it only once the
server is gone, so the call completes while NATS is away.
"""

from __future__ import annotations

import os
from typing import Final

import trio

from dagnats_trio.journal import Replay, ToolCall
from dagnats_trio.protocol import JsonValue
from dagnats_trio.worker import Handler, TaskContext

#: The line the tool prints each time it starts.
TOOL_STARTED: Final = "outage tool started"
FIFO_ENV: Final = "DAGNATS_OUTAGE_FIFO"


def _wait_for_release(fifo: str) -> str:
    with open(fifo, encoding="utf-8") as pipe:  # blocks until the test opens it to write
        return pipe.read()


async def agent(tc: TaskContext) -> None:
    j = await tc.journal()

    async def charge(call: ToolCall) -> JsonValue:
        print(f"{TOOL_STARTED}: delivery {tc.num_delivered} claim {tc.claim_id}", flush=True)
        fifo = os.environ[FIFO_ENV]
        return await trio.to_thread.run_sync(_wait_for_release, fifo, abandon_on_cancel=True)

    result = await j.tool(ToolCall("charge", 5), Replay.UNSAFE, charge)
    await tc.complete({"interrupted": result.interrupted, "output": result.output})


handlers: dict[str, Handler] = {"outage_agent": agent}
