"""Each delivery runs in its own nursery (``tc.start_soon``), on a real nats-server: a helper
ends with the run's cancellation, with a lost lease (a failed heartbeat), and when the handler
returns."""

from __future__ import annotations

from typing import Any

import trio
import trio.lowlevel

from dagnats_trio.protocol import StepCompleted
from dagnats_trio.protocol.layout import cancel_subject
from dagnats_trio.transport import Delivery, NatsTransport, TransportError, fetch_puller
from dagnats_trio.worker import TaskContext

from ._helpers import WAIT_S, history, make_task, publish_task, uid
from .test_worker_nats import running, wait_acked, worker_for


async def _helper(ended: trio.Event, outcome: list[str]) -> None:
    try:
        await trio.sleep_forever()
    finally:
        outcome.append("helper ended")
        ended.set()


async def test_a_helper_is_cancelled_with_the_run(nats_transport: NatsTransport) -> None:
    started, ended = trio.Event(), trio.Event()
    outcome: list[str] = []

    async def handler(tc: TaskContext) -> None:
        tc.start_soon(_helper, ended, outcome)
        started.set()
        await trio.sleep_forever()

    task = make_task(uid(), task_type=uid("t"))
    async with running(worker_for(nats_transport, task.task, handler)):
        seq = await publish_task(nats_transport, task)
        with trio.fail_after(WAIT_S):
            await started.wait()
        assert outcome == []
        await nats_transport.core_publish(cancel_subject(task.run_id), b"")
        with trio.fail_after(WAIT_S):
            await ended.wait()
        await wait_acked(nats_transport, seq)
    assert outcome == ["helper ended"]
    assert await history(nats_transport, task.run_id) == []


async def test_a_helper_ends_when_the_handler_returns(nats_transport: NatsTransport) -> None:
    ended = trio.Event()
    outcome: list[str] = []

    async def handler(tc: TaskContext) -> None:
        tc.start_soon(_helper, ended, outcome)
        await trio.lowlevel.checkpoint()
        await tc.complete("done")

    task = make_task(uid(), task_type=uid("t"))
    async with running(worker_for(nats_transport, task.task, handler)):
        seq = await publish_task(nats_transport, task)
        with trio.fail_after(WAIT_S):
            await ended.wait()
        await wait_acked(nats_transport, seq)
    assert outcome == ["helper ended"]
    (ev,) = await history(nats_transport, task.run_id)
    assert ev == StepCompleted(task.run_id, "agent", task.dispatch, output="done")


class _BeatFails:
    """A delivery whose heartbeat fails (the connection to its lease is gone)."""

    def __init__(self, inner: Delivery) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def in_progress(self) -> None:
        await trio.lowlevel.checkpoint()
        raise TransportError("test: the heartbeat could not be sent")


class _FailingBeats:
    """The real transport, but the first delivery it fetches cannot beat."""

    def __init__(self, inner: NatsTransport) -> None:
        self._inner = inner
        self.wrapped = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def fetch(self, *args: Any, **kw: Any) -> list[Any]:
        got = await self._inner.fetch(*args, **kw)
        out: list[Any] = []
        for d in got:
            if self.wrapped == 0:
                self.wrapped += 1
                out.append(_BeatFails(d))
            else:
                out.append(d)
        return out

    def pull(self, stream: str, durable: str, **kw: Any) -> Any:
        """The worker pulls through a puller: one over this wrapper's own fetch."""
        return fetch_puller(self, stream, durable, **kw)


async def test_a_helper_is_cancelled_when_the_lease_is_lost(nats_transport: NatsTransport) -> None:
    started, ended, handler_ended = trio.Event(), trio.Event(), trio.Event()
    outcome: list[str] = []
    deliveries: list[int] = []

    async def handler(tc: TaskContext) -> None:
        deliveries.append(tc.num_delivered)
        if tc.num_delivered > 1:
            await tc.complete("second delivery")
            return
        tc.start_soon(_helper, ended, outcome)
        started.set()
        try:
            await trio.sleep_forever()
        finally:
            outcome.append("handler ended")
            handler_ended.set()

    task = make_task(uid(), task_type=uid("t"))
    transport = _FailingBeats(nats_transport)
    async with running(worker_for(transport, task.task, handler)):  # type: ignore[arg-type]
        seq = await publish_task(nats_transport, task)
        with trio.fail_after(WAIT_S):
            await started.wait()
            await ended.wait()
            await handler_ended.wait()
        # Not acked: the lease is gone, so the task comes back and the next delivery settles it.
        await wait_acked(nats_transport, seq)
    assert sorted(outcome) == ["handler ended", "helper ended"]
    assert deliveries == [1, 2]
    (ev,) = await history(nats_transport, task.run_id)
    assert isinstance(ev, StepCompleted) and ev.output == "second delivery"
