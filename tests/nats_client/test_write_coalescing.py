"""Issue 12 item 3 (CPU per run, 50 runs at once): a busy connection writes the frames its tasks
queue in one scheduler pass with one system call; a quiet one writes each frame at once.

Counted with the connection's public ``stats().writes`` (socket writes), against a responder on
a second connection of a real nats-server.
"""

from __future__ import annotations

import uuid
from typing import Final

import trio

from dagnats_trio.nats import Connection, Subscription, open_connection

#: Requests started in the same scheduler pass.
CONCURRENT_REQUESTS: Final = 32
#: Socket writes those requests may take: one per pass they were queued in (they all are in
#: one or two), with room for a loaded machine; one each (32) before.
MAX_CONCURRENT_WRITES: Final = CONCURRENT_REQUESTS // 4
#: Requests made one after another: each written at once, alone.
SEQUENTIAL_REQUESTS: Final = 20
#: Large concurrent messages: more than the socket takes at once, so some go to the writer.
LARGE_REQUESTS: Final = 24
LARGE_PAYLOAD_BYTES: Final = 200_000
#: Bursts of requests cancelled in the pass that queued them.
CANCEL_ROUNDS: Final = 8
WAIT_S: Final = 30.0


async def _echo(conn: Connection, sub: Subscription) -> None:
    async for msg in sub:
        if msg.reply:
            await conn.publish(msg.reply, msg.payload)


async def _concurrent(client: Connection, subject: str, payloads: list[bytes]) -> list[bytes]:
    answers: list[bytes] = [b""] * len(payloads)

    async def one(i: int) -> None:
        answers[i] = (await client.request(subject, payloads[i], timeout_s=WAIT_S)).payload

    async with trio.open_nursery() as nursery:
        for i in range(len(payloads)):
            nursery.start_soon(one, i)
    return answers


async def test_a_busy_connection_writes_a_pass_of_frames_at_once(nats_url: str) -> None:
    subject = f"nc.coalesce.{uuid.uuid4().hex[:12]}"
    async with (
        open_connection(nats_url) as server_side,
        server_side.subscribe(subject) as sub,
        open_connection(nats_url) as client,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(_echo, server_side, sub)
        await server_side.flush()
        with trio.fail_after(WAIT_S):
            await client.request(subject, b"warm")
            before = client.stats().writes
            for i in range(SEQUENTIAL_REQUESTS):
                assert (await client.request(subject, b"s%d" % i)).payload == b"s%d" % i
            sequential = client.stats().writes - before

            payloads = [b"c%d" % i for i in range(CONCURRENT_REQUESTS)]
            before = client.stats().writes
            answers = await _concurrent(client, subject, payloads)
            concurrent = client.stats().writes - before

            large = [bytes([65 + i % 26]) * LARGE_PAYLOAD_BYTES for i in range(LARGE_REQUESTS)]
            large_answers = await _concurrent(client, subject, large)
        stats = client.stats()
        nursery.cancel_scope.cancel()
    print(
        f"socket writes: {sequential} for {SEQUENTIAL_REQUESTS} requests one after another, "
        f"{concurrent} for {CONCURRENT_REQUESTS} at once"
    )
    assert sequential == SEQUENTIAL_REQUESTS  # a quiet connection writes each frame at once
    assert 1 <= concurrent <= MAX_CONCURRENT_WRITES
    assert answers == payloads
    assert large_answers == large  # whole frames, in order, past the socket's buffer
    assert stats.reconnects == 0 and stats.pending_bytes == 0


async def test_requests_cancelled_before_their_frames_are_written_leave_the_wire_whole(
    nats_url: str,
) -> None:
    """Frames left for the end of the pass belong to requests that may be cancelled first:
    they still go out whole (the server keeps the connection, later requests are answered),
    and their late replies are dropped."""
    subject = f"nc.coalesce.cancel.{uuid.uuid4().hex[:12]}"
    echoed = 0

    async def echo(sub: Subscription) -> None:
        nonlocal echoed
        async for msg in sub:
            echoed += 1
            if msg.reply:
                await server_side.publish(msg.reply, msg.payload)

    async with (
        open_connection(nats_url) as server_side,
        server_side.subscribe(subject) as sub,
        open_connection(nats_url) as client,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(echo, sub)
        await server_side.flush()
        with trio.fail_after(WAIT_S):
            for round_ in range(CANCEL_ROUNDS):
                async with trio.open_nursery() as burst:
                    for i in range(CONCURRENT_REQUESTS):
                        burst.start_soon(client.request, subject, b"x%d" % i)
                    # Runs in the same scheduler pass as the requests: after them (their
                    # frames queued, not yet written) or before them (nothing queued).
                    burst.start_soon(_cancel, burst.cancel_scope)
                msg = await client.request(subject, b"after %d" % round_)
                assert msg.payload == b"after %d" % round_
            await client.flush()
            await server_side.flush()
        stats = client.stats()
        nursery.cancel_scope.cancel()
    print(f"{echoed} requests reached the responder, {CANCEL_ROUNDS} of them not cancelled")
    assert stats.reconnects == 0
    assert stats.pending_requests == 0
    assert echoed >= CANCEL_ROUNDS


async def _cancel(scope: trio.CancelScope) -> None:
    scope.cancel()
    await trio.lowlevel.checkpoint()
