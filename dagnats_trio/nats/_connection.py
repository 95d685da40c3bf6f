"""A NATS connection's calls: publish, request, subscribe, flush and drain, and what it
tells of its state (:func:`~._open.open_connection` opens one in a nursery of its own).

Every call is safe to cancel at any await: what it sends goes to the outbox whole (see
``_lifecycle``, which holds the socket, the supervisor that reconnects and closing), and a
request's answer comes through the request mux (``_mux``) on the connection's one inbox.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import final

import attrs
import trio

from ._defaults import (
    DRAIN_TIMEOUT_S,
    FLUSH_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
)
from ._events import Info, Msg, Pub, Sub, Unsub
from ._headers import NO_RESPONDERS_STATUS, Headers
from ._lifecycle import _MUX_SID, ConnectionLifecycle
from ._nuid import new_inbox
from ._shell_errors import NatsError, NatsTimeoutError, NoRespondersError
from ._subscription import SUBSCRIPTION_BUFFER_MSGS, Subscription
from ._waiters import PongWaiter, ReplySlot


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
class Connection(ConnectionLifecycle):
    """A NATS connection; use :func:`open_connection`."""

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
    def reconnects(self) -> int:
        """Reconnects so far (what :meth:`stats` counts, without making the stats): what a
        caller holding server-side state that a reconnect loses (a waiting pull request)
        compares to know it must ask again."""
        return self._reconnects

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
        headers: Headers | Mapping[str, str] | None = None,
    ) -> None:
        """Queue a message; the writer sends it with whatever else is queued. Returns once it is
        queued (``flush`` waits for the server). Raises :class:`ProtocolError` for a message
        the server would refuse (size, subject)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        data = self._encode_pub(subject, payload, reply, headers)
        await self._outbox.wait_for_room(len(data), self._check_open)
        self._outbox.write(data)
        await trio.lowlevel.cancel_shielded_checkpoint()

    def try_publish(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        reply: str | None = None,
        headers: Headers | Mapping[str, str] | None = None,
        soon: bool = False,
    ) -> bool:
        """Queue a message now, without a checkpoint, if the outbox has room; False (nothing
        queued) when it has none: then ``await publish``. For a caller whose next await is a
        checkpoint anyway (it waits for the answer, or sends a request right after), so a
        message costs no extra pass of the scheduler. Raises what :meth:`publish` raises for a
        message the server would refuse, and :class:`ConnectionClosedError` once closed.

        ``soon``, for a message nobody waits on (an ack): while the connections are busy (the
        end of the scheduler pass is watched for their frames), it waits for the end of this
        pass and shares its system call with what the connection queues after it (the pull
        request of the next fetch, the frames of other runs); at once otherwise."""
        data = self._encode_pub(subject, payload, reply, headers)
        return self._outbox.write(data, soon=soon, if_room=True)

    async def request(
        self,
        subject: str,
        payload: bytes = b"",
        *,
        headers: Headers | Mapping[str, str] | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
        preceding: Sequence[Pub] = (),
    ) -> Msg:
        """Publish with a reply subject on the connection's one inbox and wait for the answer.
        :class:`NoRespondersError` if nobody listens; :class:`NatsTimeoutError` after
        ``timeout_s``. ``preceding`` messages (a batch's before its commit) are published just
        before the request, in the same write to the socket; a message the server would refuse
        raises :class:`ProtocolError` before any of them is queued."""
        await trio.lowlevel.checkpoint_if_cancelled()
        deadline = self.current_time() + timeout_s
        token, reply, slot = self._mux.open(deadline)
        try:
            data = self._encode_pub(subject, payload, reply, headers)
            if preceding:
                send = self._wire.send_pub
                frames = [send(p.subject, bytes(p.payload), p.reply, p.headers) for p in preceding]
                frames.append(data)
                data = b"".join(frames)
            if self._outbox.write(data, if_room=True):
                # The common case: no cancel scope of our own (the mux times the request out).
                await slot.wait()
            else:
                with trio.move_on_at(deadline):
                    await self._outbox.wait_for_room(len(data), self._check_open)
                    self._outbox.write(data)
                    await slot.wait()
        finally:
            if slot.msg is None:  # answered, it is forgotten already (``RequestMux.deliver``)
                self._mux.forget(token)
        msg = slot.msg
        if msg is None:
            self._check_open()
            raise NatsTimeoutError(f"request on {subject!r}: no answer within {timeout_s} s")
        if not msg.payload and msg.status == NO_RESPONDERS_STATUS:
            raise NoRespondersError(f"request on {subject!r}: no responders")
        return msg

    async def request_each(
        self, requests: Sequence[Pub], *, timeout_s: float = REQUEST_TIMEOUT_S
    ) -> list[Msg | NatsError]:
        """Send each of ``requests`` (their ``reply`` is replaced by one on the connection's
        inbox) in one write to the socket, and wait for every answer in this task: no task per
        request, one system call. Per request its answer, or the :class:`NoRespondersError` /
        :class:`NatsTimeoutError` it got (``timeout_s`` counts for all of them at once); a
        closed connection raises. Cancelled, it leaves no reply slot behind."""
        if not requests:
            await trio.lowlevel.checkpoint()
            return []
        await trio.lowlevel.checkpoint_if_cancelled()
        deadline = self.current_time() + timeout_s
        opened: list[tuple[str, ReplySlot]] = []
        try:
            frames = []
            for r in requests:
                token, reply, slot = self._mux.open(deadline)
                opened.append((token, slot))
                frames.append(self._encode_pub(r.subject, r.payload, reply, r.headers))
            data = b"".join(frames)
            if not self._outbox.has_room(len(data)):
                with trio.move_on_at(deadline):
                    await self._outbox.wait_for_room(len(data), self._check_open)
            if self._outbox.has_room(len(data)):
                # No cancel scope of our own: the mux wakes each slot at its deadline.
                self._outbox.write(data)
                for _, slot in opened:
                    if not slot.woken:
                        await slot.wait()
        finally:
            for token, slot in opened:
                if slot.msg is None:  # answered, it is forgotten already
                    self._mux.forget(token)
        answers: list[Msg | NatsError] = []
        for r, (_, slot) in zip(requests, opened, strict=True):
            msg = slot.msg
            if msg is None:
                self._check_open()
                answers.append(
                    NatsTimeoutError(f"request on {r.subject!r}: no answer within {timeout_s} s")
                )
            elif not msg.payload and msg.status == NO_RESPONDERS_STATUS:
                answers.append(NoRespondersError(f"request on {r.subject!r}: no responders"))
            else:
                answers.append(msg)
        return answers

    async def next_msg_before(self, sub: Subscription, deadline: float) -> Msg | None:
        """The next message of ``sub`` (a subscription of this connection), or ``None`` once
        ``deadline`` (Trio clock) passed without one; ``trio.EndOfChannel`` once ``sub`` is
        closed and emptied. What ``with trio.move_on_at(deadline): await sub.next_msg()`` does,
        without a cancel scope (entering and leaving one is the larger part of a short wait's
        cost): the deadline is one entry in the heap the request deadlines live in. A
        checkpoint; cancel-safe: a cancelled wait takes no message.

        For a subscription with a handler (``on_msg``: nothing is buffered) it waits until the
        handler's :meth:`Subscription.wake`, ``deadline`` or the close, and returns None (or
        raises ``trio.EndOfChannel`` once closed)."""
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
            if not sub.closed and (sub.on_msg is not None or self.current_time() >= deadline):
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
        on_msg: Callable[[Msg], None] | None = None,
    ) -> AsyncIterator[Subscription]:
        """``async with conn.subscribe("a.*") as sub: async for msg in sub: ...``. Leaving the
        block unsubscribes. Messages published on this connection after entering are seen; for
        other connections, ``flush`` first. With ``on_msg`` each message goes to it, in the
        reader's frame, instead of the buffer (see :class:`Subscription`)."""
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
            on_msg=on_msg,
        )
        self._subs[sid] = sub
        self._outbox.write(data)
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
                self._outbox.write(self._wire.send(Unsub(sub.sid)))
        with trio.move_on_after(timeout_s):
            await self.flush(timeout_s=timeout_s)
        self._close("the connection was drained and closed")
