"""The native transport's :class:`~dagnats_trio.transport.Feed`: one pull request kept waiting.

A plain fetch sends a pull request and reads the server's end-of-request status after its
deliveries: one socket write and one status message per fetch, so per delivery in a loop that
handles one event at a time (the engine's, in a sequential run: 5 of the 9 pull requests a
scripted agent run cost). A feed asks for ``batch`` deliveries with a long ``expires`` and
keeps that request waiting across its fetches, as nats.go's ``Consume`` does: a fetch costs
a request only when the last one is used up (``batch`` deliveries), ended by the server (its
``expires``: one request per ``STANDING_PULL_EXPIRES_S`` while idle; a 409), or lost (a
reconnect: the new server knows nothing of it; or no end seen well past its ``expires``).
Only for a loop that takes every delivery it is given: a request waiting on the server may
bring deliveries at any time, which wait in the feed, their AckWait running, until the loop
fetches again.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Iterable
from contextlib import suppress
from typing import TYPE_CHECKING, final

import trio

from ..nats import Connection, Msg, NatsError, ProtocolError, Subscription
from ._errors import Closed
from ._interface import Delivery
from ._jetstream_wire import PULL_IDLE_HEARTBEAT, ns, pull_end_error
from ._trio_nats_msgs import TrioNatsDelivery, map_error

if TYPE_CHECKING:
    from ._trio_nats import TrioNatsTransport

#: How long a feed's pull request waits on the server (its ``expires``): while idle, a feed
#: asks again this often (a plain fetch asks once per fetch timeout, 1 s in the engine).
STANDING_PULL_EXPIRES_S = 5.0
#: How long past its ``expires`` a request whose end never came is taken as lost (asked again).
STANDING_PULL_GRACE_S = 1.0
#: Bound on giving back what a feed holds when its loop leaves (one flush).
GIVE_BACK_TIMEOUT_S = 1.0
#: Deliveries a feed's inbox buffers; a request asks for no more than half of it, so the
#: stragglers of a request taken as lost cannot overflow it.
FEED_BUFFER_MSGS = 4096


@final
class StandingPull:
    """One loop's feed of a durable: a wildcard inbox, each request on its own token so a late
    end of an earlier request is told apart from the current one's."""

    def __init__(
        self,
        transport: TrioNatsTransport,
        sub: Subscription,
        prefix: str,
        next_subject: str,
        batch: int,
        what: str,
    ) -> None:
        self._transport = transport
        self._conn = transport.connection
        self._sub = sub
        self._prefix = prefix
        self._next_subject = next_subject
        self._batch = batch
        self._what = what
        self._tokens = itertools.count(1)
        self._taken: deque[Msg] = deque()
        asked = min(batch, FEED_BUFFER_MSGS // 2)
        self._body = json.dumps({"batch": asked, "expires": ns(STANDING_PULL_EXPIRES_S)}).encode()
        self._asked = asked
        #: The reply subject of the request waiting on the server; None when there is none.
        self._token: str | None = None
        #: Deliveries it may still bring.
        self._owed = 0
        #: The connection's reconnects when it was sent (a reconnect loses it).
        self._reconnects = 0
        #: When (Trio clock) it is taken as lost if no end of it came.
        self._lost_at = 0.0
        #: Pull requests sent (for tests: what a fetch costs on the wire).
        self.requests = 0

    async def fetch(self, timeout_s: float) -> list[Delivery]:
        self._transport._check_open(self._what)
        self._drain()
        if self._taken:
            await trio.lowlevel.checkpoint()
            return self._hand_out()
        conn = self._conn
        now = conn.current_time  # trio.current_time() without its two frames
        deadline = now() + timeout_s
        while True:
            if conn.is_connected and (
                self._token is None or conn.reconnects != self._reconnects or now() >= self._lost_at
            ):
                await self._ask()
            wait_until = deadline if self._token is None else min(deadline, self._lost_at)
            try:
                msg = await conn.next_msg_before(self._sub, wait_until)
            except trio.EndOfChannel:
                raise Closed(f"{self._what}: transport closed") from None
            if msg is not None:
                self._take(msg)
                self._drain()
                if self._taken:
                    return self._hand_out()
            elif now() >= deadline:
                return []

    async def _ask(self) -> None:
        # A cancelled fetch sends nothing (the wait after it is the schedule point).
        await trio.lowlevel.checkpoint_if_cancelled()
        conn = self._conn
        token = f"{self._prefix}.{next(self._tokens)}"
        self._transport._count_round_trip()
        self.requests += 1
        try:
            if not conn.try_publish(self._next_subject, self._body, reply=token):
                await conn.publish(self._next_subject, self._body, reply=token)
        except (NatsError, ProtocolError) as exc:
            raise map_error(exc, self._what) from None
        self._token = token
        self._owed = self._asked
        self._reconnects = conn.reconnects
        self._lost_at = conn.current_time() + STANDING_PULL_EXPIRES_S + STANDING_PULL_GRACE_S

    def _drain(self) -> None:
        """Take what the inbox buffered, without a scheduler pass per message."""
        sub = self._sub
        while len(self._taken) < self._batch and sub.buffered:
            self._take(sub.next_msg_nowait())

    def _take(self, msg: Msg) -> None:
        if msg.status is None:
            if msg.reply is not None:
                self._taken.append(msg)
                if self._owed > 0:
                    self._owed -= 1
                    if self._owed == 0:
                        self._token = None  # used up: the next fetch with nothing asks again
            return
        if msg.subject != self._token or msg.status == PULL_IDLE_HEARTBEAT:
            return  # the end of an earlier request
        self._token = None
        self._owed = 0
        if self._taken:
            return
        description = msg.headers.description if msg.headers else ""
        error = pull_end_error(msg.status, description, self._what)
        if error is not None:
            raise error

    def _hand_out(self) -> list[Delivery]:
        out: list[Delivery] = []
        taken = self._taken
        while taken and len(out) < self._batch:
            out.append(TrioNatsDelivery(self._transport, taken.popleft()))
        return out

    async def give_back(self) -> None:
        """Nak what was delivered and not handed out (redelivered at once, to whichever loop
        asks), on the way out, maybe cancelled (shielded, bounded). While a request waits, a
        flush first: what the server sent before its answer is then in the inbox, not lost on
        the way (it would wait for its AckWait). Then the inbox is left, which ends the waiting
        request (the server drops a request nobody listens on), and what it holds is nakked."""
        if self._token is not None:
            await flush_before_leaving(self._conn)
        self._sub.unsubscribe()
        sub = self._sub
        while sub.buffered:
            msg = sub.next_msg_nowait()
            if msg.status is None and msg.reply is not None:
                self._taken.append(msg)
        nak_each(self._conn, self._taken)
        self._taken.clear()


async def flush_before_leaving(conn: Connection) -> None:
    """Flush ``conn`` on the way out of a pull loop while its request waits, maybe cancelled
    (shielded, bounded by :data:`GIVE_BACK_TIMEOUT_S`): what the server sent before the flush's
    answer is then in the inbox, not lost on the way (it would wait for its AckWait)."""
    if not conn.is_connected:
        return
    with (
        trio.CancelScope(shield=True),
        trio.move_on_after(GIVE_BACK_TIMEOUT_S),
        suppress(NatsError),
    ):
        await conn.flush(timeout_s=GIVE_BACK_TIMEOUT_S)


def nak_each(conn: Connection, msgs: Iterable[Msg]) -> None:
    """Nak each delivery (redelivered at once, to whichever loop asks); on a closed connection
    the rest are left to the server, which redelivers them after their AckWait."""
    for msg in msgs:
        assert msg.reply is not None
        try:
            conn.try_publish(msg.reply, b"-NAK")
        except (NatsError, ProtocolError):
            break
