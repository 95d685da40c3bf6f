"""``Transport.consume``: a feed of a durable's deliveries for a loop that takes them all.

Every transport: the deliveries come in order, a cancelled fetch loses nothing, and what a feed
holds when its loop leaves is given back at once (not after its AckWait). What only the native
transport's feed does (one pull request kept waiting) is in tests/nats_client/test_feed.py.
"""

from __future__ import annotations

import json

import trio

from dagnats_trio.protocol.layout import HISTORY_STREAM, history_subject
from dagnats_trio.transport import Transport

from .test_conformance import ARRIVAL_S, SHORT_WAIT_S, TEST_BOUND_S, history_consumer

#: An AckWait no test waits out: a delivery back within ARRIVAL_S was given back, not expired.
LONG_ACK_WAIT_S = 60.0
#: A feed's batch in these tests.
FEED_BATCH = 64
#: Pause between two reads of a consumer's info while waiting for its count to move.
INFO_POLL_S = 0.01


async def _delivered(t: Transport, durable: str, count: int) -> None:
    """Until the server has sent ``count`` deliveries of ``durable`` (they are in the feed's
    inbox, not waiting in the stream)."""
    subject = f"$JS.API.CONSUMER.INFO.{HISTORY_STREAM}.{durable}"
    while True:
        if json.loads(await t.request(subject, b""))["delivered"]["consumer_seq"] >= count:
            return
        await trio.sleep(INFO_POLL_S)


async def test_a_feed_hands_out_deliveries_in_order_up_to_its_batch(
    transport: Transport, clock: object, uid: str
) -> None:
    durable = await history_consumer(transport, uid, ack_wait_s=LONG_ACK_WAIT_S)
    for body in (b"1", b"2", b"3"):
        await transport.publish(history_subject(uid), body)
    got: list[bytes] = []
    with trio.fail_after(TEST_BOUND_S):
        async with transport.consume(HISTORY_STREAM, durable, 2) as feed:
            while len(got) < 3:
                batch = await feed.fetch(ARRIVAL_S)
                assert 1 <= len(batch) <= 2
                for d in batch:
                    assert d.num_delivered == 1
                    got.append(d.data)
                    await d.ack()
            assert await feed.fetch(SHORT_WAIT_S) == []
    assert got == [b"1", b"2", b"3"]


async def test_a_cancelled_feed_fetch_loses_nothing(
    transport: Transport, clock: object, uid: str
) -> None:
    durable = await history_consumer(transport, uid, ack_wait_s=LONG_ACK_WAIT_S)
    with trio.fail_after(TEST_BOUND_S):
        async with transport.consume(HISTORY_STREAM, durable, FEED_BATCH) as feed:
            with trio.move_on_after(SHORT_WAIT_S) as scope:
                await feed.fetch(ARRIVAL_S)
            assert scope.cancelled_caught
            await transport.publish(history_subject(uid), b"after the cancel")
            got = await feed.fetch(ARRIVAL_S)
    assert [(d.data, d.num_delivered) for d in got] == [(b"after the cancel", 1)]


async def test_leaving_a_feed_gives_back_what_it_holds(
    transport: Transport, clock: object, uid: str, backend: str
) -> None:
    """A delivery the feed took and never handed out comes back to the next fetch at once, not
    after its AckWait (60 s here). The native feed holds it (its request was waiting when it
    was stored): it is nakked on the way out; the others never took it."""
    durable = await history_consumer(transport, uid, ack_wait_s=LONG_ACK_WAIT_S)
    with trio.fail_after(TEST_BOUND_S):
        async with transport.consume(HISTORY_STREAM, durable, FEED_BATCH) as feed:
            await transport.publish(history_subject(uid), b"handed out")
            [first] = await feed.fetch(ARRIVAL_S)
            await first.ack()
            await transport.publish(history_subject(uid), b"held")
            if backend == "trio":
                await _delivered(transport, durable, 2)
        got = await transport.fetch(HISTORY_STREAM, durable, FEED_BATCH, ARRIVAL_S)
    assert [d.data for d in got] == [b"held"]
    assert got[0].num_delivered == (2 if backend == "trio" else 1)
