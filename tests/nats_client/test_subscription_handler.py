"""A subscription with a handler (``on_msg``): the connection's reader hands it each message
in its own frame (nothing buffered, no consumer task woken per message), and the consumer
waits in ``Connection.next_msg_before`` until the handler wakes it, its deadline or the close.
On a real nats-server.
"""

from __future__ import annotations

import uuid
from typing import Final

import trio
import trio.testing

from dagnats_trio.nats import Msg, open_connection

WAIT_S: Final = 20.0
#: A deadline short enough for the suite, long enough that no answer is in flight.
SHORT_S: Final = 0.2
#: Messages the handler test publishes; the handler wakes its consumer at the last one.
MESSAGES: Final = 5


def _subject() -> str:
    return f"subh.{uuid.uuid4().hex[:12]}"


async def test_the_reader_hands_each_message_to_the_handler_and_wakes_no_one_per_message(
    nats_url: str,
) -> None:
    subject = _subject()
    got: list[bytes] = []
    handled_in: set[trio.lowlevel.Task] = set()
    woken = 0

    async with open_connection(nats_url) as conn:

        def on_msg(msg: Msg) -> None:
            got.append(msg.payload)
            handled_in.add(trio.lowlevel.current_task())
            if len(got) == MESSAGES:
                sub.wake()

        async def wait_for_all() -> None:
            nonlocal woken
            while len(got) < MESSAGES:
                # Woken once, by the handler at the last message (not at the deadline).
                assert await conn.next_msg_before(sub, trio.current_time() + WAIT_S) is None
                woken += 1

        async with conn.subscribe(subject, on_msg=on_msg) as sub:
            await conn.flush()
            with trio.fail_after(WAIT_S):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(wait_for_all)
                    # The waiter waits before the first message can arrive: the reader may
                    # hand all of them over while the publishes below yield.
                    await trio.testing.wait_all_tasks_blocked()
                    for i in range(MESSAGES):
                        await conn.publish(subject, str(i).encode())
            assert got == [str(i).encode() for i in range(MESSAGES)]
            assert woken == 1
            assert (sub.delivered, sub.buffered, sub.dropped) == (MESSAGES, 0, 0)
            # Handled in the reader's task, not in this one.
            assert len(handled_in) == 1 and trio.lowlevel.current_task() not in handled_in
            # Nothing wakes it: None at the deadline and not before.
            deadline = trio.current_time() + SHORT_S
            with trio.fail_after(WAIT_S):
                assert await conn.next_msg_before(sub, deadline) is None
            assert trio.current_time() >= deadline


async def test_a_handled_subscription_closed_while_waited_on_ends_the_wait(nats_url: str) -> None:
    subject = _subject()
    got: list[bytes] = []
    async with open_connection(nats_url) as conn:
        async with conn.subscribe(subject, on_msg=lambda msg: got.append(msg.payload)) as sub:
            await conn.flush()
            ended = trio.Event()

            async def wait_for_end() -> None:
                try:
                    await conn.next_msg_before(sub, trio.current_time() + WAIT_S)
                except trio.EndOfChannel:
                    ended.set()

            with trio.fail_after(WAIT_S):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(wait_for_end)
                    await trio.testing.wait_all_tasks_blocked()
                    sub.unsubscribe()
            assert ended.is_set()
        # Unsubscribed: a message published now reaches no handler.
        await conn.publish(subject, b"late")
        await conn.flush()
    assert got == []
