"""An in-memory JetStream on the Trio clock: the :class:`Transport` for deterministic tests.

Why it exists: the chaos soak and the crash-point matrix need thousands of runs with faults at
exact moments, and one seed must give one trace. So the simulation reads time only from
``trio.current_time()``, waits only on Trio primitives, holds no randomness, and iterates its
state in insertion or sequence order. Under ``MockClock(autojump_threshold=0)`` AckWaits, nak
delays and TTLs pass instantly.

It follows what nats-server does where callers can tell the difference (the conformance suite in
``tests/transport`` holds both implementations to the same outcomes): sequences are per stream,
the message-id duplicate check runs before the expected-subject-sequence check, acks and naks act
on the stream sequence of whichever delivery sends them, a work-queue stream drops a message when
it is acked or terminated, and fire-and-forget settles (nak, in-progress, term) are lost silently
while the server is unavailable.

Several connections may share one :class:`SimServer` (several engines and workers against one
store); :func:`open_sim_transport` is the shortcut for one server and one connection.

Faults (:class:`SimFaults`, in ``_sim_faults``) delay calls, make JetStream unavailable, lose
publish acks, and drop or duplicate deliveries. The stream operations (publish, batches, gets)
are ``_sim_streams``, the key-value requests ``_sim_kv``; this module holds the connection, KV
watches, consumers and core NATS.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, final

import trio

from ..nats import DEFAULT_MAX_PAYLOAD_BYTES
from ._errors import Closed, TemporarilyUnavailable, TransportTimeout
from ._feed import fetch_feed
from ._fetch_puller import fetch_puller
from ._interface import Delivery, Feed, Puller
from ._max_payload import check_max_payload
from ._sim_delivery import SimDelivery
from ._sim_faults import SimFaults
from ._sim_kv import SimKv
from ._sim_server import SimServer
from ._sim_state import CoreSub, ReplySlot, Watcher
from ._sim_streams import SimStreams
from ._sim_subjects import check_publish_subject
from ._values import (
    DEFAULT_REQUEST_TIMEOUT_S,
    BucketSpec,
    ConsumerConfig,
    CoreMsg,
    Headers,
    KvEntry,
    StreamSpec,
)

if TYPE_CHECKING:
    from ._interface import Transport

#: Messages a core subscription buffers before it drops new ones (NATS "slow consumer").
SUB_PENDING_MSGS_LIMIT = 65_536
#: Changes a KV watcher buffers before it drops new ones.
WATCH_PENDING_ENTRIES_LIMIT = 65_536


@final
class SimTransport(SimKv, SimStreams):
    """One connection to a :class:`SimServer`; implements :class:`Transport`."""

    def __init__(self, server: SimServer, conn_id: int) -> None:
        self._server = server
        self._id = conn_id
        self._round_trips = 0
        self._closed = False
        self._inbox_seq = 0
        self._subs: list[CoreSub] = []
        self._watchers: list[Watcher] = []

    @property
    def server(self) -> SimServer:
        return self._server

    @property
    def faults(self) -> SimFaults:
        return self._server.faults

    @property
    def round_trips(self) -> int:
        return self._round_trips

    @property
    def max_payload_bytes(self) -> int:
        return self._server.max_payload_bytes

    async def __aenter__(self) -> SimTransport:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --- call plumbing ---------------------------------------------------------------------

    async def _arrive(self) -> None:
        if self._closed:
            raise Closed("transport is closed")
        delay = self._server.faults.delay_s
        if delay > 0:
            await trio.sleep(delay)
        else:
            await trio.lowlevel.checkpoint()
        if self._closed:
            raise Closed("transport is closed")

    async def _call(self, *, jetstream: bool = True) -> None:
        """A request that waits for the server's answer: counts a round trip."""
        await self._arrive()
        self._round_trips += 1
        if jetstream and trio.current_time() < self._server.faults.unavailable_until:
            raise TemporarilyUnavailable("JetStream is unavailable (simulated leader election)")

    async def _fire_and_forget(self) -> bool:
        """A JetStream publish nobody waits on; False when it is lost to unavailability."""
        await self._arrive()
        return trio.current_time() >= self._server.faults.unavailable_until

    def _fire_and_forget_now(self) -> bool:
        """:meth:`_fire_and_forget` for a message queued without an await (``ack_nowait``):
        no delay, no scheduler pass; False when it is lost to unavailability."""
        if self._closed:
            raise Closed("transport is closed")
        return trio.current_time() >= self._server.faults.unavailable_until

    # --- key-value -------------------------------------------------------------------------

    @asynccontextmanager
    async def kv_watch(
        self, bucket: str, prefix: str = ""
    ) -> AsyncIterator[AsyncIterator[KvEntry]]:
        await self._call()
        b = self._server._bucket(bucket)
        send, receive = trio.open_memory_channel[KvEntry](WATCH_PENDING_ENTRIES_LIMIT)
        watcher = Watcher(self, prefix, send)
        b.watchers.append(watcher)
        self._watchers.append(watcher)
        try:
            async with receive:
                yield receive
        finally:
            if watcher in b.watchers:
                b.watchers.remove(watcher)
            if watcher in self._watchers:
                self._watchers.remove(watcher)
            send.close()

    # --- durable pull consumers -------------------------------------------------------------

    async def ensure_consumer(self, config: ConsumerConfig) -> None:
        if config.ack_wait_s <= 0 or any(wait <= 0 for wait in config.backoff_s):
            raise ValueError(
                f"ack_wait_s and backoff_s must be positive, got {config.ack_wait_s}, "
                f"{config.backoff_s}"
            )
        if config.backoff_s and 0 < config.max_deliver <= len(config.backoff_s):
            raise ValueError("max_deliver must be -1 or larger than the length of backoff_s")
        await self._call()
        self._server._ensure_consumer(config)

    async def fetch(
        self, stream: str, durable: str, batch: int, timeout_s: float
    ) -> list[Delivery]:
        if batch < 1:
            raise ValueError(f"batch must be at least 1, got {batch}")
        await self._call()
        server = self._server
        deadline = trio.current_time() + timeout_s
        while True:
            s = server._stream(stream)
            consumer = server._consumer(stream, durable)
            taken = server._take(s, consumer, batch)
            if taken:
                return [
                    SimDelivery(
                        msg.subject, msg.data, dict(msg.headers), msg.seq, n, self, stream, durable
                    )
                    for msg, n in taken
                ]
            now = trio.current_time()
            if now >= deadline:
                return []
            changed = server._changed
            with trio.move_on_at(min(deadline, consumer.next_due())):
                await changed.wait()
            if self._closed:
                raise Closed("transport is closed")

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

    # --- core NATS ---------------------------------------------------------------------------

    async def core_publish(self, subject: str, data: bytes, headers: Headers | None = None) -> None:
        check_publish_subject(subject)
        check_max_payload(self.max_payload_bytes, data, headers, f"publish to {subject!r}")
        await self._arrive()
        self._server._deliver_core(subject, data, dict(headers or {}), None)

    @asynccontextmanager
    async def subscribe(
        self, subject: str, queue: str | None = None
    ) -> AsyncIterator[AsyncIterator[CoreMsg]]:
        await self._arrive()
        send, receive = trio.open_memory_channel[CoreMsg](SUB_PENDING_MSGS_LIMIT)
        sub = CoreSub(self, subject, queue, send)
        self._server._subs.append(sub)
        self._subs.append(sub)
        try:
            async with receive:
                yield receive
        finally:
            if sub in self._server._subs:
                self._server._subs.remove(sub)
            if sub in self._subs:
                self._subs.remove(sub)
            send.close()

    async def respond(self, msg: CoreMsg, data: bytes) -> None:
        if msg.reply is None:
            raise ValueError(f"message on {msg.subject!r} is not a request: it has no reply")
        check_max_payload(self.max_payload_bytes, data, None, f"reply to {msg.reply!r}")
        await self._arrive()
        self._server._deliver_core(msg.reply, data, {}, None)

    async def ping(self, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> None:
        await self._call()

    async def request(
        self,
        subject: str,
        data: bytes,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        headers: Headers | None = None,
    ) -> bytes:
        check_publish_subject(subject)
        check_max_payload(self.max_payload_bytes, data, headers, f"request to {subject!r}")
        await self._call(jetstream=False)
        server = self._server
        self._inbox_seq += 1
        inbox = f"_INBOX.sim{self._id}.{self._inbox_seq}"
        slot = ReplySlot()
        server._replies[inbox] = slot
        try:
            if server._deliver_core(subject, data, dict(headers or {}), inbox) == 0:
                raise TemporarilyUnavailable(f"no responders on {subject!r}")
            with trio.move_on_after(timeout_s):
                await slot.event.wait()
                return slot.data
            raise TransportTimeout(f"no reply on {subject!r} within {timeout_s} s")
        finally:
            del server._replies[inbox]

    # --- provisioning ------------------------------------------------------------------------

    async def ensure_stream(self, spec: StreamSpec, replicas: int = 1) -> None:
        _check_replicas(replicas)
        await self._call()
        self._server._ensure_stream(spec)

    async def ensure_bucket(self, spec: BucketSpec, replicas: int = 1) -> None:
        _check_replicas(replicas)
        await self._call()
        self._server._ensure_bucket(spec)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sub in self._subs:
            sub.send.close()
            if sub in self._server._subs:
                self._server._subs.remove(sub)
        for watcher in self._watchers:
            watcher.send.close()
            for bucket in self._server._buckets.values():
                if watcher in bucket.watchers:
                    bucket.watchers.remove(watcher)
        self._server._notify()
        await trio.lowlevel.checkpoint()


def _check_replicas(replicas: int) -> None:
    if not 1 <= replicas <= 5:
        raise ValueError(f"replicas must be between 1 and 5, got {replicas}")


@asynccontextmanager
async def open_sim_transport(
    *, faults: SimFaults | None = None, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
) -> AsyncIterator[SimTransport]:
    """One fresh :class:`SimServer` (announcing ``max_payload_bytes``) and one connection to it
    (not provisioned)."""
    server = SimServer(faults, max_payload_bytes=max_payload_bytes)
    async with server.connect() as transport:
        yield transport


if TYPE_CHECKING:

    def _conforms(t: SimTransport, d: SimDelivery) -> tuple[Transport, Delivery]:
        """mypy proves here that the simulation implements the whole interface."""
        return t, d
