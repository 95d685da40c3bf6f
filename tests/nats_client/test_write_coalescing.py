"""Issue 12 item 3 (CPU per run, 50 runs at once): a busy connection writes the frames its tasks
queue in one scheduler pass with one system call; a quiet one writes each frame at once.

Counted with the connection's public ``stats().writes`` (socket writes), against a responder on
a second connection of a real nats-server.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Final

import pytest
import trio

from dagnats_trio.nats import (
    Connection,
    Msg,
    NoRespondersError,
    ProtocolError,
    Pub,
    Subscription,
    open_connection,
)
from dagnats_trio.transport import BatchMsg, ConsumerConfig, StreamSpec
from dagnats_trio.transport._trio_nats import TrioNatsTransport
from dagnats_trio.transport._trio_nats_connect import open_trio_nats_transport

from ._echo import echo_client

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
#: Messages of an atomic batch (the last is its commit).
BATCH_MSGS: Final = 4
#: Bursts of requests cancelled in the pass that queued them.
CANCEL_ROUNDS: Final = 8
WAIT_S: Final = 30.0
#: Jobs fetched and acked one by one; requests in flight together to make a connection busy.
ACKED_JOBS: Final = 3
BUSY_REQUESTS: Final = 4
#: Between two looks at a consumer's ack floor.
ACK_POLL_S: Final = 0.01


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
    async with echo_client(nats_url, subject) as client:
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


async def test_a_request_and_its_preceding_messages_are_one_write_in_order(nats_url: str) -> None:
    subject = f"nc.preceding.{uuid.uuid4().hex[:12]}"
    async with (
        open_connection(nats_url) as server_side,
        server_side.subscribe(subject + ".>") as sub,
        open_connection(nats_url) as client,
    ):
        await server_side.flush()
        await client.flush()
        before = client.stats().writes
        with trio.fail_after(WAIT_S):
            with pytest.raises(ProtocolError, match="subject"):
                await client.request(
                    subject + ".req", b"q", preceding=[Pub(subject + ".a", b"1"), Pub("bad one")]
                )
            refused = client.stats().writes - before
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_answer_last, server_side, sub)
                msg = await client.request(
                    subject + ".req",
                    b"q",
                    preceding=[Pub(subject + ".a", b"1"), Pub(subject + ".b", b"2", "r.x")],
                )
            sent = client.stats().writes - before - refused
            seen = [(m.subject, m.payload, m.reply) for m in _drain(sub)]
    assert refused == 0  # nothing queued: the bad message failed before any was
    assert sent == 1
    assert msg.payload == b"3 before"
    assert seen == []  # the responder took all three, in order (see _answer_last)


async def _answer_last(conn: Connection, sub: Subscription) -> None:
    got = []
    async for msg in sub:
        got.append((msg.subject.rsplit(".", 1)[1], msg.payload, msg.reply))
        if msg.subject.endswith(".req"):
            assert [g[:2] for g in got] == [("a", b"1"), ("b", b"2"), ("req", b"q")]
            assert got[1][2] == "r.x"
            assert msg.reply is not None
            await conn.publish(msg.reply, b"%d before" % len(got))
            return


def _drain(sub: Subscription) -> list[object]:
    out = []
    with contextlib.suppress(trio.WouldBlock, trio.EndOfChannel):
        while True:
            out.append(sub.next_msg_nowait())
    return out


async def test_an_atomic_batch_is_one_socket_write(nats_url: str) -> None:
    """A batch's messages go out with its commit request, in one write (was one each)."""
    name = f"NCB_{uuid.uuid4().hex[:8]}"
    subject = f"{name}.step"
    async with open_trio_nats_transport(nats_url) as t:
        await t.ensure_stream(StreamSpec(name, (f"{name}.>",), allow_atomic=True))
        batch = [BatchMsg(subject, b"m%d" % i) for i in range(BATCH_MSGS)]
        with trio.fail_after(WAIT_S):
            before = t.connection.stats().writes
            ack = await t.publish_batch(batch, expected_last_subject_seq=0)
            writes = t.connection.stats().writes - before
            stored = await t.read_subject(name, subject, 1, 10)
            await t.request(f"$JS.API.STREAM.DELETE.{name}", b"")
    print(f"atomic batch of {BATCH_MSGS}: {writes} socket write(s)")
    assert ack.count == BATCH_MSGS
    assert [m.data for m in stored] == [b"m%d" % i for i in range(BATCH_MSGS)]
    assert writes == 1


async def _acked(t: TrioNatsTransport, stream: str, durable: str, floor: int) -> int:
    """Until the consumer's ack floor reaches ``floor`` (the server applies acks on a queue of
    its own, after it read them): the acks it still waits for then."""
    while True:
        info = json.loads(await t.request(f"$JS.API.CONSUMER.INFO.{stream}.{durable}", b""))
        if info["ack_floor"]["consumer_seq"] >= floor:
            return int(info["num_ack_pending"])
        await trio.sleep(ACK_POLL_S)


async def test_an_ack_rides_with_the_next_fetch_while_connections_are_busy(nats_url: str) -> None:
    """``ack_nowait`` then a fetch (the engine's loop: settle an event, ask for the next): on a
    quiet connection the ack goes out at once, alone, as before; once connections are busy (the
    end of the scheduler pass is watched for their frames) the two are one socket write (were
    two), and an ack that nothing follows leaves at the end of its pass. The server counts
    every ack."""
    run = uuid.uuid4().hex[:10]
    stream, durable = f"NCA_{run}", f"d{run}"
    async with open_trio_nats_transport(nats_url) as t:
        await t.ensure_stream(StreamSpec(stream, (f"nca.{run}.>",), work_queue=True))
        await t.ensure_consumer(ConsumerConfig(stream, durable, f"nca.{run}.>", ack_wait_s=60))
        with trio.fail_after(WAIT_S):
            for i in range(ACKED_JOBS):
                await t.publish(f"nca.{run}.a", b"job-%d" % i)
            (quiet,) = await t.fetch(stream, durable, 1, timeout_s=5.0)
            before = t.connection.stats().writes
            quiet.ack_nowait()
            quiet_ack = t.connection.stats().writes - before  # at once: no pass waited for
            # A busy moment: requests in flight together (their frames wait for the pass end).
            async with trio.open_nursery() as nursery:
                for i in range(BUSY_REQUESTS):
                    nursery.start_soon(t.publish, f"nca.{run}.busy", b"%d" % i)
            (first,) = await t.fetch(stream, durable, 1, timeout_s=5.0)
            before = t.connection.stats().writes
            first.ack_nowait()
            (second,) = await t.fetch(stream, durable, 1, timeout_s=5.0)
            with_fetch = t.connection.stats().writes - before
            before = t.connection.stats().writes
            second.ack_nowait()
            left_for_pass_end = t.connection.stats().pending_bytes
            await trio.lowlevel.checkpoint()  # one pass: its end writes the ack
            alone = t.connection.stats().writes - before
            left = t.connection.stats().pending_bytes
            pending = await _acked(t, stream, durable, floor=ACKED_JOBS)
            await t.request(f"$JS.API.STREAM.DELETE.{stream}", b"")
    print(f"quiet ack: {quiet_ack} write(s); busy: ack + fetch {with_fetch}, ack alone {alone}")
    assert [d.data for d in (quiet, first, second)] == [b"job-%d" % i for i in range(ACKED_JOBS)]
    assert quiet_ack == 1
    assert with_fetch == 1
    assert left_for_pass_end > 0
    assert (alone, left) == (1, 0)
    assert pending == 0


async def test_an_ack_left_for_the_pass_end_reaches_the_server_when_the_connection_closes(
    nats_url: str,
) -> None:
    """An ack queued ``soon`` (connections busy: it waits for the end of its pass) by a task
    that then closes its connection at once, before any pass ends: the close writes it, the
    server counts it (nothing is delivered again)."""
    run = uuid.uuid4().hex[:10]
    stream, durable = f"NCC_{run}", f"d{run}"
    async with open_trio_nats_transport(nats_url) as admin:
        await admin.ensure_stream(StreamSpec(stream, (f"ncc.{run}.>",), work_queue=True))
        await admin.ensure_consumer(ConsumerConfig(stream, durable, f"ncc.{run}.>", ack_wait_s=60))
        with trio.fail_after(WAIT_S):
            await admin.publish(f"ncc.{run}.a", b"job")
            async with open_trio_nats_transport(nats_url) as t:
                async with trio.open_nursery() as nursery:
                    for i in range(BUSY_REQUESTS):
                        nursery.start_soon(t.publish, f"ncc.{run}.busy", b"%d" % i)
                (delivery,) = await t.fetch(stream, durable, 1, timeout_s=5.0)
                delivery.ack_nowait()
                left_for_pass_end = t.connection.stats().pending_bytes
            pending = await _acked(admin, stream, durable, floor=1)
            await admin.request(f"$JS.API.STREAM.DELETE.{stream}", b"")
    print(f"ack left for the pass end: {left_for_pass_end} bytes; after close, pending {pending}")
    assert delivery.data == b"job"
    assert left_for_pass_end > 0
    assert pending == 0


async def test_requests_sent_each_at_once_are_one_write(nats_url: str) -> None:
    """``request_each``: the frames of several requests in one socket write (were one each, or
    the end of the pass: the requests in flight made the connection busy), every answer waited
    in the caller's task; one without a responder answers alone, the others are kept."""
    subject = f"nc.each.{uuid.uuid4().hex[:12]}"
    async with echo_client(nats_url, subject) as client:
        with trio.fail_after(WAIT_S):
            await client.request(subject, b"warm")
            before = client.stats().writes
            answers = await client.request_each(
                [Pub(subject, b"one"), Pub(f"nobody.{subject}", b"x"), Pub(subject, b"three")]
            )
            writes = client.stats().writes - before
            assert await client.request_each([]) == []
        stats = client.stats()
    print(f"socket writes for three requests sent each at once: {writes}")
    assert writes == 1
    assert isinstance(answers[0], Msg) and answers[0].payload == b"one"
    assert isinstance(answers[1], NoRespondersError)
    assert isinstance(answers[2], Msg) and answers[2].payload == b"three"
    assert stats.pending_requests == 0 and stats.pending_bytes == 0
