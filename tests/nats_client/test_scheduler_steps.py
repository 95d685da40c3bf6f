"""Issue 12 item 3 (CPU per run): scheduler steps the wire client and its transport cost a
caller, counted with a Trio instrument (a count, so the machine's load does not move it).

Every step of a task is a pass through Trio's run loop; a step that only yields (a
``receive`` that finds its message already buffered, then checkpoints) is CPU spent on the run's
critical path for nothing once the call has waited on the server.
"""

from __future__ import annotations

import cProfile
import secrets
from typing import Final

import trio

from dagnats_trio.transport import ConsumerConfig, StreamSpec
from dagnats_trio.transport._trio_nats_connect import open_trio_nats_transport

from ._echo import echo_client

#: Deliveries waiting when the fetch asks for them all.
FETCH_DELIVERIES: Final = 8
#: Steps of the fetching task for one fetch of them: one per read of the server's answer
#: (usually one read; a loaded machine may split it). Before: one per delivery at least.
MAX_FETCH_STEPS: Final = FETCH_DELIVERIES // 2
#: Requests measured one after another.
REQUESTS: Final = 20
WAIT_S: Final = 20.0


class TaskSteps(trio.abc.Instrument):
    """Counts the steps (resumptions by the scheduler) of one task."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


async def test_a_fetch_takes_buffered_deliveries_without_a_step_each(nats_url: str) -> None:
    run = "ts" + secrets.token_hex(6)
    stream, durable = "TS_" + run, "d" + run
    async with open_trio_nats_transport(nats_url) as t:
        await t.ensure_stream(StreamSpec(stream, (f"ts.{run}.>",), work_queue=True))
        await t.ensure_consumer(ConsumerConfig(stream, durable, f"ts.{run}.>", ack_wait_s=60))
        for i in range(FETCH_DELIVERIES + 1):
            await t.publish(f"ts.{run}.a", b"job-%d" % i)
        # The first fetch opens the consumer's inbox (a request of its own): not counted.
        with trio.fail_after(WAIT_S):
            (first,) = await t.fetch(stream, durable, 1, timeout_s=5.0)
        await first.ack()
        counter = TaskSteps(trio.lowlevel.current_task())
        trio.lowlevel.add_instrument(counter)
        try:
            with trio.fail_after(WAIT_S):
                got = await t.fetch(stream, durable, FETCH_DELIVERIES, timeout_s=5.0)
        finally:
            trio.lowlevel.remove_instrument(counter)
        for delivery in got:
            await delivery.ack()
        await t.request(f"$JS.API.STREAM.DELETE.{stream}", b"")
    print(f"fetch of {FETCH_DELIVERIES} deliveries: {counter.steps} steps of the fetching task")
    assert first.data == b"job-0"
    assert [d.data for d in got] == [b"job-%d" % i for i in range(1, FETCH_DELIVERIES + 1)]
    assert 1 <= counter.steps <= MAX_FETCH_STEPS


async def test_a_request_costs_its_caller_one_step_and_one_write(nats_url: str) -> None:
    """The caller writes its frame itself (no hop through the writer task) and is woken once,
    by the reader, with its reply (no channel, no extra yield)."""
    subject = "ts.req." + secrets.token_hex(6)
    async with echo_client(nats_url, subject) as client:
        with trio.fail_after(WAIT_S):
            await client.request(subject, b"warm")
            writes = client.stats().writes
            counter = TaskSteps(trio.lowlevel.current_task())
            trio.lowlevel.add_instrument(counter)
            try:
                for i in range(REQUESTS):
                    assert (await client.request(subject, b"%d" % i)).payload == b"%d" % i
            finally:
                trio.lowlevel.remove_instrument(counter)
            writes = client.stats().writes - writes
    print(f"{REQUESTS} requests: {counter.steps} steps of the caller, {writes} socket writes")
    assert counter.steps == REQUESTS
    assert writes == REQUESTS


#: Fetches measured one after another, each of one delivery published just before.
FETCHES: Final = 20
#: Python calls while a fetch waits for one delivery (profiled: the fetch, the client, and the
#: reader and Trio's scheduler meanwhile): 150 while a fetch found the inbox empty by a
#: ``WouldBlock`` raised and caught (twice, one under ``contextlib.suppress``), 145 since it asks
#: the subscription how many messages it holds; 115 since its wait is bounded by a deadline the
#: connection watches (``Connection.next_msg_before``), not by a cancel scope entered and left.
MAX_CALLS_PER_FETCH: Final = 117


async def test_a_fetch_finds_its_inbox_empty_without_an_exception(nats_url: str) -> None:
    run = "tf" + secrets.token_hex(6)
    stream, durable = "TF_" + run, "d" + run
    async with open_trio_nats_transport(nats_url) as t:
        await t.ensure_stream(StreamSpec(stream, (f"tf.{run}.>",), work_queue=True))
        await t.ensure_consumer(ConsumerConfig(stream, durable, f"tf.{run}.>", ack_wait_s=60))
        with trio.fail_after(WAIT_S):
            await t.publish(f"tf.{run}.a", b"warm")
            (first,) = await t.fetch(stream, durable, 1, timeout_s=5.0)
            first.ack_nowait()
            calls = 0
            got = []
            for i in range(FETCHES):
                await t.publish(f"tf.{run}.a", b"job-%d" % i)
                profiler = cProfile.Profile()
                profiler.enable()
                try:
                    (delivery,) = await t.fetch(stream, durable, 1, timeout_s=5.0)
                finally:
                    profiler.disable()
                profiler.create_stats()
                stats: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
                stats = profiler.stats  # type: ignore[attr-defined]
                calls += sum(v[1] for k, v in stats.items() if k[0] != "~")
                got.append(delivery.data)
                delivery.ack_nowait()
        await t.request(f"$JS.API.STREAM.DELETE.{stream}", b"")
    per_fetch = calls / FETCHES
    print(f"python calls per fetch of one delivery: {per_fetch:.1f}")
    assert got == [b"job-%d" % i for i in range(FETCHES)]
    assert 0 < per_fetch <= MAX_CALLS_PER_FETCH
