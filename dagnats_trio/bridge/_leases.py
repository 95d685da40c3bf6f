"""``LeaseTable``: the bridge's leases, how they are handed out (poll) and kept alive.

Polls of one task type take turns on its ``workers-{task_type}`` consumer; the table is bounded
(finished leases are dropped first to make room). In the background it extends the AckWait of
every lease whose client keeps calling, lets the others lapse so their task is redelivered, and
cancels the leases of a cancelled run.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final, final

import trio

from ..journal import DeliveryState, TaskIdentity
from ..protocol import DecodeError, InvalidId, check_id, decode_task
from ..protocol.layout import TASK_STREAM, cancel_subject, worker_durable
from ..transport import CoreMsg, Delivery, Transport, TransportError
from ..worker import heartbeat_interval_s, task_consumer
from ._errors import BridgeError, bad_request, lease_not_found
from ._lease import Lease, ack
from ._views import LeaseView

_log = logging.getLogger(__name__)

#: Most leases held at once (live, and finished ones kept to answer late requests).
DEFAULT_MAX_LEASES: Final = 1024
#: Longest a poll may wait for a task.
MAX_POLL_WAIT_S: Final = 30.0
#: Ceiling on a configured ``max_poll_wait_s``.
MAX_POLL_WAIT_CEILING_S: Final = 3600.0
#: One fetch waits at most this long, so polls of one task type take turns on the consumer.
POLL_FETCH_SLICE_S: Final = 1.0
#: Shortest fetch: a poll with ``wait=0`` still asks the server once.
POLL_MIN_FETCH_S: Final = 0.1
#: Longest a request waits for another request of the same lease to finish.
LEASE_LOCK_WAIT_S: Final = 15.0
#: A lease is kept this many AckWaits after the client's last request, so a client that comes
#: back late is told ``fenced`` or ``lease_expired`` rather than ``lease_not_found``.
LEASE_KEEP_ACK_WAITS: Final = 10
#: Bytes of the random part of a lease token.
LEASE_TOKEN_BYTES: Final = 24
CANCEL_SUBJECTS: Final = cancel_subject("*")


def positive_seconds(name: str, value: float) -> float:
    """``value`` as a float, or a ValueError naming ``name`` unless it is a positive number."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


@final
class LeaseTable:
    """The leases of one bridge: ``poll`` hands them out, ``use`` serves one request at a time,
    ``run`` keeps them alive. The arguments are :class:`Bridge`'s, already checked."""

    def __init__(
        self,
        transport: Transport,
        *,
        bridge_id: str,
        ack_wait_s: float,
        task_ack_wait_s: float,
        max_leases: int,
        max_poll_wait_s: float,
    ) -> None:
        self._transport = transport
        self._bridge_id = bridge_id
        self._ack_wait_s = ack_wait_s
        self._task_ack_wait_s = task_ack_wait_s
        self._max_leases = max_leases
        self._max_poll_wait_s = max_poll_wait_s
        self._keep_s = ack_wait_s * LEASE_KEEP_ACK_WAITS
        self._leases: dict[str, Lease] = {}
        self._reserved = 0
        self._consumers: set[str] = set()
        self._fetch_locks: dict[str, trio.Lock] = {}
        self._running = False

    def __len__(self) -> int:
        return len(self._leases)

    # --- background ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Extend the AckWait of live leases, drop old ones, listen for cancellations."""
        async with (
            self._transport.subscribe(CANCEL_SUBJECTS) as cancels,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(self._listen_for_cancels, cancels)
            nursery.start_soon(self._keep_alive)
            self._running = True
            try:
                task_status.started()
                await trio.sleep_forever()
            finally:
                self._running = False

    async def _listen_for_cancels(self, cancels: AsyncIterator[CoreMsg]) -> None:
        async for msg in cancels:
            run_id = msg.subject.partition(".")[2]
            for lease in list(self._leases.values()):
                if lease.task.run_id == run_id and not lease.inactive:
                    lease.holder.cancel()
                    await ack(lease)

    async def _keep_alive(self) -> None:
        interval = heartbeat_interval_s(self._task_ack_wait_s)
        while True:
            await trio.sleep(interval)
            now = trio.current_time()
            for token, lease in list(self._leases.items()):
                quiet = now - lease.last_contact
                if quiet > self._keep_s:
                    self._leases.pop(token, None)
                    continue
                if lease.inactive or lease.holder.stalled:
                    continue
                if quiet > self._ack_wait_s:
                    lease.lapsed = True
                    _log.info(
                        "lease of %s.%s lapsed (no request for %.1f s); left for redelivery",
                        lease.task.run_id,
                        lease.task.step_id,
                        quiet,
                    )
                    continue
                try:
                    await lease.delivery.in_progress()
                except TransportError as exc:
                    _log.debug("in_progress for %s failed: %s", lease.delivery.subject, exc)

    # --- poll ---------------------------------------------------------------------------------

    async def poll(self, task_type: str, wait_s: float) -> LeaseView | None:
        """Lease the next task of ``task_type``, waiting up to ``wait_s`` (cut to the bridge's
        maximum); None when there was none."""
        if not self._running:
            raise BridgeError(503, "bridge_not_running", "the bridge is not running")
        try:
            check_id("task_type", task_type)
        except InvalidId as exc:
            raise bad_request(str(exc), exc.code) from None
        wait_s = min(max(wait_s, 0.0), self._max_poll_wait_s)
        self._reserve()
        try:
            return await self._poll(task_type, wait_s)
        finally:
            self._reserved -= 1

    def _reserve(self) -> None:
        if len(self._leases) + self._reserved >= self._max_leases:
            done = sorted(
                (lease for lease in self._leases.values() if lease.inactive),
                key=lambda lease: lease.last_contact,
            )
            excess = len(self._leases) + self._reserved - self._max_leases + 1
            for lease in done[:excess]:
                self._leases.pop(lease.token, None)
        if len(self._leases) + self._reserved >= self._max_leases:
            raise BridgeError(
                503,
                "too_many_leases",
                f"the bridge holds its maximum of {self._max_leases} leases; try again later",
            )
        self._reserved += 1

    async def _poll(self, task_type: str, wait_s: float) -> LeaseView | None:
        durable = worker_durable(task_type)
        if task_type not in self._consumers:
            await self._transport.ensure_consumer(task_consumer(task_type, self._task_ack_wait_s))
            self._consumers.add(task_type)
        now = trio.current_time()
        deadline = now + wait_s
        lock = self._fetch_locks.setdefault(task_type, trio.Lock())
        with trio.move_on_at(max(deadline, now + POLL_MIN_FETCH_S)):
            await lock.acquire()
        if not lock.locked() or lock.statistics().owner is not trio.lowlevel.current_task():
            return None
        try:
            while True:
                remaining = deadline - trio.current_time()
                timeout = min(max(remaining, POLL_MIN_FETCH_S), POLL_FETCH_SLICE_S)
                for delivery in await self._transport.fetch(TASK_STREAM, durable, 1, timeout):
                    lease = await self._lease(task_type, delivery)
                    if lease is not None:
                        return self._view(lease)
                if trio.current_time() >= deadline:
                    return None
        finally:
            lock.release()

    async def _lease(self, task_type: str, delivery: Delivery) -> Lease | None:
        try:
            task = decode_task(delivery.data)
        except DecodeError as exc:
            _log.error("dropping an unreadable task message on %s: %s", delivery.subject, exc)
            await delivery.term()
            return None
        self._supersede(delivery)
        token = secrets.token_urlsafe(LEASE_TOKEN_BYTES)
        holder = DeliveryState(TaskIdentity.of(task), worker_id=self._bridge_id)
        lease = Lease(token, task_type, task, delivery, holder, trio.current_time())
        self._leases[token] = lease
        return lease

    def _supersede(self, delivery: Delivery) -> None:
        """The server handing a message out again means it gave up on its earlier delivery: a
        lease of that delivery has lapsed, whatever this bridge's clock says. The bridge's clock
        starts when the lease is made, after the server's: under load the server could redeliver
        first, and the earlier lease still settled (found by a loaded suite run)."""
        for lease in self._leases.values():
            if (
                lease.delivery.stream_seq == delivery.stream_seq
                and lease.delivery.num_delivered < delivery.num_delivered
                and not lease.inactive
            ):
                lease.lapsed = True
                _log.info(
                    "lease of %s.%s lapsed: the server delivered its task again",
                    lease.task.run_id,
                    lease.task.step_id,
                )

    def _view(self, lease: Lease) -> LeaseView:
        t = lease.task
        d = t.dispatch
        return LeaseView(
            token=lease.token,
            task_type=lease.task_type,
            run_id=t.run_id,
            step_id=t.step_id,
            workflow=t.workflow,
            iteration=d.iteration,
            attempt=d.attempt,
            nonce=d.nonce,
            input=t.input,
            journal_seq=t.journal_seq,
            is_loop=t.is_loop,
            loop_state_max_bytes=t.loop_state_max_bytes,
            num_delivered=lease.delivery.num_delivered,
            ack_wait_ms=round(self._ack_wait_s * 1000),
        )

    # --- using a lease ------------------------------------------------------------------------

    @asynccontextmanager
    async def use(self, token: str) -> AsyncIterator[Lease]:
        """The lease, one request at a time; any request counts as contact unless it lapsed."""
        lease = self._leases.get(token)
        if lease is None:
            raise lease_not_found(token)
        with trio.move_on_after(LEASE_LOCK_WAIT_S):
            await lease.lock.acquire()
        if lease.lock.statistics().owner is not trio.lowlevel.current_task():
            raise BridgeError(
                409, "lease_busy", "another request of this lease is still running; retry"
            )
        try:
            now = trio.current_time()
            if not lease.lapsed and now - lease.last_contact > self._ack_wait_s:
                lease.lapsed = True
            if not lease.lapsed:
                lease.last_contact = now
            yield lease
        finally:
            lease.lock.release()
