"""`NatsTransport`: the :class:`Transport` protocol over nats-py, driven from Trio.

nats-py is asyncio code; trio-asyncio runs its event loop inside the Trio run. Every call crosses
into asyncio exactly once (an asyncio task for a nats-py coroutine, ``_nats_hop.run_shielded``),
so the hop cost is paid once per round trip, and a cancelled Trio caller never cancels nats-py
midway. JetStream API requests are sent as plain requests on their API
subjects and their JSON answers read here: that is one hop and gives the server's ``err_code``
for the typed errors. Nothing asyncio-flavoured leaves this module: messages are copied into the
interface's values, deliveries wrap only the reply subject, errors are mapped.

Only the public APIs of nats-py, asyncio and trio-asyncio are used (``tests/
test_no_private_access.py`` scans for anything else): requests go through ``nc.request``,
deliveries through a subscription's ``cb``. That costs a few asyncio steps per round trip more
than writing to nats-py's socket and driving its parser by hand did; the native client
(``TrioNatsTransport``, the default) is the fast path.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from typing import Any, TypeVar, final

import trio
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import api as js_api
from nats.js.client import JetStreamContext

from ._errors import Closed, TemporarilyUnavailable, TransportError
from ._feed import fetch_feed
from ._fetch_puller import fetch_puller
from ._interface import Delivery, Feed, Puller
from ._jetstream import JetStreamOverRequests
from ._jetstream_batch import DirectReply, JetStreamBatches, WireMsg
from ._jetstream_wire import (
    FETCH_GRACE_S,
    PULL_EXPIRES_MARGIN_NS,
    check_name,
    is_delete_marker,
    json_error,
    kv_prefix,
    kv_stream,
    ns,
    watch_filter,
)
from ._max_payload import check_max_payload
from ._nats_batch import gather, send_batch
from ._nats_hop import hand_over, headers_of, run_detached, run_shielded
from ._nats_pull import NatsDelivery, PullInbox, PullRequest, status_error
from ._nats_subscriptions import CountedSubscriptions
from ._values import DEFAULT_REQUEST_TIMEOUT_S, CoreMsg, Headers, KvEntry

T = TypeVar("T")

#: Bound on closing (drain is not used: pending requests are abandoned on close).
CLOSE_TIMEOUT_S = 5.0
#: Core messages buffered between nats-py's callback and the Trio reader before backpressure.
SUBSCRIBE_BUFFER_MSGS = 256
#: KV changes buffered between nats-py's callback and the Trio reader before backpressure.
WATCH_BUFFER_ENTRIES = 256
#: How long an unused watch consumer lingers on the server after its subscriber vanished.
WATCH_INACTIVE_THRESHOLD_S = 60.0


@final
class NatsTransport(CountedSubscriptions, JetStreamOverRequests, JetStreamBatches):
    """:class:`Transport` over one nats-py connection; create with
    :func:`open_nats_py_transport` (or ``open_nats_transport(..., client="nats-py")``)."""

    def __init__(self, loop: Any, nc: NatsClient, request_timeout_s: float) -> None:
        self._loop = loop
        self._nc = nc
        self._js: JetStreamContext = nc.jetstream(timeout=request_timeout_s)
        self._timeout = request_timeout_s
        self._round_trips = 0
        self._closed = False
        self._pulls: dict[tuple[str, str], PullInbox] = {}
        self._kv_handles: dict[str, Any] = {}
        self._subscriptions = 0
        #: core publishes started and not waited on (``core_publish_soon``), held until done
        self._detached: set[asyncio.Task[Any]] = set()

    @property
    def round_trips(self) -> int:
        return self._round_trips

    @property
    def max_payload_bytes(self) -> int:
        return self._nc.max_payload

    # --- the one hop ---------------------------------------------------------------------------

    async def _aio(
        self,
        coro: Coroutine[Any, Any, T],
        what: str,
        undo: Callable[[T], Coroutine[Any, Any, object]] | None = None,
    ) -> T:
        """Run one nats-py coroutine on the asyncio side, mapping its errors; a cancelled
        caller leaves it running to its end and ``undo`` releases what it made (see
        :func:`~._nats_hop.run_shielded`)."""
        if self._closed:
            coro.close()
            raise Closed(f"{what}: transport closed")
        return await run_shielded(self._loop, coro, what, undo)

    async def _request(
        self,
        subject: str,
        payload: bytes,
        headers: dict[str, str] | None,
        what: str,
        timeout_s: float | None = None,
    ) -> Msg:
        if self._closed:
            raise Closed(f"{what}: transport closed")
        if headers:  # nats-py bounds the payload alone (see ``_max_payload``)
            check_max_payload(self._nc.max_payload, payload, headers, what)
        self._round_trips += 1
        timeout = self._timeout if timeout_s is None else timeout_s
        return await self._aio(
            self._nc.request(subject, payload, timeout=timeout, headers=headers), what
        )

    async def _js_request(
        self,
        subject: str,
        payload: bytes,
        headers: Mapping[str, str] | None,
        what: str,
        timeout_s: float | None = None,
    ) -> bytes:
        hdrs = dict(headers) if headers is not None else None
        return (await self._request(subject, payload, hdrs, what, timeout_s)).data

    async def _js_batch(self, wire: Sequence[WireMsg], what: str) -> bytes:
        await self._check_connected(what)
        self._round_trips += 1
        return (await self._aio(send_batch(self._nc, wire, self._timeout), what)).data

    async def _js_gather(
        self, subject: str, payload: bytes, what: str, max_replies: int
    ) -> list[DirectReply]:
        await self._check_connected(what)
        self._round_trips += 1
        replies = await self._aio(
            gather(
                self._nc,
                self._subscribe_counted,
                self._unsubscribe_counted,
                subject,
                payload,
                max_replies=max_replies,
                timeout_s=self._timeout,
            ),
            what,
        )
        if replies[-1].status is None:
            raise TransportError(f"{what}: more than {max_replies} answers")
        return replies

    async def _check_connected(self, what: str) -> None:
        """Closed, or TemporarilyUnavailable while reconnecting (nats-py would hold the
        messages and send them after the reconnect, maybe after the caller gave up)."""
        if self._closed:
            raise Closed(f"{what}: transport closed")
        if not self._nc.is_connected:
            await trio.lowlevel.checkpoint()
            raise TemporarilyUnavailable(f"{what}: not connected to NATS")

    @asynccontextmanager
    async def kv_watch(
        self, bucket: str, prefix: str = ""
    ) -> AsyncIterator[AsyncIterator[KvEntry]]:
        stream = kv_stream(bucket)
        strip = len(kv_prefix(bucket))
        send, receive = trio.open_memory_channel[KvEntry](WATCH_BUFFER_ENTRIES)

        async def on_msg(msg: Msg) -> None:
            key = msg.subject[strip:]
            if not key.startswith(prefix):
                return
            headers = headers_of(msg)
            entry = KvEntry(
                bucket=bucket,
                key=key,
                value=None if is_delete_marker(headers) else msg.data,
                revision=msg.metadata.sequence.stream,
            )
            await hand_over(self._loop, send, entry)

        async def watch() -> Any:  # asyncio side
            sub = await self._js.subscribe(
                watch_filter(bucket, prefix),
                stream=stream,
                cb=on_msg,
                ordered_consumer=True,
                deliver_policy=js_api.DeliverPolicy.NEW,
                inactive_threshold=WATCH_INACTIVE_THRESHOLD_S,
            )
            self._subscriptions += 1
            return sub

        self._round_trips += 1
        try:
            sub = await self._aio(watch(), f"watch {bucket!r}", self._unsubscribe_counted)
            try:
                async with receive:
                    yield receive
            finally:
                await self._quietly(self._unsubscribe_counted(sub))
        finally:
            send.close()
            receive.close()

    async def _quietly(self, coro: Coroutine[Any, Any, object]) -> None:
        """Cleanup that must neither hang nor fail the caller (runs shielded, bounded)."""
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(CLOSE_TIMEOUT_S),
            suppress(TransportError),
        ):
            await self._aio(coro, "cleanup")

    # --- durable pull consumers ----------------------------------------------------------------

    async def fetch(
        self, stream: str, durable: str, batch: int, timeout_s: float
    ) -> list[Delivery]:
        if batch < 1:
            raise ValueError(f"fetch batch must be at least 1, got {batch}")
        pull = self._pulls.get((stream, durable))
        if pull is None:
            pull = await self._bind(stream, durable)
        if pull.ready:  # left by an earlier request: no need to ask
            return [NatsDelivery(self, m) for m in pull.take(batch)]
        what = f"fetch {stream}/{durable}"
        if self._closed:
            raise Closed(f"{what}: transport closed")
        expires = ns(timeout_s) - PULL_EXPIRES_MARGIN_NS
        body: dict[str, Any] = {"batch": batch, "no_wait": True}
        if expires > 0:
            body["expires"] = expires
        request = PullRequest(batch)
        pull.open.append(request)
        pull.failure = None
        self._round_trips += 1
        try:
            await self._send(pull.next_subject, json.dumps(body).encode(), pull.inbox, what)
        except BaseException:
            pull.forget_through(request)
            raise
        with trio.move_on_after(timeout_s + FETCH_GRACE_S):
            while not pull.ready:
                failure = pull.failure
                if failure is not None:
                    pull.failure = None
                    raise status_error(failure, what)
                if request not in pull.open:  # ended (404/408) with nothing for us
                    return []
                await pull.wait()
            return [NatsDelivery(self, m) for m in pull.take(batch)]
        pull.forget_through(request)
        return []

    async def _bind(self, stream: str, durable: str) -> PullInbox:
        # Check the consumer first: pulling from a missing one would just time out every fetch.
        api = f"{check_name('stream', stream)}.{check_name('durable', durable)}"
        await self._api(f"$JS.API.CONSUMER.INFO.{api}", {}, f"consumer {stream}/{durable}")
        pull = self._pulls.get((stream, durable))
        if pull is None:  # (another task may have bound it meanwhile)
            pull = PullInbox(self._nc.new_inbox(), f"$JS.API.CONSUMER.MSG.NEXT.{api}")
            sub = await self._aio(
                self._subscribe_inbox(pull),
                f"bind {stream}/{durable}",
                self._unsubscribe_counted,
            )
            bound = self._pulls.setdefault((stream, durable), pull)
            if bound is not pull:  # another task bound it while this one subscribed
                await self._quietly(self._unsubscribe_counted(sub))
            pull = bound
        return pull

    async def _send(self, subject: str, payload: bytes, reply: str, what: str) -> None:
        """A core publish with a reply subject."""
        await self._aio(self._nc.publish(subject, payload, reply=reply), what)

    def consume(self, stream: str, durable: str, batch: int) -> AbstractAsyncContextManager[Feed]:
        """One :meth:`fetch` per fetch (no request kept waiting)."""
        return fetch_feed(self, stream, durable, batch)

    def pull(
        self,
        stream: str,
        durable: str,
        *,
        expires_s: float,
        on_release: Callable[[int], None],
        on_delivery: Callable[[Delivery], None] | None = None,
    ) -> AbstractAsyncContextManager[Puller]:
        """Fetches of its own (an ack with next is an ack and a place asked by the next fetch)."""
        return fetch_puller(
            self,
            stream,
            durable,
            expires_s=expires_s,
            on_release=on_release,
            on_delivery=on_delivery,
        )

    # --- core NATS -----------------------------------------------------------------------------

    async def core_publish(self, subject: str, data: bytes, headers: Headers | None = None) -> None:
        if headers:
            check_max_payload(self._nc.max_payload, data, headers, f"publish {subject!r}")
        await self._aio(
            self._nc.publish(subject, data, headers=dict(headers) if headers else None),
            f"publish {subject!r}",
        )

    def core_publish_soon(self, subject: str, data: bytes) -> None:
        """Start a core publish on the asyncio side and return at once (``ack_nowait``)."""
        what = f"publish {subject!r}"
        if self._closed:
            raise Closed(f"{what}: transport closed")
        run_detached(self._loop, self._nc.publish(subject, data), what, self._detached)

    @asynccontextmanager
    async def subscribe(
        self, subject: str, queue: str | None = None
    ) -> AsyncIterator[AsyncIterator[CoreMsg]]:
        send, receive = trio.open_memory_channel[CoreMsg](SUBSCRIBE_BUFFER_MSGS)

        async def on_msg(msg: Msg) -> None:
            core = CoreMsg(
                subject=msg.subject,
                data=msg.data,
                headers=headers_of(msg),
                reply=msg.reply or None,
            )
            await hand_over(self._loop, send, core)

        self._round_trips += 1  # the flush that makes the subscription live before we return
        try:
            sub = await self._aio(
                self._subscribe_live(subject, queue or "", on_msg),
                f"subscribe {subject!r}",
                self._unsubscribe_counted,
            )
            try:
                async with receive:
                    yield receive
            finally:
                await self._quietly(self._unsubscribe_counted(sub))
        finally:
            send.close()
            receive.close()

    async def respond(self, msg: CoreMsg, data: bytes) -> None:
        if msg.reply is None:
            raise ValueError(f"message on {msg.subject!r} was not a request; nothing to respond to")
        await self.core_publish(msg.reply, data)

    async def request(
        self,
        subject: str,
        data: bytes,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        headers: Headers | None = None,
    ) -> bytes:
        msg = await self._request(
            subject, data, dict(headers) if headers else None, f"request {subject!r}", timeout_s
        )
        return bytes(msg.data)

    async def ping(self, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> None:
        what = "ping"
        if self._closed:
            raise Closed(f"{what}: transport closed")
        if not self._nc.is_connected:  # reconnecting: nothing would be answered now
            await trio.lowlevel.checkpoint()
            raise TemporarilyUnavailable(f"{what}: not connected to NATS")
        msg = await self._request("$JS.API.INFO", b"", None, what, timeout_s)
        err = json.loads(msg.data).get("error")
        if err is not None:
            raise json_error(err, what)

    # --- lifecycle -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._closed:
            return
        # A socket the server already dropped (it vanished; the client was reconnecting) fails
        # the close's last flush with an OSError such as "Connection lost": closed all the same.
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(CLOSE_TIMEOUT_S),
            suppress(TransportError, OSError),
        ):
            await self._aio(self._nc.close(), "close")
        self._closed = True
        self._subscriptions = 0  # a closed connection holds none
        self._pulls.clear()
        self._kv_handles.clear()
