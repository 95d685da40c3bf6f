"""``TrioNatsTransport``: the transport on the native Trio client (``dagnats_trio.nats``).

No asyncio, no trio-asyncio, no private attribute of any other package: JetStream is reached
with plain requests to ``$JS.API.*`` on one :class:`~dagnats_trio.nats.Connection`, whose calls
are cancellation-safe at every await. The JetStream shapes (configs, error codes, KV
conventions) are the ones ``NatsTransport`` uses, so both pass one conformance suite.
"""

from __future__ import annotations

import itertools
import json
import os
import ssl
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from typing import Any, final

import trio

from ..nats import (
    Connection,
    ConnectionClosedError,
    Msg,
    NatsError,
    NatsTimeoutError,
    NoRespondersError,
    ProtocolError,
    Subscription,
    open_connection,
)
from ..nats import Headers as WireHeaders
from ._interface import (
    DEFAULT_REQUEST_TIMEOUT_S,
    Closed,
    ConsumerConfig,
    CoreMsg,
    Delivery,
    Headers,
    KvEntry,
    TemporarilyUnavailable,
    TransportError,
    TransportTimeout,
)
from ._jetstream import (
    JetStreamOverRequests,
    NoResponders,
    api_error,
    check_name,
    is_delete_marker,
    json_error,
    kv_prefix,
    kv_stream,
    ns,
    watch_filter,
)
from ._jetstream_batch import DirectReply, JetStreamBatches, WireMsg
from ._trio_nats_batch import gather, send_uncommitted

#: Deadline of the first connection to a server.
CONNECT_TIMEOUT_S = 5.0
#: Bound on cleanup (deleting a watch consumer, closing) run shielded.
CLOSE_TIMEOUT_S = 5.0
#: How long a fetch waits past its own timeout for the server's end-of-request status.
FETCH_GRACE_S = 1.0
#: Taken off a pull request's ``expires`` so the server answers before our deadline.
PULL_EXPIRES_MARGIN_NS = 100_000
#: Deliveries a pull inbox buffers (more than any batch the runtime asks for).
PULL_BUFFER_MSGS = 4096
#: Entries a KV watch buffers before the newest are dropped (the reader never blocks).
WATCH_BUFFER_ENTRIES = 4096
#: A watch's ephemeral consumer is removed by the server this long after its client went away.
WATCH_INACTIVE_THRESHOLD_S = 60.0

#: Pull request ends: no messages (404), expired (408), a limit or leadership change (409).
_PULL_END_STATUSES = frozenset({404, 408})


def _map_error(exc: Exception, what: str) -> TransportError:
    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, NoRespondersError):
        return NoResponders(f"{what}: no responders")
    if isinstance(exc, NatsTimeoutError):
        return TransportTimeout(f"{what}: no answer in time")
    if isinstance(exc, ConnectionClosedError):
        return Closed(f"{what}: connection closed")
    return TransportError(f"{what}: {exc}")


def _headers_dict(headers: WireHeaders | None) -> dict[str, str]:
    return dict(headers.fields) if headers is not None else {}


def _wire_headers(headers: Mapping[str, str] | None) -> WireHeaders | None:
    return WireHeaders(fields=tuple(headers.items())) if headers else None


def ack_metadata(reply: str) -> tuple[int, int]:
    """``(num_delivered, stream_seq)`` from a ``$JS.ACK`` reply subject (both token layouts)."""
    tokens = reply.split(".")
    if len(tokens) == 9 and tokens[:2] == ["$JS", "ACK"]:
        return int(tokens[4]), int(tokens[5])
    if len(tokens) >= 12 and tokens[:2] == ["$JS", "ACK"]:
        return int(tokens[6]), int(tokens[7])
    raise TransportError(f"not a JetStream delivery: reply subject {reply!r}")


@final
class TrioNatsDelivery:
    """One delivery from a pull consumer; settles by publishing to its ``$JS.ACK`` subject."""

    __slots__ = ("_reply", "_settled", "_transport", "data", "headers", "num_delivered",
                 "stream_seq", "subject")  # fmt: skip

    def __init__(self, transport: TrioNatsTransport, msg: Msg) -> None:
        assert msg.reply is not None
        self.subject: str = msg.subject
        self.data: bytes = msg.payload
        self.headers: Headers = _headers_dict(msg.headers)
        self.num_delivered, self.stream_seq = ack_metadata(msg.reply)
        self._reply: str = msg.reply
        self._transport = transport
        self._settled = False

    def __repr__(self) -> str:
        return (
            f"TrioNatsDelivery(subject={self.subject!r}, stream_seq={self.stream_seq}, "
            f"num_delivered={self.num_delivered})"
        )

    async def ack(self) -> None:
        if self._settled:
            await trio.lowlevel.checkpoint()
            return
        await self._transport._raw_request(self._reply, b"+ACK", None, "ack")
        self._settled = True

    async def ack_nowait(self) -> None:
        await self._settle(b"+ACK", "ack")

    async def nak(self, delay_s: float | None = None) -> None:
        payload = b"-NAK"
        if delay_s is not None and delay_s > 0:
            payload += b" " + json.dumps({"delay": ns(delay_s)}).encode()
        await self._settle(payload, "nak")

    async def in_progress(self) -> None:
        if self._settled:
            await trio.lowlevel.checkpoint()
            return
        await self._transport.core_publish(self._reply, b"+WPI")

    async def term(self) -> None:
        await self._settle(b"+TERM", "term")

    async def _settle(self, payload: bytes, what: str) -> None:
        if self._settled:
            await trio.lowlevel.checkpoint()
            return
        await self._transport.core_publish(self._reply, payload)
        self._settled = True


class _Pull:
    """One durable's pull inbox: a wildcard subscription; each fetch asks on its own token, so
    a late end-of-request status of an earlier fetch is told apart from this one's."""

    def __init__(self, sub: Subscription, prefix: str, next_subject: str) -> None:
        self.sub = sub
        self.prefix = prefix
        self.next_subject = next_subject
        self.tokens = itertools.count(1)
        self.taken: deque[Msg] = deque()

    def hand_out(self, transport: TrioNatsTransport, batch: int) -> list[Delivery]:
        """Up to ``batch`` of the deliveries taken from the inbox, oldest first."""
        out: list[Delivery] = []
        while self.taken and len(out) < batch:
            out.append(TrioNatsDelivery(transport, self.taken.popleft()))
        return out


@final
class _CoreMessages:
    """A subscription's messages as :class:`CoreMsg` (an iterator, not an async generator, so
    a consumer that stops early leaves nothing to finalise)."""

    def __init__(self, sub: Subscription) -> None:
        self._sub = sub

    def __aiter__(self) -> _CoreMessages:
        return self

    async def __anext__(self) -> CoreMsg:
        msg = await self._sub.__anext__()
        return CoreMsg(
            subject=msg.subject,
            data=msg.payload,
            headers=_headers_dict(msg.headers),
            reply=msg.reply,
        )


@final
class _KvEntries:
    """A watch consumer's deliveries as :class:`KvEntry` (delete markers have no value)."""

    def __init__(self, sub: Subscription, bucket: str, prefix: str) -> None:
        self._sub = sub
        self._bucket = bucket
        self._prefix = prefix
        self._strip = len(kv_prefix(bucket))

    def __aiter__(self) -> _KvEntries:
        return self

    async def __anext__(self) -> KvEntry:
        while True:
            msg = await self._sub.__anext__()
            if msg.status is not None or msg.reply is None:
                continue  # heartbeats and flow control are not asked for
            key = msg.subject[self._strip :]
            if not key.startswith(self._prefix):
                continue
            headers = _headers_dict(msg.headers)
            return KvEntry(
                bucket=self._bucket,
                key=key,
                value=None if is_delete_marker(headers) else msg.payload,
                revision=ack_metadata(msg.reply)[1],
            )


@final
class TrioNatsTransport(JetStreamOverRequests, JetStreamBatches):
    """The :class:`~dagnats_trio.transport.Transport` on the native client."""

    def __init__(self, conn: Connection, request_timeout_s: float) -> None:
        self._conn = conn
        self._timeout_s = request_timeout_s
        self._round_trips = 0
        self._closed = False
        self._pulls: dict[tuple[str, str], _Pull] = {}
        self._pull_lock = trio.Lock()
        self._stack = AsyncExitStack()

    @property
    def round_trips(self) -> int:
        return self._round_trips

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

    async def _raw_request(
        self,
        subject: str,
        payload: bytes,
        headers: Mapping[str, str] | None,
        what: str,
        timeout_s: float | None = None,
    ) -> Msg:
        await self._check_connected(what)
        self._round_trips += 1
        try:
            return await self._conn.request(
                subject,
                payload,
                headers=_wire_headers(headers),
                timeout_s=self._timeout_s if timeout_s is None else timeout_s,
            )
        except (NatsError, ProtocolError) as exc:
            raise _map_error(exc, what) from None

    async def _js_request(
        self,
        subject: str,
        payload: bytes,
        headers: Mapping[str, str] | None,
        what: str,
        timeout_s: float | None = None,
    ) -> bytes:
        return (await self._raw_request(subject, payload, headers, what, timeout_s)).payload

    async def _js_batch(self, wire: Sequence[WireMsg], what: str) -> bytes:
        await self._check_connected(what)
        try:
            await send_uncommitted(self._conn, wire[:-1])
        except (NatsError, ProtocolError) as exc:
            raise _map_error(exc, what) from None
        commit = wire[-1]
        return await self._js_request(commit.subject, commit.data, commit.headers, what)

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
            raise _map_error(exc, what) from None

    # --- key-value -----------------------------------------------------------------------------

    @asynccontextmanager
    async def kv_watch(
        self, bucket: str, prefix: str = ""
    ) -> AsyncIterator[AsyncIterator[KvEntry]]:
        """An ephemeral push consumer (deliver new, no acks) on an inbox of our own."""
        stream = kv_stream(bucket)
        what = f"watch {bucket!r}"
        self._check_open(what)
        inbox = self._conn.new_inbox()
        async with self._conn.subscribe(inbox, max_buffered_msgs=WATCH_BUFFER_ENTRIES) as sub:
            config = {
                "deliver_subject": inbox,
                "filter_subject": watch_filter(bucket, prefix),
                "deliver_policy": "new",
                "ack_policy": "none",
                "max_deliver": 1,
                "mem_storage": True,
                "num_replicas": 1,
                "inactive_threshold": ns(WATCH_INACTIVE_THRESHOLD_S),
            }
            answer = await self._api(
                f"$JS.API.CONSUMER.CREATE.{stream}",
                {"stream_name": stream, "config": config},
                what,
            )
            name = answer["name"]

            try:
                yield _KvEntries(sub, bucket, prefix)
            finally:
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(CLOSE_TIMEOUT_S),
                    suppress(TransportError),
                ):
                    await self._api(f"$JS.API.CONSUMER.DELETE.{stream}.{name}", {}, what)

    # --- durable pull consumers ----------------------------------------------------------------

    async def ensure_consumer(self, config: ConsumerConfig) -> None:
        stream = check_name("stream", config.stream)
        durable = check_name("durable", config.durable)
        body: dict[str, Any] = {
            "durable_name": durable,
            "filter_subject": config.filter_subject,
            "ack_policy": "explicit",
            "ack_wait": ns(config.ack_wait_s),
            "max_deliver": config.max_deliver,
            "deliver_policy": "all",
        }
        if config.backoff_s:
            body["backoff"] = [ns(wait) for wait in config.backoff_s]
        await self._api(
            f"$JS.API.CONSUMER.CREATE.{stream}.{durable}",
            {"stream_name": stream, "config": body},
            f"ensure consumer {stream}/{durable}",
        )

    async def _pull(self, stream: str, durable: str) -> _Pull:
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
                pull = _Pull(sub, prefix, f"$JS.API.CONSUMER.MSG.NEXT.{api}")
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
        with suppress(trio.WouldBlock, trio.EndOfChannel):  # left by an earlier request
            while len(taken) < batch:
                msg = pull.sub.next_msg_nowait()
                if msg.status is None and msg.reply is not None:
                    taken.append(msg)
        if taken:
            await trio.lowlevel.checkpoint()
            return pull.hand_out(self, batch)
        reply = f"{pull.prefix}.{next(pull.tokens)}"
        body: dict[str, Any] = {"batch": batch, "no_wait": True}
        expires = ns(timeout_s) - PULL_EXPIRES_MARGIN_NS
        if expires > 0:
            body["expires"] = expires
        self._round_trips += 1
        try:
            await self._conn.publish(pull.next_subject, json.dumps(body).encode(), reply=reply)
        except (NatsError, ProtocolError) as exc:
            raise _map_error(exc, what) from None
        # Deliveries wait in ``pull.taken`` until returned: a fetch cancelled while waiting
        # for more leaves them to the next fetch instead of losing them until their AckWait.
        with trio.move_on_after(timeout_s + FETCH_GRACE_S):
            while len(taken) < batch:
                try:
                    msg = await pull.sub.next_msg()
                except trio.EndOfChannel:
                    raise Closed(f"{what}: transport closed") from None
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
        return pull.hand_out(self, batch)

    # --- core NATS -----------------------------------------------------------------------------

    async def core_publish(self, subject: str, data: bytes, headers: Headers | None = None) -> None:
        what = f"publish {subject!r}"
        self._check_open(what)
        try:
            await self._conn.publish(subject, data, headers=_wire_headers(headers))
        except (NatsError, ProtocolError) as exc:
            raise _map_error(exc, what) from None

    @asynccontextmanager
    async def subscribe(
        self, subject: str, queue: str | None = None
    ) -> AsyncIterator[AsyncIterator[CoreMsg]]:
        what = f"subscribe {subject!r}"
        self._check_open(what)
        async with self._conn.subscribe(subject, queue=queue) as sub:
            self._round_trips += 1  # the flush that makes the subscription live
            try:
                await self._conn.flush(timeout_s=self._timeout_s)
            except NatsError as exc:
                raise _map_error(exc, what) from None

            yield _CoreMessages(sub)

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
        msg = await self._raw_request(subject, data, headers, f"request {subject!r}", timeout_s)
        return msg.payload

    async def ping(self, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> None:
        what = "ping"
        self._check_open(what)
        if not self._conn.stats().connected:
            await trio.lowlevel.checkpoint()
            raise TemporarilyUnavailable(f"{what}: not connected to NATS")
        msg = await self._raw_request("$JS.API.INFO", b"", None, what, timeout_s)
        err = json.loads(msg.payload).get("error")
        if err is not None:
            raise json_error(err, what)

    # --- lifecycle -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT_S):
            await self._stack.aclose()
        self._pulls.clear()


@asynccontextmanager
async def open_trio_nats_transport(
    url_or_urls: str | Sequence[str],
    *,
    name: str | None = None,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    tls: ssl.SSLContext | None = None,
    creds_file: str | os.PathLike[str] | None = None,
    nkey_seed_file: str | os.PathLike[str] | None = None,
) -> AsyncIterator[TrioNatsTransport]:
    """A connected :class:`TrioNatsTransport`; drained and closed when the block ends.
    ``tls``, ``creds_file`` and ``nkey_seed_file`` are :func:`~dagnats_trio.nats.open_connection`'s
    (user and password or a token go in the URLs)."""
    servers = [url_or_urls] if isinstance(url_or_urls, str) else list(url_or_urls)
    if not servers:
        raise ValueError("open_trio_nats_transport needs at least one server URL")
    async with open_connection(
        servers,
        name=name,
        connect_timeout_s=connect_timeout_s,
        max_reconnect_rounds=-1,
        tls=tls,
        creds_file=creds_file,
        nkey_seed_file=nkey_seed_file,
    ) as conn:
        transport = TrioNatsTransport(conn, request_timeout_s)
        try:
            yield transport
        finally:
            await transport.aclose()
