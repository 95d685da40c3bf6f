"""Cancelling a NatsTransport call at any await leaves the connection whole.

Each call below is cancelled at a random moment, most of them while nats-py is in the middle of
it (a subscribe's flush, an ordered consumer's creation, a request, a pull, an atomic batch, a
batch direct get with its own inbox). Afterwards the
connection still answers, and every subscription a cancelled call made has been released.
Before the fix a cancelled flush left its cancelled future in nats-py's list of pongs; the next
PONG failed in nats-py's read loop with ``InvalidStateError`` and the connection never recovered.
"""

from __future__ import annotations

import os
import random
import secrets
import statistics
from collections import Counter
from collections.abc import Awaitable, Callable

import trio

from dagnats_trio.protocol import layout
from dagnats_trio.transport import (
    BatchMsg,
    ConsumerConfig,
    NatsTransport,
    TransportError,
    open_nats_py_transport,
)

#: Calls cancelled in one test.
CANCELLED_CALLS = 400
#: A call is cancelled at a random moment within this many times its measured length, so most
#: cancellations land inside nats-py.
CANCEL_SPREAD = 1.5
#: Timings taken of each call before the cancellations.
TIMING_SAMPLES = 5
#: Bound on the whole test, and on the transport releasing what cancelled calls made.
TEST_BOUND_S = 120.0
RELEASE_S = 20.0
LOOK_EVERY_S = 0.05
#: Bound on one call after the cancellations (it must answer, not time out).
ANSWER_S = 5.0
SEED_ENV = "DAGNATS_CANCEL_SEED"


async def test_cancelled_calls_leave_the_connection_whole(nats_transport: NatsTransport) -> None:
    seed = int(os.environ.get(SEED_ENV, random.randrange(2**32)))
    print(f"cancel seed {seed} (set {SEED_ENV} to repeat)")
    rng = random.Random(seed)
    t = nats_transport
    uid = secrets.token_hex(4)
    subject = layout.history_subject(f"cancel-{uid}")
    durable = f"cancel-{uid}"
    await t.ensure_consumer(
        ConsumerConfig(
            stream=layout.HISTORY_STREAM, durable=durable, filter_subject=subject, ack_wait_s=5.0
        )
    )
    await t.publish(subject, b"first")
    await t.fetch(layout.HISTORY_STREAM, durable, 1, 1.0)  # binds the pull inbox, which stays
    subs_before = t.open_subscriptions

    entered: Counter[str] = Counter()

    async def subscribe() -> None:
        async with t.subscribe(f"cancel.{uid}"):
            entered["subscribe"] += 1
            await trio.sleep_forever()

    async def watch() -> None:
        async with t.kv_watch(layout.RUNS_BUCKET, f"cancel-{uid}."):
            entered["watch"] += 1
            await trio.sleep_forever()

    async def request() -> None:
        await t.kv_get(layout.RUNS_BUCKET, f"cancel-{uid}")

    async def publish() -> None:
        await t.publish(subject, b"again")

    async def fetch() -> None:
        await t.fetch(layout.HISTORY_STREAM, durable, 1, 1.0)

    async def core() -> None:
        await t.core_publish(f"cancel.{uid}", b"x")

    async def batch() -> None:
        await t.publish_batch([BatchMsg(subject, b"b1"), BatchMsg(subject, b"b2")])

    async def direct_get() -> None:  # a gather: its own inbox subscription
        await t.get_last_msgs(layout.HISTORY_STREAM, [subject])

    calls: dict[str, Callable[[], Awaitable[None]]] = {
        "subscribe": subscribe,
        "watch": watch,
        "request": request,
        "publish": publish,
        "fetch": fetch,
        "core_publish": core,
        "batch": batch,
        "direct_get": direct_get,
    }
    # How long each call takes here (the median of a few), so cancellations can be spread over
    # its whole length.
    opens = {
        "subscribe": lambda: t.subscribe(f"cancel.{uid}"),
        "watch": lambda: t.kv_watch(layout.RUNS_BUCKET, f"cancel-{uid}."),
    }
    took: dict[str, float] = {}
    for name in calls:
        samples = []
        for _ in range(TIMING_SAMPLES):
            started = trio.current_time()
            if name in opens:
                async with opens[name]():
                    samples.append(trio.current_time() - started)
            else:
                await calls[name]()
                samples.append(trio.current_time() - started)
        took[name] = statistics.median(samples)
    print("calls took (ms): " + ", ".join(f"{k} {v * 1000:.2f}" for k, v in sorted(took.items())))

    cancelled: Counter[str] = Counter()
    finished: Counter[str] = Counter()
    with trio.fail_after(TEST_BOUND_S):
        for _ in range(CANCELLED_CALLS):
            name = rng.choice(sorted(calls))
            delay = rng.uniform(0, took[name] * CANCEL_SPREAD)
            with trio.move_on_after(delay) as scope:
                await calls[name]()
            if scope.cancelled_caught:
                cancelled[name] += 1
            else:
                finished[name] += 1
    inside = {name: cancelled[name] - entered[name] for name in ("subscribe", "watch")}
    print(
        f"cancelled {dict(cancelled)}, finished {dict(finished)}, of them inside nats-py {inside}"
    )
    # Subscriptions were cancelled while nats-py was making them (the case that broke it).
    assert sum(inside.values()) > 0, inside

    # The connection still answers: a request, a subscription (its flush), a JetStream publish.
    with trio.fail_after(ANSWER_S):
        await t.ping()
        async with t.subscribe(f"after.{uid}") as msgs:
            await t.core_publish(f"after.{uid}", b"hello")
            async for msg in msgs:
                assert msg.data == b"hello"
                break
        seq = await t.publish(subject, b"last")
        assert (await t.get_msg(layout.HISTORY_STREAM, seq)).data == b"last"

    # Whatever a cancelled call subscribed has been released.
    for _ in range(int(RELEASE_S / LOOK_EVERY_S) + 1):
        if t.open_subscriptions == subs_before:
            break
        await trio.sleep(LOOK_EVERY_S)
    print(f"subscriptions {t.open_subscriptions} (before {subs_before})")
    assert t.open_subscriptions == subs_before


async def test_ping_answers_and_fails_when_closed(nats_transport: NatsTransport) -> None:
    await nats_transport.ping(1.0)
    await nats_transport.aclose()
    try:
        await nats_transport.ping(1.0)
    except TransportError:
        pass
    else:
        raise AssertionError("ping on a closed transport answered")


#: Connections opened and closed right after a cancelled call.
CLOSE_AFTER_CANCEL_ROUNDS = 40


async def test_closing_right_after_a_cancelled_call_raises_nothing(nats_url: str) -> None:
    """A call abandoned by its caller may still be running on the asyncio side when the
    transport closes; its failure (the connection is gone) must not surface from the close."""
    rng = random.Random(int(os.environ.get(SEED_ENV, random.randrange(2**32))))
    cancelled_inside = 0
    with trio.fail_after(TEST_BOUND_S):
        for round_ in range(CLOSE_AFTER_CANCEL_ROUNDS):
            async with open_nats_py_transport(nats_url, name="pytest-close") as t:
                started = trio.current_time()
                async with t.subscribe(f"close.{round_}"):
                    took = trio.current_time() - started
                entered = False
                with trio.move_on_after(rng.uniform(0, took)):
                    async with t.subscribe(f"close.{round_}"):
                        entered = True
                cancelled_inside += not entered
    print(f"{cancelled_inside} of {CLOSE_AFTER_CANCEL_ROUNDS} closes right after a cancelled call")
    assert cancelled_inside > 0
