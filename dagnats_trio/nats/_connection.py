"""The Trio shell around :class:`ClientProtocol`: one socket at a time, reconnecting.

Shape (trio-websocket's): :func:`open_connection` opens a nursery holding one supervisor task.
The supervisor connects (the :class:`Dialer`), then runs a reader, a writer and a pinger until
the socket fails, and then reconnects with a bounded, jittered backoff, resubscribing everything.
Callers never await the socket: what they send goes to the :class:`Outbox`, which writes it at
once (on a busy connection: with the other frames of the scheduler pass, at its end) or queues
it whole for the writer. So a cancelled caller can never leave half a frame, and every call is
safe to cancel at any await.
"""

from __future__ import annotations

import functools
import itertools
import os
import random as random_module
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import final

import attrs
import trio

from ._credentials import NkeyAuth
from ._defaults import (
    CONNECT_TIMEOUT_S,
    DRAIN_TIMEOUT_S,
    FLUSH_TIMEOUT_S,
    MAX_OUTSTANDING_PINGS,
    MAX_RECONNECT_ROUNDS,
    PING_INTERVAL_S,
    REQUEST_TIMEOUT_S,
    SOCKET_CLOSE_TIMEOUT_S,
)
from ._dialer import SOCKET_ERRORS, Dialer
from ._encoder import PONG_BYTES
from ._events import Err, Info, Msg, Ping, Pong, Pub, Sub, Unsub
from ._handshake import ClientSettings, load_nkey_auth
from ._headers import NO_RESPONDERS_STATUS, Headers
from ._mux import RequestMux
from ._nuid import new_inbox
from ._outbox import Outbox
from ._pings import Pings
from ._protocol import ClientProtocol
from ._reader import read_events
from ._servers import ServerAddress, ServerList, parse_servers
from ._shell_errors import (
    ConnectionClosedError,
    ConnectionLostError,
    NatsTimeoutError,
    NoRespondersError,
    describe,
)
from ._subscription import SUBSCRIPTION_BUFFER_MSGS, Subscription
from ._waiters import PongWaiter

#: The request mux's subscription id (user subscriptions count up from 2).
_MUX_SID = "1"
#: Requests in flight on a connection from which its frames are written together at the end
#: of the scheduler pass (see :class:`Outbox`); with fewer, each goes out at once. Three: one
#: agent run at a time has two in flight on a connection about once a run, and the instrument
#: that writes at the end of the pass would then stay installed, costing every pass a call.
COALESCE_MIN_REQUESTS = 3


@final
@attrs.frozen
class ConnectionStats:
    """Counters for tests and operators."""

    subscriptions: int
    pending_requests: int
    pending_pongs: int
    pending_bytes: int
    #: Writes to sockets so far (frames queued in one scheduler pass on a busy connection
    #: share one).
    writes: int
    reconnects: int
    connected: bool


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
        nkey: NkeyAuth | None,
        ping_interval_s: float,
        max_outstanding_pings: int,
        max_reconnect_rounds: int,
        connect_timeout_s: float,
        discover_servers: bool,
        rng: random_module.Random,
    ) -> None:
        self._servers = ServerList(servers, discover=discover_servers)
        self._settings = ClientSettings(
            name=name, user=user, password=password, token=token, tls=tls, nkey=nkey
        )
        self._ping_interval_s = ping_interval_s
        self._dialer = Dialer(
            self._servers,
            self._settings,
            connect_timeout_s=connect_timeout_s,
            max_rounds=max_reconnect_rounds,
            rng=rng,
        )
        self._wire = ClientProtocol()
        self._outbox = Outbox()
        self._pings = Pings(max_outstanding_pings)
        self._subs: dict[str, Subscription] = {}
        self._sids = itertools.count(int(_MUX_SID) + 1)
        self._mux = RequestMux()
        # The request mux's subscription: resubscribed like any other; the reader routes its
        # messages to the mux instead of this buffer.
        self._subs[_MUX_SID] = Subscription(
            subject=self._mux.subject,
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
    def is_connected(self) -> bool:
        """Whether a server is connected now (what :attr:`connected_url` tells, without making
        the URL)."""
        return self._is_connected

    @property
    def servers(self) -> tuple[str, ...]:
        """URLs (without credentials) tried on reconnect: those given, then those discovered."""
        return self._servers.urls

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
            pending_requests=self._mux.pending,
            pending_pongs=len(self._pings),
            pending_bytes=self._outbox.pending_bytes,
            writes=self._outbox.writes,
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
        await self._outbox.wait_for_room(len(data), self._check_open)
        self._queue(data)
        await trio.lowlevel.cancel_shielded_checkpoint()

    def try_publish(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        reply: str | None = None,
        headers: Headers | dict[str, str] | None = None,
    ) -> bool:
        """Queue a message now, without a checkpoint, if the outbox has room; False (nothing
        queued) when it has none: then ``await publish``. For a caller whose next await is a
        checkpoint anyway (it waits for the answer, or sends a request right after), so a
        message costs no extra pass of the scheduler. Raises what :meth:`publish` raises for a
        message the server would refuse, and :class:`ConnectionClosedError` once closed."""
        data = self._encode_pub(subject, payload, reply, headers)
        if not self._outbox.has_room(len(data)):
            return False
        self._queue(data)
        return True

    async def request(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        headers: Headers | dict[str, str] | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
        preceding: Sequence[Pub] = (),
    ) -> Msg:
        """Publish with a reply subject on the connection's one inbox and wait for the answer.
        :class:`NoRespondersError` if nobody listens; :class:`NatsTimeoutError` after
        ``timeout_s``. ``preceding`` messages (a batch's before its commit) are published just
        before the request, in the same write to the socket; a message the server would refuse
        raises :class:`ProtocolError` before any of them is queued."""
        await trio.lowlevel.checkpoint_if_cancelled()
        deadline = trio.current_time() + timeout_s
        token, reply, slot = self._mux.open(deadline)
        try:
            data = self._encode_pub(subject, payload, reply, headers)
            if preceding:
                send = self._wire.send_pub
                frames = [send(p.subject, bytes(p.payload), p.reply, p.headers) for p in preceding]
                frames.append(data)
                data = b"".join(frames)
            if self._outbox.has_room(len(data)):
                # The common case: no cancel scope of our own (the mux times the request out).
                self._queue(data)
                await slot.wait()
            else:
                with trio.move_on_at(deadline):
                    await self._outbox.wait_for_room(len(data), self._check_open)
                    self._queue(data)
                    await slot.wait()
        finally:
            self._mux.forget(token)
        msg = slot.msg
        if msg is None:
            self._check_open()
            raise NatsTimeoutError(f"request on {subject!r}: no answer within {timeout_s} s")
        if not msg.payload and msg.status == NO_RESPONDERS_STATUS:
            raise NoRespondersError(f"request on {subject!r}: no responders")
        return msg

    async def next_msg_before(self, sub: Subscription, deadline: float) -> Msg | None:
        """The next message of ``sub`` (a subscription of this connection), or ``None`` once
        ``deadline`` (Trio clock) passed without one; ``trio.EndOfChannel`` once ``sub`` is
        closed and emptied. What ``with trio.move_on_at(deadline): await sub.next_msg()`` does,
        without a cancel scope (entering and leaving one is the larger part of a short wait's
        cost): the deadline is one entry in the heap the request deadlines live in. A
        checkpoint; cancel-safe: a cancelled wait takes no message."""
        if sub.buffered:
            await trio.lowlevel.checkpoint()
            return sub.next_msg_nowait()
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            if sub.closed:
                raise trio.EndOfChannel
            token, slot = self._mux.alarm(deadline)
            sub._waiters.append(slot)
            try:
                await slot.wait()
            finally:
                sub._waiters.remove(slot)
                self._mux.disarm(token)
            if sub.buffered:
                return sub.next_msg_nowait()
            if not sub.closed and trio.current_time() >= deadline:
                return None
            # Woken for a message another waiter took: wait again.

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
                waiter = PongWaiter()
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
        if self._closed:  # _check_open, inline: once per frame
            raise ConnectionClosedError(self._close_reason)
        block = Headers.of(headers) if isinstance(headers, dict) else headers
        return self._wire.send_pub(subject, bytes(payload), reply, block)

    def _queue(self, data: bytes) -> None:
        self._outbox.write(data, busy=self._mux.pending >= COALESCE_MIN_REQUESTS)

    def _queue_ping(self, waiter: PongWaiter) -> None:
        self._pings.sent(waiter)
        self._outbox.write_ping()

    def _unsubscribe(self, sub: Subscription) -> None:
        if self._subs.pop(sub.sid, None) is not None and not self._closed:
            self._queue(self._wire.send(Unsub(sub.sid)))
        sub._close()

    # --- internals: one socket ---------------------------------------------------------------

    def _attach(
        self, server: ServerAddress, protocol: ClientProtocol, stream: trio.abc.Stream
    ) -> None:
        self._wire = protocol
        self._server = server
        if protocol.info is not None:
            self._servers.learn(protocol.info.connect_urls, server)
        resubscribe = b"".join(
            protocol.send(Sub(sub.subject, sub.sid, sub.queue)) for sub in self._subs.values()
        )
        self._outbox.attach(stream, resubscribe)
        self._pings.new_socket()
        self._is_connected = True
        self._connected.set()

    def _detach(self) -> None:
        self._outbox.detach()
        self._is_connected = False
        self._connected = trio.Event()
        self._pings.socket_lost(still_queued=self._outbox.pings_queued)

    async def _session(self, stream: trio.abc.Stream) -> None:
        # The reader is read_events itself (a partial, no coroutine frame of ours around it:
        # every frame between the reader task and Trio's wait is passed through on every read).
        reader = functools.partial(read_events, protocol=self._wire, dispatch=self._dispatch)
        async with trio.open_nursery() as nursery:
            for part in (reader, self._outbox.run_writer, self._pinger):
                nursery.start_soon(self._guard, part, stream, nursery.cancel_scope)

    async def _guard(
        self,
        part: Callable[[trio.abc.Stream], Awaitable[object]],
        stream: trio.abc.Stream,
        scope: trio.CancelScope,
    ) -> None:
        try:
            await part(stream)
        except SOCKET_ERRORS as exc:
            self._dialer.last_error = exc
        scope.cancel()

    def _dispatch(self, event: object) -> None:
        if isinstance(event, Msg):
            if event.sid == _MUX_SID:
                self._mux.deliver(event)
                return
            sub = self._subs.get(event.sid)
            if sub is not None:
                sub._deliver(event)
        elif isinstance(event, Info):
            if self._server is not None:
                self._servers.learn(event.connect_urls, self._server)
        elif isinstance(event, Ping):
            self._queue(PONG_BYTES)
        elif isinstance(event, Pong):
            self._pings.pong()
        elif isinstance(event, Err):
            if event.message.lower().startswith("permissions violation"):
                self._dialer.last_error = ConnectionLostError(event.message)
                return
            raise ConnectionLostError(f"-ERR {event.message}")

    async def _pinger(self, stream: trio.abc.Stream) -> None:
        while True:
            await trio.sleep(self._ping_interval_s)
            self._queue_ping(self._pings.keepalive())

    # --- internals: the supervisor -----------------------------------------------------------

    async def _connect_first(self) -> trio.abc.Stream:
        """The first connection (see :meth:`Dialer.first`), attached."""
        reached = await self._dialer.first()
        self._attach(reached.server, reached.protocol, reached.stream)
        return reached.stream

    async def _supervise(self, stream: trio.abc.Stream) -> None:
        """The supervisor: run sessions, the first on ``stream`` (from
        :meth:`_connect_first`), until closed or ``max_reconnect_rounds`` rounds fail."""
        try:
            while True:
                try:
                    await self._session(stream)
                finally:
                    self._detach()
                    with trio.CancelScope(shield=True), trio.move_on_after(SOCKET_CLOSE_TIMEOUT_S):
                        await stream.aclose()
                reached = await self._dialer.again()
                if reached is None:
                    self._close(f"gave up reconnecting: {describe(self._dialer.last_error)}")
                    return
                self._attach(reached.server, reached.protocol, reached.stream)
                stream = reached.stream
                self._reconnects += 1
        finally:
            self._close(self._close_reason)

    def _close(self, reason: str) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_reason = reason
        self._is_connected = False
        self._connected.set()
        self._outbox.close()
        for sub in list(self._subs.values()):
            sub._close()
        self._subs.clear()
        self._pings.close()
        self._mux.wake_all()


@asynccontextmanager
async def open_connection(
    servers: str | Sequence[str],
    *,
    name: str | None = None,
    user: str | None = None,
    password: str | None = None,
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
    creds_file: str | os.PathLike[str] | None = None,
    nkey_seed_file: str | os.PathLike[str] | None = None,
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
    ``discover_servers`` adds the cluster's other nodes (from INFO) to the reconnect list.
    ``creds_file`` (a ``.creds`` file: user JWT and nkey seed) or ``nkey_seed_file`` (a user's
    nkey seed) sign the server's nonce; either is read once, here, and a file that cannot be
    used raises :class:`CredentialsError` before any server is tried."""
    nkey = await load_nkey_auth(creds_file=creds_file, nkey_seed_file=nkey_seed_file)
    conn = Connection(
        parse_servers(servers),
        name=name,
        user=user,
        password=password,
        token=token,
        tls=tls,
        nkey=nkey,
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
            nursery.start_soon(conn._mux.run_deadlines)
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
