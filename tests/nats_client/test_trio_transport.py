"""TrioNatsTransport beyond the conformance suite: reconnect after a restart, a subscription
that comes back, and cancellation of transport calls at random points."""

from __future__ import annotations

import random
import secrets

import trio

from dagnats_trio.protocol.layout import HISTORY_STREAM, history_subject
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import (
    ConsumerConfig,
    StreamSpec,
    TemporarilyUnavailable,
    TransportTimeout,
    provision,
)
from dagnats_trio.transport._trio_nats_connect import open_trio_nats_transport

#: Bound on the reconnect (the server restarts in about a second; the machine is shared).
RECONNECT_BOUND_S = 20.0
#: Transport calls cancelled at random points.
CANCELLED_CALLS = 600
#: Bound on that loop.
CANCEL_LOOP_BOUND_S = 30.0


def uid() -> str:
    return "tt" + secrets.token_hex(6)


async def test_reconnects_after_server_restart(fresh_nats_server: NatsServer) -> None:
    subject = history_subject(uid())
    async with open_trio_nats_transport(fresh_nats_server.url, request_timeout_s=1.0) as t:
        await provision(t)
        first = await t.publish(subject, b"before", msg_id="a")
        async with t.subscribe("tt.core." + subject) as messages:
            await fresh_nats_server.restart()
            attempts = 0
            with trio.fail_after(RECONNECT_BOUND_S):
                while True:
                    attempts += 1
                    try:
                        second = await t.publish(subject, b"after", msg_id="b")
                        break
                    except (TemporarilyUnavailable, TransportTimeout):
                        continue  # still reconnecting; the msg id makes the retry safe
                await t.core_publish("tt.core." + subject, b"live again")
                got = await messages.__anext__()
        last = await t.get_last_msg(HISTORY_STREAM, subject)
        page = await t.read_subject(HISTORY_STREAM, subject, 0, 10)
        assert t.connection.stats().reconnects == 1
    assert second == first + 1
    assert got.data == b"live again"  # the subscription was made again on the new server
    assert last is not None and last.data == b"after"
    assert [m.data for m in page] == [b"before", b"after"]
    assert attempts >= 1


async def test_cancelled_transport_calls_leave_it_usable(nats_url: str) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    run = uid()
    subject = history_subject(run)
    cancelled = 0
    async with open_trio_nats_transport(nats_url) as t:
        await provision(t)
        stream = "TT_" + run
        await t.ensure_stream(StreamSpec(stream, (f"ttq.{run}.>",), work_queue=True))
        await t.ensure_consumer(ConsumerConfig(stream, "d" + run, f"ttq.{run}.>", ack_wait_s=30))
        calls = ("publish", "get_last", "kv", "fetch", "request")
        with trio.fail_after(CANCEL_LOOP_BOUND_S):
            for _ in range(CANCELLED_CALLS):
                name = rng.choice(calls)
                with trio.move_on_after(rng.choice((0.0, rng.uniform(0, 0.002)))) as scope:
                    if name == "publish":
                        await t.publish(subject, b"x")
                    elif name == "get_last":
                        await t.get_last_msg(HISTORY_STREAM, subject)
                    elif name == "kv":
                        await t.kv_put("workflow_defs", run, b"v")
                    elif name == "fetch":
                        await t.publish(f"ttq.{run}.a", b"job")
                        for d in await t.fetch(stream, "d" + run, 1, 0.5):
                            await d.ack()
                    else:
                        await t.ping()
                cancelled += scope.cancelled_caught
        print(f"seed={seed} cancelled={cancelled} of {CANCELLED_CALLS}")
        assert cancelled > 0
        # every kind of call still works, and answers match
        with trio.fail_after(RECONNECT_BOUND_S):
            seq = await t.publish(subject, b"final")
            last = await t.get_last_msg(HISTORY_STREAM, subject)
            assert last is not None and (last.seq, last.data) == (seq, b"final")
            rev = await t.kv_put("workflow_defs", run, b"final")
            entry = await t.kv_get("workflow_defs", run)
            assert entry is not None and (entry.revision, entry.value) == (rev, b"final")
            await t.ping()
            await t.publish(f"ttq.{run}.a", b"last job")
            seen = []
            while not seen or seen[-1] != b"last job":
                for d in await t.fetch(stream, "d" + run, 10, 2.0):
                    seen.append(d.data)
                    await d.ack()
        stats = t.connection.stats()
        assert stats.pending_requests == 0 and stats.connected, stats


async def test_a_cancelled_fetch_loses_no_delivery(nats_url: str) -> None:
    """The pull request of a cancelled fetch stays open on the server; what it delivers later
    goes to the next fetch at once (delivered once), not back to the stream after the AckWait."""
    run = uid()
    stream, durable = "TF_" + run, "d" + run
    async with open_trio_nats_transport(nats_url) as t:
        await t.ensure_stream(StreamSpec(stream, (f"tf.{run}.>",), work_queue=True))
        await t.ensure_consumer(ConsumerConfig(stream, durable, f"tf.{run}.>", ack_wait_s=60))
        for _ in range(3):
            with trio.move_on_after(0.05) as scope:
                await t.fetch(stream, durable, 2, timeout_s=10.0)
            assert scope.cancelled_caught  # nothing to fetch yet
        await t.publish(f"tf.{run}.a", b"job-1")
        await t.publish(f"tf.{run}.a", b"job-2")
        got = []
        with trio.fail_after(RECONNECT_BOUND_S):  # far below the 60 s AckWait
            while len(got) < 2:
                for delivery in await t.fetch(stream, durable, 2, timeout_s=2.0):
                    got.append((delivery.data, delivery.num_delivered))
                    await delivery.ack()
        await t.request(f"$JS.API.STREAM.DELETE.{stream}", b"")
    assert got == [(b"job-1", 1), (b"job-2", 1)]
