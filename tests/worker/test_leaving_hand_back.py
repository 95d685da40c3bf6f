"""A worker that leaves hands back at once a delivery it has not begun, and never one it has,
on a real nats-server, native client.

The native transport starts a delivery's task from the connection's reader
(``Transport.pull``'s ``on_delivery``), so a delivery that arrives while the worker is leaving
(its scope cancelled, its puller not left yet) starts an already-cancelled task. That task
naks it, so another worker gets it now; before, it was left unsettled and came back only after
its AckWait. A delivery whose handler ran is not settled by the leaving worker: it stays
leased until its AckWait (or a heartbeat-less successor's lease) runs out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Final

import trio

from dagnats_trio.protocol.layout import TASK_STREAM, worker_durable
from dagnats_trio.transport import Delivery, Puller, TrioNatsTransport, open_trio_nats_transport
from dagnats_trio.worker import TaskContext, Worker

from ._helpers import WAIT_S, make_task, publish_task, uid

#: A lease three times the tests' wait: a redelivery seen within ``WAIT_S`` was handed back,
#: not redelivered at the end of its AckWait.
LONG_ACK_WAIT_S: Final = 3 * WAIT_S
#: Poll marks out of the way (the first is written at the start).
POLL_MARK_INTERVAL_S: Final = 3600.0


class _LeavesOnFirstDelivery:
    """The native transport, but the worker starts leaving just as its first delivery arrives:
    in the connection's reader, the worker's scope is cancelled, then the delivery is handed to
    the worker (the window between a worker's cancel and its puller leaving)."""

    def __init__(self, inner: TrioNatsTransport) -> None:
        self._inner = inner
        self.scope: trio.CancelScope | None = None
        self.arrived: list[tuple[int, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def pull(
        self, stream: str, durable: str, *, on_delivery: Callable[[Delivery], None], **kw: Any
    ) -> AbstractAsyncContextManager[Puller]:
        def arrives(delivery: Delivery) -> None:
            self.arrived.append((delivery.stream_seq, delivery.num_delivered))
            if len(self.arrived) == 1:
                assert self.scope is not None
                self.scope.cancel()
            on_delivery(delivery)

        return self._inner.pull(stream, durable, on_delivery=arrives, **kw)


async def _consumer(t: TrioNatsTransport, task_type: str) -> dict[str, int]:
    subject = f"$JS.API.CONSUMER.INFO.{TASK_STREAM}.{worker_durable(task_type)}"
    info = json.loads(await t.request(subject, b""))
    return {
        "ack_pending": int(info["num_ack_pending"]),
        "pending": int(info["num_pending"]),
        "redelivered": int(info["num_redelivered"]),
    }


async def test_a_delivery_that_arrives_as_the_worker_leaves_is_handed_back_at_once(
    nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    t = trio_transport
    task_type = uid("t")
    ran: list[int] = []

    async def handler(tc: TaskContext) -> None:
        ran.append(tc.num_delivered)
        await tc.complete("done")

    task = make_task(uid(), task_type=task_type)
    async with open_trio_nats_transport(nats_url, name="leaving-worker") as wt:
        leaving = _LeavesOnFirstDelivery(wt)
        worker = Worker(
            leaving,  # type: ignore[arg-type]
            {task_type: handler},
            ack_wait_s=LONG_ACK_WAIT_S,
            poll_mark_interval_s=POLL_MARK_INTERVAL_S,
        )
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                leaving.scope = nursery.cancel_scope
                await nursery.start(worker.run)
                # Shielded: the delivery can reach the worker (which cancels this nursery)
                # before the publish's own ack is read, and the publish must still return.
                with trio.CancelScope(shield=True), trio.fail_after(WAIT_S):
                    seq = await publish_task(t, task)
        # The worker is gone; its transport stays open (a process hosting more than it).
        assert leaving.arrived == [(seq, 1)]
        assert ran == []
        # Handed back: whoever asks next gets it now, well within its 30 s lease.
        got = await t.fetch(TASK_STREAM, worker_durable(task_type), 1, WAIT_S)
    assert [(d.stream_seq, d.num_delivered) for d in got] == [(seq, 2)]
    await got[0].ack()


async def test_a_delivery_whose_handler_ran_is_not_handed_back_by_a_leaving_worker(
    nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    t = trio_transport
    task_type = uid("t")
    started = trio.Event()

    async def handler(tc: TaskContext) -> None:
        started.set()
        await trio.sleep_forever()

    task = make_task(uid(), task_type=task_type)
    async with open_trio_nats_transport(nats_url, name="leaving-busy-worker") as wt:
        worker = Worker(
            wt,
            {task_type: handler},
            ack_wait_s=LONG_ACK_WAIT_S,
            poll_mark_interval_s=POLL_MARK_INTERVAL_S,
        )
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                await publish_task(t, task)
                await started.wait()
                nursery.cancel_scope.cancel()
        # Anything the worker sent on its way out is ahead of this request on its connection.
        await wt.connection.flush(timeout_s=WAIT_S)
        state = await _consumer(t, task_type)
    # Still leased to the delivery that ran (not nakked: nothing pending, nothing redelivered).
    assert state == {"ack_pending": 1, "pending": 0, "redelivered": 0}
