"""``Transport.pull``: a worker's puller, whose places bound what it asks for.

Every transport: an ask brings deliveries up to the places asked, an ack with next acks the
delivery and brings the next one into its place, an ask that nothing fills gives its places
back through ``on_release`` once it expires, and leaving gives back every place still asked
and acks plainly from then on. What only the native transport does (the ack and the pull
request in one message, no pull request counted) is checked at the end.
"""

from __future__ import annotations

import json
import secrets

import pytest
import trio

from dagnats_trio.protocol.layout import HISTORY_STREAM, history_subject
from dagnats_trio.transport import Delivery, Transport, TrioNatsTransport, _trio_nats_pulls

from .test_conformance import ARRIVAL_S, SHORT_WAIT_S, TEST_BOUND_S, history_consumer

#: An AckWait no test waits out: a message seen again sooner was given back, not expired.
LONG_ACK_WAIT_S = 60.0
#: The pull requests' expiry in these tests (a worker's is 1 s).
EXPIRES_S = 0.5


async def _ack_pending(t: Transport, durable: str) -> tuple[int, int]:
    """The consumer's deliveries not acked yet, and its acked floor (stream sequence), as a real
    server reports them (the simulation answers no consumer info)."""
    info = json.loads(await t.request(f"$JS.API.CONSUMER.INFO.{HISTORY_STREAM}.{durable}", b""))
    return int(info["num_ack_pending"]), int(info["ack_floor"]["stream_seq"])


async def test_an_ack_with_next_acks_and_brings_the_next_delivery(
    transport: Transport, clock: object, uid: str, backend: str
) -> None:
    durable = await history_consumer(transport, uid, ack_wait_s=LONG_ACK_WAIT_S)
    released: list[int] = []
    first_seq = await transport.publish(history_subject(uid), b"first")
    with trio.fail_after(TEST_BOUND_S):
        async with transport.pull(
            HISTORY_STREAM, durable, expires_s=ARRIVAL_S, on_release=released.append
        ) as puller:
            await puller.ask(1)
            assert puller.asked == 1
            (first,) = await puller.fetch(ARRIVAL_S)
            assert (first.data, puller.asked) == (b"first", 0)
            assert puller.ack_next(first)
            assert puller.asked == 1
            second_seq = await transport.publish(history_subject(uid), b"second")
            (second,) = await puller.fetch(ARRIVAL_S)
            assert (second.data, second.stream_seq, second.num_delivered) == (
                b"second",
                second_seq,
                1,
            )
            assert puller.asked == 0
            # Nothing asked: a fetch answers at once, with nothing.
            assert await puller.fetch(ARRIVAL_S) == []
            if backend != "sim":
                assert await _ack_pending(transport, durable) == (1, first_seq)
            await second.ack()
    assert released == []


async def test_an_ask_nothing_fills_gives_its_places_back_when_it_expires(
    transport: Transport, clock: object, uid: str, backend: str
) -> None:
    durable = await history_consumer(transport, uid, ack_wait_s=LONG_ACK_WAIT_S)
    released: list[int] = []
    with trio.fail_after(TEST_BOUND_S):
        async with transport.pull(
            HISTORY_STREAM, durable, expires_s=EXPIRES_S, on_release=released.append
        ) as puller:
            await puller.ask(3)
            while puller.asked:
                assert await puller.fetch(ARRIVAL_S) == []
            assert released == [3]
            # Given back, the places bring nothing more: a message stored now stays unpulled.
            await transport.publish(history_subject(uid), b"later")
            assert await puller.fetch(SHORT_WAIT_S) == []
        (later,) = await transport.fetch(HISTORY_STREAM, durable, 1, ARRIVAL_S)
    assert (later.data, later.num_delivered) == (b"later", 1)


async def test_leaving_releases_what_is_asked_and_later_acks_ask_for_nothing(
    transport: Transport, clock: object, uid: str, backend: str
) -> None:
    """A puller left (its worker going) gives back every place still asked, and an ack with
    next made after it is a plain ack: the message stored next is fetched by the next loop
    at once, as its first delivery (not pulled to the worker that left)."""
    durable = await history_consumer(transport, uid, ack_wait_s=LONG_ACK_WAIT_S)
    released: list[int] = []
    for body in (b"a", b"b"):
        await transport.publish(history_subject(uid), body)
    with trio.fail_after(TEST_BOUND_S):
        async with transport.pull(
            HISTORY_STREAM, durable, expires_s=ARRIVAL_S, on_release=released.append
        ) as puller:
            await puller.ask(2)
            got = await puller.fetch(ARRIVAL_S)
            while len(got) < 2:
                got += await puller.fetch(ARRIVAL_S)
            a, b = got
            assert (a.data, b.data, puller.asked) == (b"a", b"b", 0)
            assert puller.ack_next(a)
            assert puller.asked == 1
        assert released == [1]
        assert puller.asked == 0
        assert not puller.ack_next(b)
        await transport.publish(history_subject(uid), b"next")
        (nxt,) = await transport.fetch(HISTORY_STREAM, durable, 1, ARRIVAL_S)
    assert (nxt.data, nxt.num_delivered) == (b"next", 1)
    if backend != "sim":
        assert await _ack_pending(transport, durable) == (1, b.stream_seq)


async def test_a_puller_with_on_delivery_hands_it_every_delivery_in_order(
    transport: Transport, clock: object, uid: str, backend: str
) -> None:
    """With ``on_delivery`` every delivery goes to it (the fetch returns []), in the order
    they came, before the fetch that waits for them returns; the places are kept as without
    it (an ack with next asks for one, an ask nothing fills is released at its expiry), and
    nothing is handed once the puller is left."""
    durable = await history_consumer(transport, uid, ack_wait_s=LONG_ACK_WAIT_S)
    released: list[int] = []
    handed: list[Delivery] = []
    for body in (b"a", b"b"):
        await transport.publish(history_subject(uid), body)
    with trio.fail_after(TEST_BOUND_S):
        async with transport.pull(
            HISTORY_STREAM,
            durable,
            expires_s=EXPIRES_S,
            on_release=released.append,
            on_delivery=handed.append,
        ) as puller:
            await puller.ask(2)
            while puller.asked:
                assert await puller.fetch(ARRIVAL_S) == []
            assert [d.data for d in handed] == [b"a", b"b"]
            a, b = handed
            assert puller.ack_next(a)
            assert puller.asked == 1
            await transport.publish(history_subject(uid), b"c")
            while puller.asked:
                assert await puller.fetch(ARRIVAL_S) == []
            assert [d.data for d in handed] == [b"a", b"b", b"c"]
            c = handed[2]
            assert c.num_delivered == 1
            assert released == []
            # Nothing comes for this one: its place is released at its expiry.
            await puller.ask(1)
            while puller.asked:
                assert await puller.fetch(ARRIVAL_S) == []
            assert released == [1]
        await transport.publish(history_subject(uid), b"d")
        (d,) = await transport.fetch(HISTORY_STREAM, durable, 1, ARRIVAL_S)
        for delivery in (b, c, d):
            await delivery.ack()
    assert len(handed) == 3
    assert (d.data, d.num_delivered) == (b"d", 1)


async def test_the_native_puller_hands_a_delivery_over_without_a_fetch(
    trio_transport: TrioNatsTransport,
) -> None:
    """On the native transport the connection's reader hands the delivery to ``on_delivery``:
    no task of the puller's wakes for it (no fetch is even waiting here)."""
    t = trio_transport
    uid = f"handed{secrets.token_hex(4)}"
    durable = await history_consumer(t, uid, ack_wait_s=LONG_ACK_WAIT_S)
    arrived = trio.Event()
    handed: list[tuple[Delivery, trio.lowlevel.Task]] = []

    def on_delivery(delivery: Delivery) -> None:
        handed.append((delivery, trio.lowlevel.current_task()))
        arrived.set()

    with trio.fail_after(TEST_BOUND_S):
        async with t.pull(
            HISTORY_STREAM, durable, expires_s=ARRIVAL_S, on_release=print, on_delivery=on_delivery
        ) as p:
            await p.ask(1)
            await t.publish(history_subject(uid), b"first")
            await arrived.wait()
            assert p.asked == 0
            ((first, task),) = handed
            assert task is not trio.lowlevel.current_task()
            assert first.data == b"first"
            await first.ack()


async def test_an_ack_with_next_is_one_message_on_the_native_transport(
    trio_transport: TrioNatsTransport,
) -> None:
    """The native puller's ack carries the pull request: the second delivery costs no request
    of its own (none counted as a round trip; the worker's socket writes per task are counted
    in tests/worker/test_ack_next.py)."""
    t = trio_transport
    uid = f"acknext{secrets.token_hex(4)}"
    durable = await history_consumer(t, uid, ack_wait_s=LONG_ACK_WAIT_S)
    await t.publish(history_subject(uid), b"first")
    with trio.fail_after(TEST_BOUND_S):
        async with t.pull(HISTORY_STREAM, durable, expires_s=ARRIVAL_S, on_release=print) as p:
            await p.ask(1)
            (first,) = await p.fetch(ARRIVAL_S)
            trips = t.round_trips
            assert p.ack_next(first)
            await t.publish(history_subject(uid), b"second")
            (second,) = await p.fetch(ARRIVAL_S)
            await second.ack()
    print(f"round trips for the second delivery: {t.round_trips - trips} (the publish and the ack)")
    assert second.data == b"second"
    assert t.round_trips - trips == 2  # the publish and the double ack: no pull request


async def test_a_native_puller_keeps_a_bounded_number_of_requests_waiting(
    trio_transport: TrioNatsTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``MAX_WAITING_REQUESTS`` (1 here) an ack with next acks plainly: each waiting
    request holds one of the consumer's ``max_waiting``, shared by every worker."""
    monkeypatch.setattr(_trio_nats_pulls, "MAX_WAITING_REQUESTS", 1)
    t = trio_transport
    uid = f"acknextcap{secrets.token_hex(4)}"
    durable = await history_consumer(t, uid, ack_wait_s=LONG_ACK_WAIT_S)
    for body in (b"a", b"b"):
        await t.publish(history_subject(uid), body)
    released: list[int] = []
    with trio.fail_after(TEST_BOUND_S):
        async with t.pull(
            HISTORY_STREAM, durable, expires_s=ARRIVAL_S, on_release=released.append
        ) as p:
            await p.ask(2)
            got = await p.fetch(ARRIVAL_S)
            while len(got) < 2:
                got += await p.fetch(ARRIVAL_S)
            a, b = got
            assert p.ack_next(a)
            assert not p.ack_next(b)  # acked plainly: one request waits already
            assert p.asked == 1
        assert released == [1]
        assert await _ack_pending(t, durable) == (0, b.stream_seq)
