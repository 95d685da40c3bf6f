"""Pull inboxes of ``NatsTransport``: deliveries handed from nats-py's read loop to Trio, and
the :class:`NatsDelivery` each becomes.

A fetch publishes a pull request whose reply subject is the consumer's inbox; the server answers
with deliveries and ends the request with a status message. :class:`PullInbox` keeps what came
and which requests are still open, so a fetch knows when to stop waiting without losing a
delivery that arrives late.
"""

from __future__ import annotations

import json
from collections import deque
from typing import TYPE_CHECKING, final

import trio
from nats.aio.msg import Msg

from ._errors import TransportError
from ._jetstream_wire import api_error, ns
from ._nats_hop import headers_of
from ._values import Headers

if TYPE_CHECKING:
    from ._nats import NatsTransport

STATUS = "Status"

#: Statuses that end a pull request without an error: no messages (404), expired (408), and the
#: conflicts nats-py also treats as temporary (409: leadership change, consumer deleted, limits).
_PULL_END_STATUSES = frozenset({"404", "408", "409"})
_HEARTBEAT_STATUS = "100"


def status_error(msg: Msg, what: str) -> TransportError:
    """The error a pull request's status message carries (nats-py's ``APIError.from_msg``)."""
    headers = msg.headers or {}
    status = headers.get(STATUS, "")
    code = int(status) if status.isdigit() else None
    return api_error(code, None, headers.get("Description", ""), what)


class PullRequest:
    """One pull request still open on the server, with the deliveries it may still bring."""

    __slots__ = ("owed",)

    def __init__(self, owed: int) -> None:
        self.owed = owed


class PullInbox:
    """One pull consumer's inbox: deliveries handed from nats-py's read loop to Trio.

    nats-py's ``fetch`` costs a run of asyncio steps under trio-asyncio (the fetch task, the
    flusher, a queue get with a timeout per message) and, for a batch above 1, waits for the
    server's closing status after the last message. This inbox is instead fed by the callback
    of a plain subscription (nats-py's public ``cb``), which hands each message to the waiting
    Trio task. A fetch sends ``{"batch", "expires", "no_wait": true}`` (the server holds
    it until a first message, delivers what it has, then ends it with a 404), wakes on the first
    message and takes only what is already here. Deliveries of a request that arrive after its
    fetch returned stay in ``ready`` and the next fetch takes them first: none is dropped here.

    The server serves one consumer's waiting requests in the order they came, so the open
    requests are tracked in that order: a delivery counts against the oldest, a status ends it.
    That bookkeeping only decides when a fetch gives up early with []; it never loses a message.
    """

    def __init__(self, inbox: str, next_subject: str) -> None:
        self.inbox = inbox
        self.next_subject = next_subject
        self.ready: deque[Msg] = deque()
        self.open: deque[PullRequest] = deque()
        self.failure: Msg | None = None
        self._waiters: set[trio.lowlevel.Task] = set()

    async def on_msg(self, msg: Msg) -> None:
        """nats-py's subscription callback (asyncio side, in the Trio thread): never waits."""
        self.deliver(msg)

    def deliver(self, msg: Msg) -> None:
        if msg.reply:  # a delivery; a status has no reply subject
            self.ready.append(msg)
            if self.open:
                head = self.open[0]
                head.owed -= 1
                if head.owed <= 0:
                    self.open.popleft()
        else:
            status = msg.headers.get(STATUS) if msg.headers else None
            if status == _HEARTBEAT_STATUS:
                return
            if self.open:
                self.open.popleft()
            if status not in _PULL_END_STATUSES:
                self.failure = msg
        if self._waiters:
            waiters, self._waiters = self._waiters, set()
            for task in waiters:
                trio.lowlevel.reschedule(task)

    async def wait(self) -> None:
        """Until the next message or status arrives (the caller bounds the wait)."""
        task = trio.lowlevel.current_task()
        self._waiters.add(task)

        def abort(_: object) -> trio.lowlevel.Abort:
            self._waiters.discard(task)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def forget_through(self, request: PullRequest) -> None:
        """After a fetch's deadline: the server has expired this request and those before it."""
        if request in self.open:
            while self.open and self.open.popleft() is not request:
                pass

    def take(self, batch: int) -> list[Msg]:
        ready = self.ready
        return [ready.popleft() for _ in range(min(batch, len(ready)))]


@final
class NatsDelivery:
    """One delivery from a pull consumer; settles by publishing to the message's reply subject."""

    __slots__ = ("_reply", "_settled", "_transport", "data", "headers", "num_delivered",
                 "stream_seq", "subject")  # fmt: skip

    def __init__(self, transport: NatsTransport, msg: Msg) -> None:
        meta = msg.metadata
        self.subject: str = msg.subject
        self.data: bytes = msg.data
        self.headers: Headers = headers_of(msg)
        self.stream_seq: int = meta.sequence.stream
        self.num_delivered: int = meta.num_delivered
        self._reply: str = msg.reply
        self._transport = transport
        self._settled = False

    def __repr__(self) -> str:
        return (
            f"NatsDelivery(subject={self.subject!r}, stream_seq={self.stream_seq}, "
            f"num_delivered={self.num_delivered})"
        )

    async def ack(self) -> None:
        if self._settled:
            return
        await self._transport._request(self._reply, b"+ACK", None, "ack")
        self._settled = True

    def ack_nowait(self) -> None:
        if self._settled:
            return
        self._transport.core_publish_soon(self._reply, b"+ACK")
        self._settled = True

    async def nak(self, delay_s: float | None = None) -> None:
        if self._settled:
            return
        payload = b"-NAK"
        if delay_s is not None and delay_s > 0:
            payload += b" " + json.dumps({"delay": ns(delay_s)}).encode()
        await self._transport.core_publish(self._reply, payload)
        self._settled = True

    async def in_progress(self) -> None:
        if not self._settled:
            await self._transport.core_publish(self._reply, b"+WPI")

    async def term(self) -> None:
        if self._settled:
            return
        await self._transport.core_publish(self._reply, b"+TERM")
        self._settled = True
