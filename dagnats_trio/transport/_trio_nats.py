"""``TrioNatsTransport``: the transport on the native Trio client (``dagnats_trio.nats``).

No asyncio, no trio-asyncio, no private attribute of any other package: JetStream is reached
with plain requests to ``$JS.API.*`` on one :class:`~dagnats_trio.nats.Connection`, whose calls
are cancellation-safe at every await. The JetStream shapes (configs, error codes, KV
conventions) are the ones ``NatsTransport`` uses, so both pass one conformance suite.

This module holds the requests (each counted, its errors mapped), the fetch and the pull
consumers' inboxes; core NATS and the KV watch are in ``_trio_nats_core`` (a base class), a
``consume`` feed in ``_trio_nats_feed``, a worker's puller in ``_trio_nats_pulls``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import final

import trio

from ..nats import Connection, Msg, NatsError, ProtocolError, Pub
from ._errors import Closed, TemporarilyUnavailable, TransportError
from ._interface import Delivery, Feed, Puller
from ._jetstream import JetStreamOverRequests
from ._jetstream_batch import DirectReply, JetStreamBatches, WireMsg
from ._jetstream_wire import FETCH_GRACE_S, PULL_EXPIRES_MARGIN_NS, api_error, check_name, ns
from ._trio_nats_batch import gather
from ._trio_nats_core import CLOSE_TIMEOUT_S, TrioNatsCore
from ._trio_nats_feed import FEED_BUFFER_MSGS, StandingPull
from ._trio_nats_msgs import Pull, map_error, wire_headers
from ._trio_nats_pulls import PULLER_BUFFER_MSGS, TrioNatsPuller

#: Deliveries a pull inbox buffers (more than any batch the runtime asks for).
PULL_BUFFER_MSGS = 4096

#: Pull request ends: no messages (404), expired (408), a limit or leadership change (409).
_PULL_END_STATUSES = frozenset({404, 408})


@final
class TrioNatsTransport(JetStreamOverRequests, JetStreamBatches, TrioNatsCore):
    """The :class:`~dagnats_trio.transport.Transport` on the native client."""

    def __init__(self, conn: Connection, request_timeout_s: float) -> None:
        self._conn = conn
        self._timeout_s = request_timeout_s
        self._round_trips = 0
        self._closed = False
        self._pulls: dict[tuple[str, str], Pull] = {}
        self._pull_lock = trio.Lock()
        self._stack = AsyncExitStack()

    @property
    def round_trips(self) -> int:
        return self._round_trips

    @property
    def max_payload_bytes(self) -> int:
        return self._conn.max_payload_bytes

    def _count_round_trip(self) -> None:
        """A request sent by a helper of this transport (a feed's pull request)."""
        self._round_trips += 1

    @property
    def open_subscriptions(self) -> int:
        """Subscriptions this transport's connection holds right now (the request inbox, pull
        inboxes, core subscriptions, watches); for tests and diagnostics: a caller that left
        without releasing one shows here."""
        return self._conn.stats().subscriptions

    @property
    def connection(self) -> Connection:
        """The wire connection (for tests and diagnostics)."""
        return self._conn

    # --- requests ------------------------------------------------------------------------------

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise Closed(f"{what}: transport closed")

    async def _check_connected(self, what: str) -> None:
        self._check_open(what)
        if not self._conn.is_connected:
            # Queued now, the request would go out after a reconnect, maybe after its caller
            # gave up on it: a journal append the caller counted as failed could then still be
            # stored. Fail it at once; callers retry transient errors with a backoff.
            await trio.lowlevel.checkpoint()
            raise TemporarilyUnavailable(f"{what}: not connected to NATS")

    async def _js_request(
        self,
        subject: str,
        payload: bytes,
        headers: Mapping[str, str] | None,
        what: str,
        timeout_s: float | None = None,
    ) -> bytes:
        # Every request of this transport comes here, in one coroutine frame: each frame
        # between a caller and the connection is passed through again when its reply wakes it.
        if self._closed or not self._conn.is_connected:
            await self._check_connected(what)
        self._round_trips += 1
        try:
            msg = await self._conn.request(
                subject,
                payload,
                # The mapping itself: the connection encodes its fields as one block (no
                # ``Headers`` built per request); an empty one sends none.
                headers=headers if headers else None,
                timeout_s=self._timeout_s if timeout_s is None else timeout_s,
            )
        except (NatsError, ProtocolError) as exc:
            raise map_error(exc, what) from None
        return msg.payload

    async def _js_requests(
        self, requests: Sequence[tuple[str, bytes, Mapping[str, str] | None]], what: str
    ) -> list[bytes | TransportError]:
        # One write to the socket and no task per request (``Connection.request_each``).
        if self._closed or not self._conn.is_connected:
            await self._check_connected(what)
        self._round_trips += len(requests)
        pubs = [Pub(s, p, None, wire_headers(h) if h else None) for s, p, h in requests]
        try:
            answers = await self._conn.request_each(pubs, timeout_s=self._timeout_s)
        except (NatsError, ProtocolError) as exc:
            raise map_error(exc, what) from None
        return [a.payload if isinstance(a, Msg) else map_error(a, what) for a in answers]

    async def _js_batch(self, wire: Sequence[WireMsg], what: str) -> bytes:
        # The messages before the commit go out in the commit request's own write: the server
        # answers none of them and holds them until the commit (or abandons them). A cancelled
        # caller sends nothing; a message the server would refuse fails before any is queued.
        await self._check_connected(what)
        self._round_trips += 1
        *uncommitted, commit = wire
        try:
            msg = await self._conn.request(
                commit.subject,
                commit.data,
                headers=wire_headers(commit.headers),
                timeout_s=self._timeout_s,
                preceding=[
                    Pub(m.subject, m.data, None, wire_headers(m.headers)) for m in uncommitted
                ],
            )
        except (NatsError, ProtocolError) as exc:
            raise map_error(exc, what) from None
        return msg.payload

    async def _js_gather(
        self, subject: str, payload: bytes, what: str, max_replies: int
    ) -> list[DirectReply]:
        await self._check_connected(what)
        self._round_trips += 1
        try:
            return await gather(
                self._conn,
                subject,
                payload,
                max_replies=max_replies,
                timeout_s=self._timeout_s,
                what=what,
            )
        except (NatsError, ProtocolError) as exc:
            raise map_error(exc, what) from None

    # --- durable pull consumers ----------------------------------------------------------------

    async def _pull(self, stream: str, durable: str) -> Pull:
        key = (stream, durable)
        pull = self._pulls.get(key)
        if pull is not None:
            return pull
        async with self._pull_lock:
            pull = self._pulls.get(key)
            if pull is None:
                api = f"{check_name('stream', stream)}.{check_name('durable', durable)}"
                await self._api(f"$JS.API.CONSUMER.INFO.{api}", {}, f"consumer {stream}/{durable}")
                prefix = self._conn.new_inbox()
                sub = await self._stack.enter_async_context(
                    self._conn.subscribe(prefix + ".*", max_buffered_msgs=PULL_BUFFER_MSGS)
                )
                pull = Pull(sub, prefix, f"$JS.API.CONSUMER.MSG.NEXT.{api}")
                self._pulls[key] = pull
            return pull

    async def fetch(
        self, stream: str, durable: str, batch: int, timeout_s: float
    ) -> list[Delivery]:
        if batch < 1:
            raise ValueError(f"fetch batch must be at least 1, got {batch}")
        what = f"fetch {stream}/{durable}"
        self._check_open(what)
        pull = await self._pull(stream, durable)
        taken = pull.taken
        sub = pull.sub
        while len(taken) < batch and sub.buffered:  # left by an earlier request
            msg = sub.next_msg_nowait()
            if msg.status is None and msg.reply is not None:
                taken.append(msg)
        if taken:
            await trio.lowlevel.checkpoint()
            return pull.hand_out(self, batch)
        reply = f"{pull.prefix}.{next(pull.tokens)}"
        self._round_trips += 1
        try:
            # The wait for the deliveries below is the schedule point; a cancelled fetch
            # still sends nothing.
            await trio.lowlevel.checkpoint_if_cancelled()
            data = pull.request_body(batch, ns(timeout_s) - PULL_EXPIRES_MARGIN_NS)
            if not self._conn.try_publish(pull.next_subject, data, reply=reply):
                await self._conn.publish(pull.next_subject, data, reply=reply)
        except (NatsError, ProtocolError) as exc:
            raise map_error(exc, what) from None
        # Deliveries wait in ``pull.taken`` until returned: a fetch cancelled while waiting
        # for more leaves them to the next fetch instead of losing them until their AckWait.
        # What is buffered is taken without awaiting: the server's answer usually comes in one
        # read (the deliveries and the end-of-request status), and ``receive`` would yield to
        # the scheduler once per buffered message. The fetch waits on the server at least once
        # (nothing is buffered for this request before it is sent), so it still checkpoints.
        # The wait is bounded by a deadline the connection watches (no cancel scope entered
        # and left per fetch: most of a short fetch's cost).
        deadline = trio.current_time() + timeout_s + FETCH_GRACE_S
        waited = False
        while len(taken) < batch:
            if sub.buffered:  # no WouldBlock raised and caught to find out
                msg = sub.next_msg_nowait()
            else:
                waited = True
                try:
                    got = await self._conn.next_msg_before(sub, deadline)
                except trio.EndOfChannel:
                    raise Closed(f"{what}: transport closed") from None
                if got is None:
                    break  # the deadline passed: what was taken so far
                msg = got
            if msg.status is None:
                if msg.reply is not None:
                    taken.append(msg)
                continue
            if msg.subject != reply:
                continue  # the end of an earlier fetch
            if msg.status in _PULL_END_STATUSES or taken:
                break
            description = msg.headers.description if msg.headers else ""
            raise api_error(msg.status, None, description, what)
        if not waited:
            await trio.lowlevel.cancel_shielded_checkpoint()
        return pull.hand_out(self, batch)

    @asynccontextmanager
    async def consume(self, stream: str, durable: str, batch: int) -> AsyncIterator[Feed]:
        """A :class:`StandingPull` on an inbox of its own; leaving naks what it holds."""
        if batch < 1:
            raise ValueError(f"fetch batch must be at least 1, got {batch}")
        what = f"fetch {stream}/{durable}"
        self._check_open(what)
        api = f"{check_name('stream', stream)}.{check_name('durable', durable)}"
        # Checked first: pulling from a missing consumer would just time out every fetch.
        await self._api(f"$JS.API.CONSUMER.INFO.{api}", {}, f"consumer {stream}/{durable}")
        prefix = self._conn.new_inbox()
        async with self._conn.subscribe(prefix + ".*", max_buffered_msgs=FEED_BUFFER_MSGS) as sub:
            feed = StandingPull(self, sub, prefix, f"$JS.API.CONSUMER.MSG.NEXT.{api}", batch, what)
            try:
                yield feed
            finally:
                await feed.give_back()

    @asynccontextmanager
    async def pull(
        self,
        stream: str,
        durable: str,
        *,
        expires_s: float,
        on_release: Callable[[int], None],
        on_delivery: Callable[[Delivery], None] | None = None,
    ) -> AsyncIterator[Puller]:
        """A :class:`TrioNatsPuller` on an inbox of its own; leaving gives back what it holds.
        With ``on_delivery`` the inbox's messages go to the puller's handler in the
        connection's reader (``Subscription``'s ``on_msg``)."""
        if not expires_s > 0:
            raise ValueError(f"expires_s must be positive, got {expires_s!r}")
        what = f"fetch {stream}/{durable}"
        self._check_open(what)
        api = f"{check_name('stream', stream)}.{check_name('durable', durable)}"
        # Checked first: pulling from a missing consumer would just time out every fetch.
        await self._api(f"$JS.API.CONSUMER.INFO.{api}", {}, f"consumer {stream}/{durable}")
        prefix = self._conn.new_inbox()
        puller = TrioNatsPuller(
            self,
            prefix,
            f"$JS.API.CONSUMER.MSG.NEXT.{api}",
            expires_s,
            on_release,
            on_delivery,
            what,
        )
        async with self._conn.subscribe(
            prefix + ".*",
            max_buffered_msgs=PULLER_BUFFER_MSGS,
            on_msg=None if on_delivery is None else puller.handle,
        ) as sub:
            puller.attach(sub)
            try:
                yield puller
            finally:
                await puller.leave()

    # --- lifecycle -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT_S):
            await self._stack.aclose()
        self._pulls.clear()
