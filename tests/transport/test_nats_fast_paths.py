"""NatsTransport's pull inbox (a plain subscription whose public ``cb`` feeds Trio).

What it promises is pinned here: a pull fetch returns as soon as messages are there (it does not
wait for the server's closing status) and loses none of a request's deliveries.
"""

from __future__ import annotations

from typing import Any

import trio

from dagnats_trio.protocol.layout import HISTORY_STREAM, history_subject
from dagnats_trio.transport import ConsumerConfig, NatsTransport
from dagnats_trio.transport._nats_pull import PullInbox, PullRequest

#: Bound on each test.
TEST_BOUND_S = 10.0
#: A fetch's own timeout, far longer than a fetch that finds messages may take.
LONG_FETCH_S = 5.0
#: A fetch's timeout when nothing is there.
SHORT_FETCH_S = 0.3


class _Msg:
    """The few attributes of nats-py's ``Msg`` the pull inbox reads."""

    def __init__(self, reply: str, headers: dict[str, str] | None = None) -> None:
        self.reply = reply
        self.headers = headers


async def _consumer(transport: NatsTransport, uid: str) -> str:
    durable = f"fast-{uid}"
    await transport.ensure_consumer(
        ConsumerConfig(
            stream=HISTORY_STREAM,
            durable=durable,
            filter_subject=history_subject(uid),
            ack_wait_s=5.0,
        )
    )
    return durable


async def test_fetch_returns_what_is_there_without_waiting_for_the_batch(
    nats_transport: NatsTransport,
) -> None:
    uid = "fastpull1"
    durable = await _consumer(nats_transport, uid)
    for i in range(3):
        await nats_transport.publish(history_subject(uid), f"m{i}".encode())
    with trio.fail_after(TEST_BOUND_S):
        start = trio.current_time()
        got = await nats_transport.fetch(HISTORY_STREAM, durable, 16, LONG_FETCH_S)
        assert trio.current_time() - start < LONG_FETCH_S / 2
        # The three may come in one chunk or several; whatever is left comes next.
        while len(got) < 3:
            got += await nats_transport.fetch(HISTORY_STREAM, durable, 16, LONG_FETCH_S)
        assert [d.data for d in got] == [b"m0", b"m1", b"m2"]
        for d in got:
            await d.ack()
        empty_start = trio.current_time()
        assert await nats_transport.fetch(HISTORY_STREAM, durable, 16, SHORT_FETCH_S) == []
        assert trio.current_time() - empty_start >= SHORT_FETCH_S / 2


async def test_a_waiting_fetch_wakes_on_the_first_message(nats_transport: NatsTransport) -> None:
    uid = "fastpull2"
    durable = await _consumer(nats_transport, uid)
    with trio.fail_after(TEST_BOUND_S):
        async with trio.open_nursery() as nursery:

            async def publish_later() -> None:
                await trio.sleep(0.2)
                await nats_transport.publish(history_subject(uid), b"late")

            nursery.start_soon(publish_later)
            start = trio.current_time()
            got = await nats_transport.fetch(HISTORY_STREAM, durable, 8, LONG_FETCH_S)
            assert [d.data for d in got] == [b"late"]
            assert trio.current_time() - start < LONG_FETCH_S / 2


def test_pull_inbox_counts_deliveries_against_the_oldest_request() -> None:
    inbox = PullInbox("_INBOX.x", "$JS.API.CONSUMER.MSG.NEXT.S.D")
    first, second = PullRequest(2), PullRequest(5)
    inbox.open.extend([first, second])
    m1, m2, m3 = (_Msg(f"$JS.ACK.{i}") for i in range(3))
    for m in (m1, m2, m3):
        inbox.deliver(m)  # type: ignore[arg-type]
    assert list(inbox.open) == [second]  # the first got its batch
    inbox.deliver(_Msg("", {"Status": "100"}))  # type: ignore[arg-type]  # heartbeat
    assert list(inbox.open) == [second]
    inbox.deliver(_Msg("", {"Status": "404"}))  # type: ignore[arg-type]
    assert list(inbox.open) == [] and inbox.failure is None
    taken: list[Any] = [*inbox.take(2), None, *inbox.take(2), None, *inbox.take(2)]
    assert taken == [m1, m2, None, m3, None]
    inbox.open.append(PullRequest(1))
    failure = _Msg("", {"Status": "503"})
    inbox.deliver(failure)  # type: ignore[arg-type]
    assert inbox.failure is failure and not inbox.open


def test_pull_inbox_forgets_expired_requests_up_to_one() -> None:
    inbox = PullInbox("_INBOX.x", "$JS.API.CONSUMER.MSG.NEXT.S.D")
    a, b, c = PullRequest(1), PullRequest(1), PullRequest(1)
    inbox.open.extend([a, b, c])
    inbox.forget_through(b)
    assert list(inbox.open) == [c]
    inbox.forget_through(b)  # already gone: nothing else is dropped
    assert list(inbox.open) == [c]
