"""The Trio shell around :class:`ClientProtocol`: one socket at a time, reconnecting.

Shape (trio-websocket's): :func:`open_connection` opens a nursery holding one supervisor task.
The supervisor connects (INFO, optional TLS, CONNECT + PING, PONG), then runs a reader, a writer
and a pinger until the socket fails, and then reconnects with a bounded, jittered backoff,
resubscribing everything. Callers never await the socket: a frame is written at once with one
non-blocking ``os.write`` when nothing is queued and the socket takes it whole or in part, and
otherwise (the rest of it) appended to one outgoing buffer that the writer sends, everything
queued, in one ``send_all``. So a cancelled caller can never leave half a frame, and every call
is safe to cancel at any await.
"""

from __future__ import annotations

import itertools
import logging
import os
import random as random_module
import ssl
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import final

import attrs
import trio

from ._encoder import PING_BYTES, PONG_BYTES
from ._errors import ProtocolError
from ._events import Connect, Err, Info, Msg, Ping, Pong, Pub, Sub, Unsub
from ._headers import NO_RESPONDERS_STATUS, Headers
from ._nuid import new_inbox
from ._parser import NeedData
from ._protocol import ClientProtocol
from ._servers import ServerAddress, parse_server, parse_servers
from ._shell_errors import (
    AuthorizationError,
    ConnectionClosedError,
    ConnectionLostError,
    NatsTimeoutError,
    NoRespondersError,
    NoServersError,
)
from ._subscription import SUBSCRIPTION_BUFFER_MSGS, Subscription

_log = logging.getLogger(__name__)

#: Deadline of one attempt to reach a server (TCP, INFO, TLS, CONNECT, first PONG).
CONNECT_TIMEOUT_S = 5.0
#: Default deadline of a request.
REQUEST_TIMEOUT_S = 5.0
#: Default deadline of a flush (one PING answered, across reconnects).
FLUSH_TIMEOUT_S = 10.0
#: How long close waits for the drain (UNSUB everything, flush what is queued).
DRAIN_TIMEOUT_S = 5.0
#: Interval between keep-alive PINGs.
PING_INTERVAL_S = 30.0
#: PINGs without any PONG after which the connection is stale and is replaced.
MAX_OUTSTANDING_PINGS = 2
#: Reconnect rounds (each tries every server once) before the connection gives up; -1: never.
MAX_RECONNECT_ROUNDS = 60
#: First backoff between reconnect rounds; it doubles each round up to the maximum.
RECONNECT_BACKOFF_BASE_S = 0.05
#: Largest backoff between reconnect rounds (before jitter, which takes up to half off).
RECONNECT_BACKOFF_MAX_S = 2.0
#: Bytes a publish may queue (sent or waiting for a reconnect) before it waits for room.
MAX_PENDING_BYTES = 8 * 1024 * 1024
#: How long a publish waits for room in a full outgoing buffer.
PENDING_TIMEOUT_S = 10.0
#: Bytes asked of the socket per read.
READ_CHUNK_BYTES = 64 * 1024

#: The request mux's subscription id (user subscriptions count up from 2).
_MUX_SID = "1"
#: Errors that end one socket's session (the supervisor reconnects).
_LOSS = (
    OSError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    ProtocolError,
    ConnectionLostError,
)


@final
@attrs.frozen
class ConnectionStats:
    """Counters for tests and operators."""

    subscriptions: int
    pending_requests: int
    pending_pongs: int
    pending_bytes: int
    reconnects: int
    connected: bool


class _PongWaiter:
    __slots__ = ("answered", "done")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.answered = False


class _Reply:
    __slots__ = ("done", "msg")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.msg: Msg | None = None


def backoff_s(round_index: int, rng: random_module.Random) -> float:
    """Delay before reconnect round ``round_index`` (0-based): exponential, capped, jittered to
    between half and all of it, so many clients do not return in step."""
    ceiling = min(RECONNECT_BACKOFF_MAX_S, RECONNECT_BACKOFF_BASE_S * 2.0 ** min(round_index, 32))
    return ceiling * (0.5 + 0.5 * rng.random())


def describe(error: BaseException | None) -> str:
    """An error and its causes on one line (a TLS failure hides under BrokenResourceError)."""
    parts: list[str] = []
    while error is not None and len(parts) < 4:
        parts.append(repr(error))
        error = error.__cause__
    return " <- ".join(parts) or "no error recorded"


@final
class Connection:
    """A NATS connection; use :func:`open_connection`."""

    def __init__(
        self,
        servers: tuple[ServerAddress, ...],
        *,
        name: str | None,
        user: str | None,
        password: str | None,
        token: str | None,
        tls: ssl.SSLContext | None,
        ping_interval_s: float,
        max_outstanding_pings: int,
        max_reconnect_rounds: int,
        connect_timeout_s: float,
        discover_servers: bool,
        rng: random_module.Random,
    ) -> None:
        self._servers = list(servers)
        self._discover = discover_servers
        self._name = name
        self._user = user
        self._password = password
        self._token = token
        self._tls = tls
        self._ping_interval_s = ping_interval_s
        self._max_outstanding_pings = max_outstanding_pings
        self._max_reconnect_rounds = max_reconnect_rounds
        self._connect_timeout_s = connect_timeout_s
        self._rng = rng
        self._wire = ClientProtocol()
        self._out = bytearray()
        self._out_ready = trio.Event()
        self._out_room = trio.Event()
        self._pings_in_out = 0
        self._fd: int | None = None
        self._writing = False
        self._pongs: deque[_PongWaiter] = deque()
        self._pings_outstanding = 0
        self._subs: dict[str, Subscription] = {}
        self._sids = itertools.count(int(_MUX_SID) + 1)
        self._tokens = itertools.count(1)
        self._requests: dict[str, _Reply] = {}
        self._inbox = new_inbox()
        # The request mux: one wildcard subscription; the reader routes its messages by token.
        self._subs[_MUX_SID] = Subscription(
            subject=f"{self._inbox}.*",
            sid=_MUX_SID,
            queue=None,
            max_buffered_msgs=1,
            on_close=lambda sub: None,
        )
        self._connected = trio.Event()
        self._is_connected = False
        self._closed = False
        self._close_reason = "the connection is closed"
        self._reconnects = 0
        self._server: ServerAddress | None = None
        self._last_error: BaseException | None = None

    # --- state -------------------------------------------------------------------------------

    @property
    def server_info(self) -> Info | None:
        """The INFO of the server last connected to."""
        return self._wire.info

    @property
    def connected_url(self) -> str | None:
        """URL (without credentials) of the current server, or ``None`` while disconnected."""
        return self._server.url if self._is_connected and self._server else None

    @property
    def servers(self) -> tuple[str, ...]:
        """URLs (without credentials) tried on reconnect: those given, then those discovered."""
        return tuple(server.url for server in self._servers)

    @property
    def max_payload_bytes(self) -> int:
        """The largest message (headers and payload) the server takes."""
        return self._wire.max_payload_bytes

    @property
    def closed(self) -> bool:
        """Whether the connection is closed for good."""
        return self._closed

    def stats(self) -> ConnectionStats:
        """Counters: live subscriptions (the request mux not counted), waiting requests, ..."""
        return ConnectionStats(
            subscriptions=len(self._subs) - (1 if _MUX_SID in self._subs else 0),
            pending_requests=len(self._requests),
            pending_pongs=len(self._pongs),
            pending_bytes=len(self._out),
            reconnects=self._reconnects,
            connected=self._is_connected,
        )

    def new_inbox(self) -> str:
        """A fresh unique subject for replies."""
        return new_inbox()

    # --- calls -------------------------------------------------------------------------------

    async def publish(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        reply: str | None = None,
        headers: Headers | dict[str, str] | None = None,
    ) -> None:
        """Queue a message; the writer sends it with whatever else is queued. Returns once it is
        queued (``flush`` waits for the server). Raises :class:`ProtocolError` for a message
        the server would refuse (size, subject)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        data = self._encode_pub(subject, payload, reply, headers)
        await self._wait_for_room(len(data))
        self._queue(data)
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def request(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        headers: Headers | dict[str, str] | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> Msg:
        """Publish with a reply subject on the connection's one inbox and wait for the answer.
        :class:`NoRespondersError` if nobody listens; :class:`NatsTimeoutError` after
        ``timeout_s``."""
        await trio.lowlevel.checkpoint_if_cancelled()
        token = format(next(self._tokens), "x")
        data = self._encode_pub(subject, payload, f"{self._inbox}.{token}", headers)
        slot = _Reply()
        self._requests[token] = slot
        try:
            with trio.move_on_after(timeout_s):
                await self._wait_for_room(len(data))
                self._queue(data)
                await slot.done.wait()
        finally:
            del self._requests[token]
        msg = slot.msg
        if msg is None:
            self._check_open()
            raise NatsTimeoutError(f"request on {subject!r}: no answer within {timeout_s} s")
        if msg.status == NO_RESPONDERS_STATUS and not msg.payload:
            raise NoRespondersError(f"request on {subject!r}: no responders")
        return msg

    async def flush(self, *, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Wait until the server has processed everything queued before this call (a PING
        answered). Across a reconnect it pings the new server."""
        await trio.lowlevel.checkpoint_if_cancelled()
        with trio.move_on_after(timeout_s):
            while True:
                self._check_open()
                if not self._is_connected:
                    await self._connected.wait()
                    continue
                waiter = _PongWaiter()
                self._queue_ping(waiter)
                await waiter.done.wait()
                if waiter.answered:
                    return
        self._check_open()
        raise NatsTimeoutError(f"flush: no PONG within {timeout_s} s")

    @asynccontextmanager
    async def subscribe(
        self,
        subject: str,
        *,
        queue: str | None = None,
        max_buffered_msgs: int = SUBSCRIPTION_BUFFER_MSGS,
    ) -> AsyncIterator[Subscription]:
        """``async with conn.subscribe("a.*") as sub: async for msg in sub: ...``. Leaving the
        block unsubscribes. Messages published on this connection after entering are seen; for
        other connections, ``flush`` first."""
        await trio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        sid = str(next(self._sids))
        data = self._wire.send(Sub(subject, sid, queue))
        sub = Subscription(
            subject=subject,
            sid=sid,
            queue=queue,
            max_buffered_msgs=max_buffered_msgs,
            on_close=self._unsubscribe,
        )
        self._subs[sid] = sub
        self._queue(data)
        try:
            yield sub
        finally:
            sub.unsubscribe()

    async def drain(self, *, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Unsubscribe everything and flush: messages already on their way are delivered,
        queued publishes reach the server. Subscriptions then end; the connection closes."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            return
        for sub in list(self._subs.values()):
            if sub.sid != _MUX_SID:
                self._queue(self._wire.send(Unsub(sub.sid)))
        with trio.move_on_after(timeout_s):
            await self.flush(timeout_s=timeout_s)
        self._close("the connection was drained and closed")

    # --- internals: queueing -----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ConnectionClosedError(self._close_reason)

    def _encode_pub(
        self,
        subject: str,
        payload: bytes,
        reply: str | None,
        headers: Headers | dict[str, str] | None,
    ) -> bytes:
        self._check_open()
        block = Headers.of(headers) if isinstance(headers, dict) else headers
        return self._wire.send(Pub(subject, bytes(payload), reply, block))

    async def _wait_for_room(self, size: int) -> None:
        if len(self._out) + size <= MAX_PENDING_BYTES or not self._out:
            return
        with trio.move_on_after(PENDING_TIMEOUT_S):
            while len(self._out) + size > MAX_PENDING_BYTES and self._out:
                self._check_open()
                await self._out_room.wait()
            return
        raise NatsTimeoutError(
            f"publish: {len(self._out)} bytes queued for {PENDING_TIMEOUT_S} s (disconnected?)"
        )

    def _queue(self, data: bytes) -> bool:
        """Send ``data`` now if the socket takes it without waiting, else queue it for the
        writer; True when (some of) it was queued.

        The direct write is a plain non-blocking ``os.write`` on the socket's file descriptor,
        made only while nothing is queued and the writer is not sending, so bytes keep their
        order; what the socket does not take is queued whole for the writer. It never waits,
        so no caller can be cancelled in the middle of a frame.
        """
        if self._fd is not None and not self._out and not self._writing:
            try:
                written = os.write(self._fd, data)
            except OSError:  # full (BlockingIOError) or broken: the writer and reader cope
                written = 0
            if written == len(data):
                return False
            data = data[written:]
        self._out += data
        self._out_ready.set()
        return True

    def _queue_ping(self, waiter: _PongWaiter) -> None:
        self._pongs.append(waiter)
        if self._queue(PING_BYTES):
            self._pings_in_out += 1

    def _unsubscribe(self, sub: Subscription) -> None:
        if self._subs.pop(sub.sid, None) is not None and not self._closed:
            self._queue(self._wire.send(Unsub(sub.sid)))
        sub._close()

    # --- internals: one socket ---------------------------------------------------------------

    def _connect_event(self, server: ServerAddress, tls: bool) -> Connect:
        user = self._user if self._user is not None else server.user
        password = self._password if self._password is not None else server.password
        token = self._token if self._token is not None else server.token
        return Connect(
            name=self._name,
            tls_required=tls,
            user=user,
            password=password,
            auth_token=token,
            headers=True,
            no_responders=True,
        )

    async def _handshake(self, server: ServerAddress) -> tuple[trio.abc.Stream, ClientProtocol]:
        protocol = ClientProtocol()
        tcp = await trio.open_tcp_stream(server.host, server.port)
        stream: trio.abc.Stream = tcp
        try:
            info = await self._next_event(stream, protocol)
            if not isinstance(info, Info):
                raise ProtocolError(f"expected INFO first, got {type(info).__name__.upper()}")
            want_tls = server.tls or self._tls is not None or info.tls_required
            if want_tls:
                if not (info.tls_required or info.tls_available):
                    raise ConnectionLostError(f"{server.url}: the server does not offer TLS")
                context = self._tls or ssl.create_default_context()
                ssl_stream = trio.SSLStream(tcp, context, server_hostname=server.host)
                await ssl_stream.do_handshake()
                stream = ssl_stream
            connect = protocol.send(self._connect_event(server, want_tls))
            await stream.send_all(connect + protocol.send(Ping()))
            while True:
                event = await self._next_event(stream, protocol)
                if isinstance(event, Pong):
                    return stream, protocol
                if isinstance(event, Err):
                    if "authoriz" in event.message.lower() or "auth" in event.message.lower():
                        raise AuthorizationError(f"{server.url}: {event.message}")
                    raise ConnectionLostError(f"{server.url}: -ERR {event.message}")
                if isinstance(event, Ping):
                    await stream.send_all(PONG_BYTES)
        except BaseException:
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                await stream.aclose()
            raise

    @staticmethod
    async def _next_event(
        stream: trio.abc.Stream, protocol: ClientProtocol
    ) -> Info | Msg | Ping | Pong | Err | object:
        while True:
            event = protocol.next_event()
            if not isinstance(event, NeedData):
                return event
            data = await stream.receive_some(READ_CHUNK_BYTES)
            if not data:
                raise ConnectionLostError("the server closed the connection during the handshake")
            protocol.receive_data(data)

    def _learn_servers(self, info: Info) -> None:
        """Add the cluster's other client URLs (INFO ``connect_urls``) to the reconnect list;
        they inherit the scheme and URL credentials of the server that told us."""
        current = self._server
        if not self._discover or current is None:
            return
        known = {(server.host, server.port) for server in self._servers}
        for url in info.connect_urls:
            try:
                found = parse_server(url)
            except ValueError:
                continue  # a server's odd advertisement must not break the connection
            if (found.host, found.port) in known:
                continue
            known.add((found.host, found.port))
            self._servers.append(
                ServerAddress(
                    host=found.host,
                    port=found.port,
                    tls=current.tls,
                    user=current.user,
                    password=current.password,
                    token=current.token,
                )
            )

    def _attach(
        self, server: ServerAddress, protocol: ClientProtocol, stream: trio.abc.Stream
    ) -> None:
        self._wire = protocol
        self._server = server
        # Direct writes only on a plain TCP socket on POSIX (TLS frames its own records).
        self._fd = None
        if isinstance(stream, trio.SocketStream) and os.name == "posix":
            self._fd = stream.socket.fileno()
        if protocol.info is not None:
            self._learn_servers(protocol.info)
        resubscribe = b"".join(
            protocol.send(Sub(sub.subject, sub.sid, sub.queue)) for sub in self._subs.values()
        )
        self._out = bytearray(resubscribe) + self._out
        self._out_ready.set()
        self._pings_outstanding = 0
        self._is_connected = True
        self._connected.set()

    def _detach(self) -> None:
        self._fd = None
        self._is_connected = False
        self._connected = trio.Event()
        # PINGs already written went down with the socket: their PONGs will never come. PINGs
        # still queued will be written to the next server, so their waiters stay.
        keep = self._pings_in_out
        while len(self._pongs) > keep:
            waiter = self._pongs.popleft()
            waiter.done.set()

    async def _session(self, stream: trio.abc.Stream) -> None:
        async with trio.open_nursery() as nursery:
            for part in (self._reader, self._writer, self._pinger):
                nursery.start_soon(self._guard, part, stream, nursery.cancel_scope)

    async def _guard(self, part: object, stream: trio.abc.Stream, scope: trio.CancelScope) -> None:
        assert callable(part)
        try:
            await part(stream)
        except _LOSS as exc:
            self._last_error = exc
        scope.cancel()

    async def _reader(self, stream: trio.abc.Stream) -> None:
        protocol = self._wire
        while True:
            for event in self._events(protocol):
                self._dispatch(event)
            data = await stream.receive_some(READ_CHUNK_BYTES)
            if not data:
                raise ConnectionLostError("the server closed the connection")
            protocol.receive_data(data)

    @staticmethod
    def _events(protocol: ClientProtocol) -> list[object]:
        out: list[object] = []
        while True:
            event = protocol.next_event()
            if isinstance(event, NeedData):
                return out
            out.append(event)

    def _dispatch(self, event: object) -> None:
        if isinstance(event, Msg):
            if event.sid == _MUX_SID:
                slot = self._requests.get(event.subject.rpartition(".")[2])
                if slot is not None and slot.msg is None:
                    slot.msg = event
                    slot.done.set()
                return
            sub = self._subs.get(event.sid)
            if sub is not None:
                sub._deliver(event)
        elif isinstance(event, Info):
            self._learn_servers(event)
        elif isinstance(event, Ping):
            self._queue(PONG_BYTES)
        elif isinstance(event, Pong):
            self._pings_outstanding = 0
            if self._pongs:
                waiter = self._pongs.popleft()
                waiter.answered = True
                waiter.done.set()
        elif isinstance(event, Err):
            if event.message.lower().startswith("permissions violation"):
                self._last_error = ConnectionLostError(event.message)
                return
            raise ConnectionLostError(f"-ERR {event.message}")

    async def _writer(self, stream: trio.abc.Stream) -> None:
        while True:
            await self._out_ready.wait()
            self._out_ready = trio.Event()
            data, self._out = self._out, bytearray()
            self._pings_in_out = 0
            self._out_room.set()
            self._out_room = trio.Event()
            if data:
                self._writing = True
                try:
                    await stream.send_all(data)
                finally:
                    self._writing = False

    async def _pinger(self, stream: trio.abc.Stream) -> None:
        while True:
            await trio.sleep(self._ping_interval_s)
            if self._pings_outstanding >= self._max_outstanding_pings:
                raise ConnectionLostError(
                    f"stale connection: {self._pings_outstanding} PINGs without a PONG"
                )
            self._pings_outstanding += 1
            self._queue_ping(_PongWaiter())

    # --- internals: the supervisor -----------------------------------------------------------

    async def _connect_round(self) -> tuple[ServerAddress, trio.abc.Stream, ClientProtocol] | None:
        for server in self._servers:
            try:
                with trio.fail_after(self._connect_timeout_s):
                    stream, protocol = await self._handshake(server)
            except (*_LOSS, AuthorizationError, trio.TooSlowError) as exc:
                self._last_error = exc
                continue
            return server, stream, protocol
        return None

    async def _connect_first(self) -> trio.abc.Stream:
        """The first connection: every server tried once, in order; :class:`NoServersError`
        (or :class:`AuthorizationError`) if none takes us."""
        first = await self._connect_round()
        if first is None:
            error = self._last_error
            if isinstance(error, AuthorizationError):
                raise error
            urls = ", ".join(s.url for s in self._servers)
            raise NoServersError(f"no server answered ({urls}): {describe(error)}") from error
        server, stream, protocol = first
        self._attach(server, protocol, stream)
        return stream

    async def _supervise(self, stream: trio.abc.Stream) -> None:
        """The supervisor: run sessions, the first on ``stream`` (from
        :meth:`_connect_first`), until closed or ``max_reconnect_rounds`` rounds fail."""
        try:
            while True:
                try:
                    await self._session(stream)
                finally:
                    self._detach()
                    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                        await stream.aclose()
                found = None
                down_since = trio.current_time()
                urls = ", ".join(server.url for server in self._servers)
                # Once per outage, not per attempt: an operator sees the outage and its end.
                _log.warning(
                    "NATS is unreachable (%s): reconnecting, with rounds up to %.0f s apart, "
                    "%s; calls fail meanwhile",
                    urls,
                    RECONNECT_BACKOFF_MAX_S,
                    "for as long as it takes"
                    if self._max_reconnect_rounds < 0
                    else f"for {self._max_reconnect_rounds} rounds",
                )
                rounds = (
                    itertools.count()
                    if self._max_reconnect_rounds < 0
                    else range(self._max_reconnect_rounds)
                )
                for round_index in rounds:
                    found = await self._connect_round()
                    if found is not None:
                        break
                    await trio.sleep(backoff_s(round_index, self._rng))
                if found is None:
                    self._close(f"gave up reconnecting: {describe(self._last_error)}")
                    return
                server, stream, protocol = found
                self._attach(server, protocol, stream)
                self._reconnects += 1
                _log.warning(
                    "NATS is back (%s) after %.1f s unreachable",
                    server.url,
                    trio.current_time() - down_since,
                )
        finally:
            self._close(self._close_reason)

    def _close(self, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_reason = reason
        self._is_connected = False
        self._connected.set()
        self._out_room.set()
        for sub in list(self._subs.values()):
            sub._close()
        self._subs.clear()
        while self._pongs:
            self._pongs.popleft().done.set()
        for slot in self._requests.values():
            slot.done.set()


@asynccontextmanager
async def open_connection(
    servers: str | Sequence[str],
    *,
    name: str | None = None,
    user: str | None = None,
    password: str | None = None,
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
    ping_interval_s: float = PING_INTERVAL_S,
    max_outstanding_pings: int = MAX_OUTSTANDING_PINGS,
    max_reconnect_rounds: int = MAX_RECONNECT_ROUNDS,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
    discover_servers: bool = True,
    random: random_module.Random | None = None,
) -> AsyncIterator[Connection]:
    """Connect to the first server of ``servers`` that answers; yield the connection; drain and
    close it on exit. ``tls://`` URLs, a ``tls`` context, or a server that requires TLS turn TLS
    on. ``random`` drives the reconnect jitter (inject a seeded one for repeatable tests).
    ``discover_servers`` adds the cluster's other nodes (from INFO) to the reconnect list."""
    conn = Connection(
        parse_servers(servers),
        name=name,
        user=user,
        password=password,
        token=token,
        tls=tls,
        ping_interval_s=ping_interval_s,
        max_outstanding_pings=max_outstanding_pings,
        max_reconnect_rounds=max_reconnect_rounds,
        connect_timeout_s=connect_timeout_s,
        discover_servers=discover_servers,
        rng=random if random is not None else random_module.Random(),
    )
    first = await conn._connect_first()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn._supervise, first)
            try:
                yield conn
                await conn.drain(timeout_s=drain_timeout_s)
            finally:
                conn._close("the connection is closed")
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The supervisor does not raise; a group of one is the caller's own exception.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
