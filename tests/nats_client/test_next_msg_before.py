"""Issue 12 goal 3: a bounded wait for a subscription's next message without a cancel scope
(``Connection.next_msg_before``), what a JetStream fetch waits on: the message, ``None`` at the
deadline and not before, ``EndOfChannel`` once closed, nothing taken by a cancelled wait, and a
message each for two waiters. On a real nats-server.
"""

from __future__ import annotations

import uuid
from typing import Final

import trio
import trio.testing

from dagnats_trio.nats import open_connection

WAIT_S: Final = 20.0
#: A deadline short enough for the suite, long enough that no answer is in flight.
SHORT_S: Final = 0.2


def _subject() -> str:
    return f"nmb.{uuid.uuid4().hex[:12]}"


async def test_the_next_message_or_none_at_the_deadline(nats_url: str) -> None:
    subject = _subject()
    async with open_connection(nats_url) as conn, conn.subscribe(subject) as sub:
        await conn.flush()
        with trio.fail_after(WAIT_S):
            # Published after the wait began: the delivery wakes it.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn.publish, subject, b"later")
                msg = await conn.next_msg_before(sub, trio.current_time() + WAIT_S)
            assert msg is not None and msg.payload == b"later"
            # Already buffered: returned at once.
            await conn.publish(subject, b"buffered")
            await conn.flush()
            msg = await conn.next_msg_before(sub, trio.current_time() + WAIT_S)
            assert msg is not None and msg.payload == b"buffered"
            # Nothing comes: None, at the deadline and not before.
            deadline = trio.current_time() + SHORT_S
            assert await conn.next_msg_before(sub, deadline) is None
            assert trio.current_time() >= deadline
            assert conn.stats().pending_requests == 0
            # The subscription still delivers afterwards.
            await conn.publish(subject, b"after")
            msg = await conn.next_msg_before(sub, trio.current_time() + WAIT_S)
            assert msg is not None and msg.payload == b"after"


async def test_a_cancelled_wait_takes_nothing_and_a_closed_subscription_ends(
    nats_url: str,
) -> None:
    subject = _subject()
    async with open_connection(nats_url) as conn, conn.subscribe(subject) as sub:
        await conn.flush()
        with trio.fail_after(WAIT_S):
            with trio.move_on_after(SHORT_S) as scope:
                await conn.next_msg_before(sub, trio.current_time() + WAIT_S)
            assert scope.cancelled_caught
            await conn.publish(subject, b"kept")
            msg = await conn.next_msg_before(sub, trio.current_time() + WAIT_S)
            assert msg is not None and msg.payload == b"kept"
            assert sub.delivered == 1 and sub.buffered == 0
            # Closed while waiting: the wait ends with EndOfChannel, not at its deadline.
            ended = trio.Event()

            async def wait_for_end() -> None:
                try:
                    await conn.next_msg_before(sub, trio.current_time() + WAIT_S)
                except trio.EndOfChannel:
                    ended.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_for_end)
                await trio.testing.wait_all_tasks_blocked()
                sub.unsubscribe()
            assert ended.is_set()


async def test_two_waiters_get_a_message_each(nats_url: str) -> None:
    subject = _subject()
    async with open_connection(nats_url) as conn, conn.subscribe(subject) as sub:
        await conn.flush()
        got: list[bytes] = []

        async def wait_one() -> None:
            msg = await conn.next_msg_before(sub, trio.current_time() + WAIT_S)
            assert msg is not None
            got.append(msg.payload)

        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_one)
                nursery.start_soon(wait_one)
                await trio.testing.wait_all_tasks_blocked()
                await conn.publish(subject, b"one")
                await conn.publish(subject, b"two")
        assert sorted(got) == [b"one", b"two"]
