"""The Trio shell around :class:`ClientProtocol`: one socket at a time, reconnecting.

Shape (trio-websocket's): :func:`open_connection` opens a nursery holding one supervisor task.
The supervisor connects (the :class:`Dialer`), then runs a reader, a writer and a pinger until
the socket fails, and then reconnects with a bounded, jittered backoff, resubscribing everything.
Callers never await the socket: what they send goes to the :class:`Outbox`, which writes it at
once (on a busy connection: with the other frames of the scheduler pass, at its end) or queues
it whole for the writer. So a cancelled caller can never leave half a frame, and every call is
safe to cancel at any await.

This module holds the connection's state and its lifecycle under the calls (the public
:class:`~._connection.Connection` is built on it): queueing a frame, attaching a socket and
resubscribing, the session's reader, writer and pinger, routing what the reader parsed (to the
request mux or a subscription), the supervisor, and closing.
"""

from __future__ import annotations

import functools
import itertools
import random as random_module
import ssl
from collections.abc import Awaitable, Callable, Mapping

import trio

from ._credentials import NkeyAuth
from ._defaults import SOCKET_CLOSE_TIMEOUT_S
from ._dialer import SOCKET_ERRORS, Dialer
from ._encoder import PONG_BYTES
from ._events import Err, Info, Msg, Ping, Pong, Sub, Unsub
from ._handshake import ClientSettings
from ._headers import Headers
from ._mux import RequestMux
from ._outbox import Outbox
from ._pings import Pings
from ._protocol import ClientProtocol
from ._reader import read_events
from ._servers import ServerAddress, ServerList
from ._shell_errors import ConnectionClosedError, ConnectionLostError, describe
from ._subscription import Subscription
from ._waiters import PongWaiter

#: The request mux's subscription id (user subscriptions count up from 2).
_MUX_SID = "1"


class ConnectionLifecycle:
    """The state and lifecycle of a :class:`~._connection.Connection` (its base: not used
    alone)."""

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
        #: ``trio.current_time()`` without its two frames: the clock of the Trio run the
        #: connection is opened in (it is made inside one, by open_connection), read directly.
        #: Every request reads it for its deadline, and every fetch of a pull consumer on
        #: this connection for its own.
        self.current_time: Callable[[], float] = trio.lowlevel.current_clock().current_time
        self._wire = ClientProtocol()
        self._mux = RequestMux()
        # Reads the mux's count of requests in flight to tell a busy connection.
        self._outbox = Outbox(self._mux)
        self._pings = Pings(max_outstanding_pings)
        self._subs: dict[str, Subscription] = {}
        self._sids = itertools.count(int(_MUX_SID) + 1)
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

    # --- internals: queueing -----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ConnectionClosedError(self._close_reason)

    def _encode_pub(
        self,
        subject: str,
        payload: bytes,
        reply: str | None,
        headers: Headers | Mapping[str, str] | None,
    ) -> bytes:
        if self._closed:  # _check_open, inline: once per frame
            raise ConnectionClosedError(self._close_reason)
        # Headers go to the encoder as given: a block, or a mapping of fields encoded as one
        # (no ``Headers`` built per message). Bytes are told by ``is``, without a call.
        data = payload if type(payload) is bytes else bytes(payload)
        return self._wire.send_pub(subject, data, reply, headers)

    def _queue_ping(self, waiter: PongWaiter) -> None:
        self._pings.sent(waiter)
        self._outbox.write_ping()

    def _unsubscribe(self, sub: Subscription) -> None:
        if self._subs.pop(sub.sid, None) is not None and not self._closed:
            self._outbox.write(self._wire.send(Unsub(sub.sid)))
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
        # The reader task is read_events itself, which hands its error to _lost (no coroutine
        # frame of ours around it: every frame between the reader task and Trio's wait is
        # passed through on every read).
        async with trio.open_nursery() as nursery:
            scope = nursery.cancel_scope
            lost = functools.partial(self._lost, scope)
            nursery.start_soon(read_events, stream, self._wire, self._dispatch, lost)
            for part in (self._outbox.run_writer, self._pinger):
                nursery.start_soon(self._guard, part, stream, lost)

    def _lost(self, scope: trio.CancelScope, error: BaseException | None) -> None:
        """A part of the session ended (``error``: the socket's, kept for the next dial's
        report): the session ends."""
        if error is not None:
            self._dialer.last_error = error
        scope.cancel()

    async def _guard(
        self,
        part: Callable[[trio.abc.Stream], Awaitable[object]],
        stream: trio.abc.Stream,
        lost: Callable[[BaseException | None], None],
    ) -> None:
        try:
            await part(stream)
        except SOCKET_ERRORS as exc:
            lost(exc)
            return
        lost(None)

    def _dispatch(self, event: object) -> None:
        if type(event) is Msg:  # Msg is final: no isinstance call for every reply and delivery
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
            self._outbox.write(PONG_BYTES)
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
