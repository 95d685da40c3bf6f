"""``Delivery.ack_nowait``: an ack that does not wait for the server still settles the message.

Both backends: the message is not redelivered after the AckWait, and a work-queue message is
removed; it costs no round trip.
"""

from __future__ import annotations

import pytest
import trio

from dagnats_trio.protocol.layout import HISTORY_STREAM, history_subject
from dagnats_trio.transport import Closed, NotFound, Transport

from .test_conformance import (
    ACK_WAIT_S,
    SHORT_WAIT_S,
    TEST_BOUND_S,
    fetch_one,
    history_consumer,
    work_queue_stream,
)

#: How long a settled message must stay away: past its AckWait, with room to spare.
AFTER_ACK_WAIT_S = ACK_WAIT_S + SHORT_WAIT_S


async def test_ack_nowait_settles_without_a_round_trip_or_an_await(
    transport: Transport, clock: object, uid: str
) -> None:
    """A plain call, not awaited (its caller's task takes no scheduler step for it): it queues
    the ack and returns nothing, and the message is settled all the same."""
    durable = await history_consumer(transport, uid)
    await transport.publish(history_subject(uid), b"event")
    with trio.fail_after(TEST_BOUND_S):
        delivery = await fetch_one(transport, HISTORY_STREAM, durable)
        before = transport.round_trips
        queued = delivery.ack_nowait()
        assert queued is None  # not a coroutine left to await
        delivery.ack_nowait()  # settling twice is harmless
        assert transport.round_trips == before
        assert await transport.fetch(HISTORY_STREAM, durable, 1, AFTER_ACK_WAIT_S) == []


async def test_ack_nowait_on_a_closed_transport_says_closed(
    transport: Transport, clock: object, uid: str
) -> None:
    durable = await history_consumer(transport, uid)
    await transport.publish(history_subject(uid), b"event")
    with trio.fail_after(TEST_BOUND_S):
        delivery = await fetch_one(transport, HISTORY_STREAM, durable)
        await transport.aclose()
        with pytest.raises(Closed):
            delivery.ack_nowait()


async def test_unacked_delivery_comes_back(transport: Transport, clock: object, uid: str) -> None:
    """The negative case of the test above: without the ack, the AckWait redelivers."""
    durable = await history_consumer(transport, uid)
    seq = await transport.publish(history_subject(uid), b"event")
    with trio.fail_after(TEST_BOUND_S):
        await fetch_one(transport, HISTORY_STREAM, durable)
        again = await fetch_one(transport, HISTORY_STREAM, durable)
        assert (again.stream_seq, again.num_delivered) == (seq, 2)
        again.ack_nowait()


async def test_ack_nowait_removes_a_work_queue_message(
    transport: Transport, clock: object, uid: str
) -> None:
    durable = await work_queue_stream(transport, uid)
    stream = f"WQ_{uid}"
    seq = await transport.publish(f"wq.{uid}.a", b"task")
    with trio.fail_after(TEST_BOUND_S):
        delivery = await fetch_one(transport, stream, durable)
        delivery.ack_nowait()
        # The server applies the ack asynchronously: wait (bounded) until the message is gone.
        while True:
            try:
                await transport.get_msg(stream, seq)
            except NotFound:
                break
            await trio.sleep(0.01)
        assert await transport.fetch(stream, durable, 1, SHORT_WAIT_S) == []


@pytest.mark.parametrize("settle", ["ack", "ack_nowait"])
async def test_settled_then_ack_nowait_is_a_no_op(
    transport: Transport, clock: object, uid: str, settle: str
) -> None:
    durable = await history_consumer(transport, uid)
    await transport.publish(history_subject(uid), b"event")
    with trio.fail_after(TEST_BOUND_S):
        delivery = await fetch_one(transport, HISTORY_STREAM, durable)
        if settle == "ack":
            await delivery.ack()
        else:
            delivery.ack_nowait()
        await delivery.term()
        delivery.ack_nowait()
        assert await transport.fetch(HISTORY_STREAM, durable, 1, AFTER_ACK_WAIT_S) == []
