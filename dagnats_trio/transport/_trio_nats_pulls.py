"""The native transport's :class:`~dagnats_trio.transport.Puller`: a worker's pull requests,
each on its own token of one inbox, and acks that carry the next one.

A worker that handles one task after another sent two messages per task: the pull request
that asked for it (its loop asks again as soon as a fetch returns) and, once the lifecycle
event is stored, the ack. JetStream's ack with next (``+NXT`` and a pull request's JSON, the
reply subject the inbox the next delivery goes to: nats.go's ``AckNext``) is both in one
message, so a finished delivery asks for the place it frees: batch 1, the same ``expires`` as
the loop's own requests. nats-server queues waiting requests first come first served (a
request with places left moves to the back after each delivery), so in a sequential run the
task after next is caught by such a request and the loop asks for nothing: no pull request per
task, on the wire or counted.

A delivery does not say which request it fills (it comes on the message's own subject; only
a request's end comes on its token), so the puller keeps the server's queue as nats-server
keeps it: the request at the head takes the delivery, and moves to the back while it has
places left. Each request's places stay counted until it is filled, ended by the server
(404/408/409 on its token) or taken as lost (a reconnect: the new server knows nothing of it;
or no end seen well past its ``expires``); unfilled places are then released to the worker.
The model only decides which request's places a delivery fills, never how many places the
puller holds (asked = the places of the requests it counts), so a delivery the model credits
to the wrong request releases one place late (at the other's end), never one too many; and a
delivery that comes with nothing asked (a straggler of a request given up) is nakked at once:
the worker holds no more deliveries than it has places.

With ``on_delivery`` the inbox has a handler (``Subscription``'s ``on_msg``): the connection's
reader keeps the model and hands each delivery to ``on_delivery`` as it parses it, so a worker
starts a task for it without its pull loop waking first; the loop's fetch wakes only when
nothing is asked any more (or at its timeout), which is when the loop has something to do.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, final

import attrs
import trio

from ..nats import Msg, NatsError, ProtocolError, Subscription
from ._errors import Closed, TemporarilyUnavailable, TransportError
from ._interface import Delivery
from ._jetstream_wire import PULL_EXPIRES_MARGIN_NS, PULL_IDLE_HEARTBEAT, ns, pull_end_error
from ._trio_nats_feed import STANDING_PULL_GRACE_S, flush_before_leaving, nak_each
from ._trio_nats_msgs import TrioNatsDelivery, map_error

if TYPE_CHECKING:
    from ._trio_nats import TrioNatsTransport

#: Deliveries a puller's inbox buffers (more than any worker's places).
PULLER_BUFFER_MSGS = 4096
#: Most requests one puller keeps waiting: an ack with next beyond it acks plainly (its place
#: goes back to the worker). Each request waiting holds one of the consumer's ``max_waiting``
#: (512 by default, shared by every worker of the task type), and an ack asks for one place,
#: so a worker of many places could otherwise take them all.
MAX_WAITING_REQUESTS = 32


@final
@attrs.define
class _Request:
    """One pull request waiting on the server: the places it may still fill."""

    owed: int
    reconnects: int
    lost_at: float


@final
class TrioNatsPuller:
    """A worker loop's requests on one durable (see the module's docstring)."""

    def __init__(
        self,
        transport: TrioNatsTransport,
        prefix: str,
        next_subject: str,
        expires_s: float,
        on_release: Callable[[int], None],
        on_delivery: Callable[[Delivery], None] | None,
        what: str,
    ) -> None:
        self._transport = transport
        self._conn = transport.connection
        #: The inbox, from :meth:`attach` (its handler, :meth:`handle`, is this puller's).
        self._sub: Subscription
        self._on_delivery = on_delivery
        self._prefix = prefix
        self._next_subject = next_subject
        self._expires_s = expires_s
        self._expires_ns = max(ns(expires_s) - PULL_EXPIRES_MARGIN_NS, 1)
        self._on_release = on_release
        self._what = what
        self._tokens = itertools.count(1)
        #: Waiting requests by token, oldest first (all share one ``expires``), and their
        #: tokens in the order the server's queue holds them (the module's docstring).
        self._requests: dict[str, _Request] = {}
        self._queue: deque[str] = deque()
        self._asked = 0
        self._taken: deque[Msg] = deque()
        self._error: TransportError | None = None
        self._left = False
        self._next_payload = (
            b"+NXT " + json.dumps({"batch": 1, "expires": self._expires_ns}).encode()
        )
        #: Pull requests sent by :meth:`ask`, and acks that carried one (for tests).
        self.requests = 0
        self.acks_with_next = 0

    def attach(self, sub: Subscription) -> None:
        """Pull on ``sub``: the inbox, subscribed with :meth:`handle` as its handler when
        this puller has an ``on_delivery``."""
        self._sub = sub

    def handle(self, msg: Msg) -> None:
        """The inbox's handler (in the connection's reader): the message taken as a fetch
        takes it, a delivery handed to ``on_delivery``; the fetch waiting is woken only when
        nothing is asked any more (then its loop asks again)."""
        self._take(msg)
        if not self._asked:
            self._sub.wake()

    @property
    def asked(self) -> int:
        return self._asked

    async def ask(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"ask for at least one delivery, got {n}")
        await trio.lowlevel.checkpoint()
        self._transport._check_open(self._what)
        if self._left:
            raise Closed(f"{self._what}: left")
        conn = self._conn
        if not conn.is_connected:
            raise TemporarilyUnavailable(f"{self._what}: not connected to NATS")
        token = f"{self._prefix}.{next(self._tokens)}"
        body = json.dumps({"batch": n, "no_wait": True, "expires": self._expires_ns}).encode()
        try:
            if not conn.try_publish(self._next_subject, body, reply=token):
                await conn.publish(self._next_subject, body, reply=token)
        except (NatsError, ProtocolError) as exc:
            raise map_error(exc, self._what) from None
        self._transport._count_round_trip()
        self.requests += 1
        self._open(token, n)

    def _open(self, token: str, n: int) -> None:
        lost_at = self._conn.current_time() + self._expires_s + STANDING_PULL_GRACE_S
        self._requests[token] = _Request(n, self._conn.reconnects, lost_at)
        self._queue.append(token)
        self._asked += n

    async def fetch(self, timeout_s: float) -> list[Delivery]:
        self._transport._check_open(self._what)
        self._drain()
        if self._taken or not self._asked:
            await trio.lowlevel.checkpoint()
            return self._hand_out()
        now = self._conn.current_time  # trio.current_time() without its two frames
        deadline = now() + timeout_s
        while True:
            oldest = next(iter(self._requests.values()), None)
            wait_until = deadline if oldest is None else min(deadline, oldest.lost_at)
            try:
                msg = await self._conn.next_msg_before(self._sub, wait_until)
            except trio.EndOfChannel:
                raise Closed(f"{self._what}: transport closed") from None
            if msg is not None:
                self._take(msg)
            self._drain()
            if self._taken or not self._asked or now() >= deadline:
                return self._hand_out()

    def ack_next(self, delivery: Delivery) -> bool:
        conn = self._conn
        if (
            self._left
            or not conn.is_connected
            or len(self._requests) >= MAX_WAITING_REQUESTS
            or not isinstance(delivery, TrioNatsDelivery)
        ):
            delivery.ack_nowait()
            return False
        token = f"{self._prefix}.{next(self._tokens)}"
        if not delivery.ack_next_soon(self._next_payload, token):
            return False
        self.acks_with_next += 1
        self._open(token, 1)
        return True

    def _drain(self) -> None:
        """Take what the inbox buffered (no scheduler pass per message), then give up the
        requests that cannot end any more (lost)."""
        sub = self._sub
        while sub.buffered:
            self._take(sub.next_msg_nowait())
        if self._requests:
            now = self._conn.current_time()
            reconnects = self._conn.reconnects
            for token, request in list(self._requests.items()):
                if request.reconnects == reconnects and now < request.lost_at:
                    break  # the rest were sent later: not lost either
                self._end(token)

    def _take(self, msg: Msg) -> None:
        if msg.status is None:
            if msg.reply is None:
                return
            if not self._asked:
                # A straggler of a request given up: its place is released already.
                with suppress(NatsError, ProtocolError):
                    self._conn.try_publish(msg.reply, b"-NAK")
                return
            self._asked -= 1
            queue = self._queue
            token = queue[0]
            request = self._requests[token]
            request.owed -= 1
            if request.owed == 0:
                queue.popleft()
                del self._requests[token]
            elif len(queue) > 1:
                queue.rotate(-1)  # what nats-server does with a request that has places left
            if self._on_delivery is None or self._left:
                # Held for the next fetch (once left: for leave, which gives it back).
                self._taken.append(msg)
            else:
                self._on_delivery(TrioNatsDelivery(self._transport, msg))
            return
        token = msg.subject
        if msg.status == PULL_IDLE_HEARTBEAT or token not in self._requests:
            return
        self._end(token)
        description = msg.headers.description if msg.headers else ""
        error = pull_end_error(msg.status, description, self._what)
        if error is not None:
            self._error = error

    def _end(self, token: str) -> None:
        request = self._requests.pop(token)
        self._queue.remove(token)
        if request.owed:
            self._asked -= request.owed
            self._on_release(request.owed)

    def _hand_out(self) -> list[Delivery]:
        if not self._taken and self._error is not None:
            error, self._error = self._error, None
            raise error
        out: list[Delivery] = [TrioNatsDelivery(self._transport, m) for m in self._taken]
        self._taken.clear()
        return out

    async def leave(self) -> None:
        """Give back what is held and release every place asked, on the way out, maybe
        cancelled (shielded, bounded). While a request waits, a flush first: what the server
        sent before it is then in the inbox, not lost on the way (it would wait for its
        AckWait). Then the inbox is left, which ends the waiting requests (the server drops a
        request nobody listens on), and what it holds is nakked."""
        self._left = True
        if self._requests:
            await flush_before_leaving(self._conn)
        self._sub.unsubscribe()
        sub = self._sub
        while sub.buffered:
            self._take(sub.next_msg_nowait())
        taken = len(self._taken)
        nak_each(self._conn, self._taken)
        self._taken.clear()
        if taken:
            self._on_release(taken)
        for token in list(self._requests):
            self._end(token)
        self._error = None
