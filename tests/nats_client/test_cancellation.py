"""Cancelling any call at any await point leaves the connection usable (on a real server).

Thousands of calls (publish, request, flush, subscribe-and-receive, receive) each run under a
deadline drawn at random: zero (cancelled at its first checkpoint) or a few hundred microseconds
to a few milliseconds (cancelled while its frame is queued, on the wire, or its answer is on the
way). Afterwards every kind of call must still work, answers must match their own requests, and
nothing may be left registered.
"""

from __future__ import annotations

import collections
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable

import trio

from dagnats_trio.nats import Connection, Subscription, open_connection

#: Calls cancelled at random points (each kind about a fifth).
ITERATIONS = 5000
#: Longest random deadline.
MAX_DEADLINE_S = 0.003
#: Half the calls get a deadline below this: they end while the frame or its answer travels.
SHORT_DEADLINE_S = 0.0003
#: The whole loop's bound (wall time); it takes a few seconds on a quiet machine.
LOOP_BOUND_S = 30.0
#: Bound of the checks afterwards.
WAIT_S = 20.0


async def responder(conn: Connection, sub: Subscription) -> None:
    async for msg in sub:
        if msg.reply:
            await conn.publish(msg.reply, msg.payload)


async def test_cancel_calls_at_random_points_then_everything_works(nats_url: str) -> None:
    seed = int(os.environ.get("NATS_CANCEL_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    base = f"nc.cancel.{uuid.uuid4().hex[:12]}"
    outcomes: collections.Counter[tuple[str, bool]] = collections.Counter()
    async with (
        open_connection(nats_url) as conn,
        conn.subscribe(base + ".echo") as echo_sub,
        conn.subscribe(base + ".stream") as stream_sub,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(responder, conn, echo_sub)
        await conn.flush()

        async def do_publish() -> None:
            await conn.publish(base + ".stream", b"p")

        async def do_request() -> None:
            payload = uuid.uuid4().bytes
            answer = await conn.request(base + ".echo", payload)
            assert answer.payload == payload  # never someone else's answer

        async def do_flush() -> None:
            await conn.flush()

        async def do_subscribe() -> None:
            subject = f"{base}.sub.{rng.randrange(1000)}"
            async with conn.subscribe(subject) as sub:
                await conn.publish(subject, b"s")
                assert (await sub.next_msg()).payload == b"s"

        async def do_receive() -> None:
            await stream_sub.next_msg()

        calls: dict[str, Callable[[], Awaitable[None]]] = {
            "publish": do_publish,
            "request": do_request,
            "flush": do_flush,
            "subscribe": do_subscribe,
            "receive": do_receive,
        }
        names = sorted(calls)
        started = time.monotonic()
        with trio.fail_after(LOOP_BOUND_S):
            for _ in range(ITERATIONS):
                name = rng.choice(names)
                draw = rng.random()
                if draw < 0.25:
                    deadline = 0.0  # at the first checkpoint
                elif draw < 0.75:
                    deadline = rng.uniform(0, SHORT_DEADLINE_S)  # mid-flight
                else:
                    deadline = rng.uniform(0, MAX_DEADLINE_S)
                with trio.move_on_after(deadline) as scope:
                    await calls[name]()
                outcomes[(name, scope.cancelled_caught)] += 1
        elapsed = time.monotonic() - started
        print(f"seed={seed} elapsed={elapsed:.1f}s outcomes={dict(sorted(outcomes.items()))}")
        for name in names:  # every kind was both cancelled and completed
            assert outcomes[(name, True)] > 0, (name, seed)
            assert outcomes[(name, False)] > 0, (name, seed)

        # everything still works
        with trio.fail_after(WAIT_S):
            await conn.flush()
            for i in range(50):
                payload = b"check %d" % i
                assert (await conn.request(base + ".echo", payload)).payload == payload
            await do_subscribe()
            async with conn.subscribe(base + ".final") as final:
                for i in range(100):
                    await conn.publish(base + ".final", b"%d" % i)
                await conn.flush()
                assert [int((await final.next_msg()).payload) for _ in range(100)] == list(
                    range(100)
                )
            await conn.flush()
        stats = conn.stats()
        assert stats.pending_requests == 0, stats
        assert stats.pending_pongs == 0, stats
        assert stats.subscriptions == 2, stats  # echo and stream: nothing leaked
        assert stats.reconnects == 0 and stats.connected, stats
        nursery.cancel_scope.cancel()
