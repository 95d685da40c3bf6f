"""A delivery's task runs in the worker's context, though the native transport's connection
reader starts it (``Transport.pull``'s ``on_delivery``): the context variables set where the
worker was started (the crash hook is one) are the handler's, and the reader's are not. On a
real nats-server, on the native transport (whose reader was started before the variable was
set, with the fixture's connection).
"""

from __future__ import annotations

import contextvars
from typing import Final

import trio

from dagnats_trio.transport import TrioNatsTransport
from dagnats_trio.worker import TaskContext, Worker

from ._helpers import WAIT_S, make_task, publish_task, uid

#: Set by the test before it starts the worker; the handler reads it.
WHO: Final = contextvars.ContextVar[str]("who", default="nobody set it")


async def test_the_handler_sees_the_context_the_worker_was_started_in(
    trio_transport: TrioNatsTransport,
) -> None:
    seen: list[str] = []
    done = trio.Event()

    async def handler(tc: TaskContext) -> None:
        seen.append(WHO.get())
        await tc.complete(None)
        done.set()

    task = make_task(uid(), task_type=uid("t"))
    worker = Worker(trio_transport, {task.task: handler})
    WHO.set("the worker's caller")
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            await publish_task(trio_transport, task)
            await done.wait()
            nursery.cancel_scope.cancel()
    assert seen == ["the worker's caller"]
