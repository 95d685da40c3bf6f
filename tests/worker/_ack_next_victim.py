"""A worker process to kill around its ack with next (``+NXT``):
``python tests/worker/_ack_next_victim.py NATS_URL TASK_TYPE``, used by test_ack_next_kill.py.

Two places and the default AckWait: with one task in hand, the pull loop keeps a request for the
other place, so the ack of that task asks for the next one (with one place the loop would be
waiting for it and the ack would be plain). The handler reads the task's input: ``"hold"`` says
``ackkill.{run}.started`` on core NATS and waits for one message on ``ackkill.{run}.go`` before
it completes (the test decides when the ack, and the request it carries, is sent); ``"die"``
SIGKILLs its own process the moment the delivery reaches it, before any claim: a worker killed
right after its ack pulled the task. The process prints ``ready`` once it pulls tasks.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Final

import trio

from dagnats_trio.transport import Transport, open_nats_transport
from dagnats_trio.worker import Handler, TaskContext, Worker

READY_LINE: Final = "ready"
HOLD: Final = "hold"
DIE: Final = "die"
PLACES: Final = 2


def started_subject(run_id: str) -> str:
    return f"ackkill.{run_id}.started"


def go_subject(run_id: str) -> str:
    return f"ackkill.{run_id}.go"


def victim_handler(transport: Transport) -> Handler:
    async def handler(tc: TaskContext) -> None:
        if tc.input == DIE:
            os.kill(os.getpid(), signal.SIGKILL)
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
