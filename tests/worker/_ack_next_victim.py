"""A worker process to kill or stop around its ack with next (``+NXT``):
``python tests/worker/_ack_next_victim.py NATS_URL TASK_TYPE``, used by test_ack_next_kill.py.

Two places and the default AckWait: with one task in hand, the pull loop keeps a request for the
other place, so the ack of that task asks for the next one (with one place the loop would be
waiting for it and the ack would be plain). The handler reads the task's input: ``"hold"`` says
``ackkill.{run}.started`` on core NATS and waits for one message on ``ackkill.{run}.go`` before
it completes (the test decides when the ack, and the request it carries, is sent); ``"die"``
SIGKILLs its own process the moment the delivery reaches it, before any claim: a worker killed
right after its ack pulled the task; ``"stop"`` claims the step's journal and enters an unsafe
tool, says ``ackkill.{run}.in_tool`` there and stays in it until a message on
``ackkill.{run}.release`` (the test stops the process meanwhile), then completes; however that
handler ends, it says how on ``ackkill.{run}.ended`` (the exception's class name, or
``completed``). The process prints ``ready`` once it pulls tasks.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Final

import trio

from dagnats_trio.journal import Replay, ToolCall
from dagnats_trio.transport import Transport, open_nats_transport
from dagnats_trio.worker import Handler, TaskContext, Worker

READY_LINE: Final = "ready"
HOLD: Final = "hold"
DIE: Final = "die"
STOP: Final = "stop"
PLACES: Final = 2
#: The unsafe tool a ``"stop"`` task is held in.
TOOL_NAME: Final = "send_message"
#: What ``ended`` says of a handler that returned.
COMPLETED: Final = "completed"
#: Bound on saying how a ``"stop"`` handler ended (shielded: it may end cancelled).
ENDED_SAY_S: Final = 5.0


def started_subject(run_id: str) -> str:
    return f"ackkill.{run_id}.started"


def go_subject(run_id: str) -> str:
    return f"ackkill.{run_id}.go"


def in_tool_subject(run_id: str) -> str:
    return f"ackkill.{run_id}.in_tool"


def release_subject(run_id: str) -> str:
    return f"ackkill.{run_id}.release"


def ended_subject(run_id: str) -> str:
    return f"ackkill.{run_id}.ended"


async def held_in_tool(transport: Transport, tc: TaskContext) -> None:
    """The ``"stop"`` handler: an unsafe tool held until released; says how it ended."""
    outcome = COMPLETED
    try:
        j = await tc.journal()

        async def send(call: ToolCall) -> str:
            async with transport.subscribe(release_subject(tc.run_id)) as release:
                pid = str(os.getpid()).encode()
                await transport.core_publish(in_tool_subject(tc.run_id), pid)
                async for _ in release:
                    break
            return "sent"

        result = await j.tool(ToolCall(TOOL_NAME, tc.run_id), Replay.UNSAFE, send)
        await tc.complete({"pid": os.getpid(), "interrupted": result.interrupted})
    except BaseException as exc:
        outcome = type(exc).__name__
        raise
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(ENDED_SAY_S):
            await transport.core_publish(ended_subject(tc.run_id), outcome.encode())


def victim_handler(transport: Transport) -> Handler:
    async def handler(tc: TaskContext) -> None:
        if tc.input == DIE:
            os.kill(os.getpid(), signal.SIGKILL)
        if tc.input == STOP:
            await held_in_tool(transport, tc)
            return
        async with transport.subscribe(go_subject(tc.run_id)) as go:
            await transport.core_publish(started_subject(tc.run_id), str(os.getpid()).encode())
            async for _ in go:
                break
        await tc.complete({"pid": os.getpid(), "delivered": tc.num_delivered})

    return handler


async def _main(url: str, task_type: str) -> None:
    async with (
        open_nats_transport(url, name="ack-next-victim") as transport,
        trio.open_nursery() as nursery,
    ):
        worker = Worker(transport, {task_type: victim_handler(transport)}, concurrency=PLACES)
        await nursery.start(worker.run)
        print(READY_LINE, flush=True)


if __name__ == "__main__":
    trio.run(_main, sys.argv[1], sys.argv[2])
