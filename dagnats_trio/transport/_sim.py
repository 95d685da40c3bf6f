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

Faults (:class:`SimFaults`, mutable at any time, shared by every connection of a server):

- ``delay_s``: every call waits this long (Trio time) before the server sees it;
- ``unavailable_until``: until this Trio time every JetStream call (streams, KV, consumers, acks)
  raises :class:`TemporarilyUnavailable`, as during a stream-leader step-down; core NATS works;
- ``lose_next_publish_acks(n, subject)``: the next ``n`` stream publishes matching ``subject`` are
  stored, then the caller gets :class:`TransportTimeout` (a lost publish ack);
- ``drop_next(durable, n)``: the next ``n`` deliveries of that consumer vanish on the way: they
  count as delivered and stay pending, so they come back after the AckWait;
- ``duplicate_next(durable, n)``: the next ``n`` deliveries of that consumer become deliverable
  again at once, so another fetch gets the same message (``num_delivered`` + 1) while the first
  holder still has it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from types import TracebackType
from typing import TYPE_CHECKING, final

import attrs
import trio

from ._interface import (
    DEFAULT_REQUEST_TIMEOUT_S,
    BucketSpec,
    Closed,
    ConsumerConfig,
    CoreMsg,
    Delivery,
    Headers,
    KeyExists,
    KvEntry,
    NotFound,
    NotProvisioned,
    RevisionMismatch,
    StoredMsg,
    StreamSpec,
    TemporarilyUnavailable,
    TransportError,
    TransportTimeout,
    WrongLastSequence,
    check_msg_ttl,
)

if TYPE_CHECKING:
    from ._interface import Transport

#: Messages a core subscription buffers before it drops new ones (NATS "slow consumer").
SUB_PENDING_MSGS_LIMIT = 65_536
#: Changes a KV watcher buffers before it drops new ones.
WATCH_PENDING_ENTRIES_LIMIT = 65_536
#: nats-server uses this duplicate window when a stream asks for none.
DEFAULT_DUPLICATE_WINDOW_S = 120.0
#: Header under which a publish's message id is stored, as nats-server does.
MSG_ID_HEADER = "Nats-Msg-Id"


# ---------------------------------------------------------------------------------------------
# Subjects.
# ---------------------------------------------------------------------------------------------


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` is one token, a final ``>`` is one or more tokens."""
    p_tokens = pattern.split(".")
    s_tokens = subject.split(".")
    for i, p in enumerate(p_tokens):
        if p == ">":
            return len(s_tokens) > i
        if i >= len(s_tokens) or (p != "*" and p != s_tokens[i]):
            return False
    return len(p_tokens) == len(s_tokens)


def subjects_overlap(a: str, b: str) -> bool:
    """Whether some subject matches both patterns."""
    a_tokens = a.split(".")
    b_tokens = b.split(".")
    for i in range(max(len(a_tokens), len(b_tokens))):
        if i >= len(a_tokens) or i >= len(b_tokens):
            return False
        x, y = a_tokens[i], b_tokens[i]
        if x == ">" or y == ">":
            return True
        if x != y and x != "*" and y != "*":
            return False
    return True


def _is_pattern(subject: str) -> bool:
    return any(t in ("*", ">") for t in subject.split("."))


def _check_publish_subject(subject: str) -> None:
    if not subject or _is_pattern(subject) or "" in subject.split(".") or " " in subject:
        raise ValueError(f"cannot publish to {subject!r}: not a literal NATS subject")


# ---------------------------------------------------------------------------------------------
# Faults.
# ---------------------------------------------------------------------------------------------


@final
@attrs.define
class SimFaults:
    """Faults the chaos soak turns on and off; see the module docstring. Mutable on purpose."""

    delay_s: float = 0.0
    unavailable_until: float = -math.inf
    lose_publish_acks: int = 0
    lose_publish_acks_subject: str = ">"
    drop_deliveries: dict[str, int] = attrs.field(factory=dict)
    duplicate_deliveries: dict[str, int] = attrs.field(factory=dict)

    def unavailable_for(self, seconds: float) -> None:
        """Fail JetStream calls for ``seconds`` of Trio time from now (a leader step-down)."""
        self.unavailable_until = trio.current_time() + seconds

    def lose_next_publish_acks(self, n: int = 1, subject: str = ">") -> None:
        self.lose_publish_acks = n
        self.lose_publish_acks_subject = subject

    def drop_next(self, durable: str, n: int = 1) -> None:
        self.drop_deliveries[durable] = self.drop_deliveries.get(durable, 0) + n

    def duplicate_next(self, durable: str, n: int = 1) -> None:
        self.duplicate_deliveries[durable] = self.duplicate_deliveries.get(durable, 0) + n

    def clear(self) -> None:
        """Turn every fault off."""
        self.delay_s = 0.0
        self.unavailable_until = -math.inf
        self.lose_publish_acks = 0
        self.drop_deliveries.clear()
        self.duplicate_deliveries.clear()

    def _spend(self, counters: dict[str, int], durable: str) -> bool:
        left = counters.get(durable, 0)
        if left <= 0:
            return False
        if left == 1:
            del counters[durable]
        else:
            counters[durable] = left - 1
        return True

    def _spend_lost_ack(self, subject: str) -> bool:
        if self.lose_publish_acks > 0 and subject_matches(self.lose_publish_acks_subject, subject):
            self.lose_publish_acks -= 1
            return True
        return False


# ---------------------------------------------------------------------------------------------
# Server state.
# ---------------------------------------------------------------------------------------------


@attrs.define
class _Msg:
    subject: str
    seq: int
    data: bytes
    headers: dict[str, str]
    stored_at: float

    def stored(self) -> StoredMsg:
        return StoredMsg(self.subject, self.seq, self.data, dict(self.headers))


@attrs.define
class _Stream:
    spec: StreamSpec
    msgs: dict[int, _Msg] = attrs.field(factory=dict)
    by_subject: dict[str, list[int]] = attrs.field(factory=dict)
    last_seq: int = 0
    msg_ids: dict[str, tuple[int, float]] = attrs.field(factory=dict)

    def owns(self, subject: str) -> bool:
        return any(subject_matches(p, subject) for p in self.spec.subjects)

    def prune(self, now: float) -> None:
        """Apply max_age and forget message ids older than the duplicate window (lazily)."""
        if self.spec.max_age_s > 0:
            cutoff = now - self.spec.max_age_s
            while self.msgs:
                first = next(iter(self.msgs.values()))
                if first.stored_at > cutoff:
                    break
                self.remove(first.seq)
        window = self.spec.duplicate_window_s or DEFAULT_DUPLICATE_WINDOW_S
        while self.msg_ids:
            msg_id, (_, at) = next(iter(self.msg_ids.items()))
            if now - at < window:
                break
            del self.msg_ids[msg_id]

    def store(self, subject: str, data: bytes, headers: dict[str, str], now: float) -> int:
        self.last_seq += 1
        seq = self.last_seq
        self.msgs[seq] = _Msg(subject, seq, data, headers, now)
        self.by_subject.setdefault(subject, []).append(seq)
        return seq

    def remove(self, seq: int) -> None:
        msg = self.msgs.pop(seq, None)
        if msg is None:
            return
        seqs = self.by_subject[msg.subject]
        seqs.remove(seq)
        if not seqs:
            del self.by_subject[msg.subject]

    def last_subject_seq(self, subject: str) -> int:
        seqs = self.by_subject.get(subject)
        return seqs[-1] if seqs else 0

    def subject_seqs(self, subject: str) -> list[int]:
        """Sequences on ``subject`` (a literal or a pattern), ascending."""
        if not _is_pattern(subject):
            return list(self.by_subject.get(subject, ()))
        return [seq for seq, msg in self.msgs.items() if subject_matches(subject, msg.subject)]


@attrs.define
class _Pending:
    delivered: int
    due: float


@attrs.define
class _Consumer:
    config: ConsumerConfig
    cursor: int = 1
    pending: dict[int, _Pending] = attrs.field(factory=dict)

    def next_due(self) -> float:
        return min((p.due for p in self.pending.values()), default=math.inf)


@attrs.define
class _KvItem:
    value: bytes | None
    revision: int
    stored_at: float
    #: Trio time at which a per-message TTL removes the key; None: no TTL of its own.
    expires_at: float | None = None


@attrs.define(eq=False)
class _Watcher:
    owner: SimTransport
    prefix: str
    send: trio.MemorySendChannel[KvEntry]


@attrs.define
class _Bucket:
    spec: BucketSpec
    seq: int = 0
    items: dict[str, _KvItem] = attrs.field(factory=dict)
    watchers: list[_Watcher] = attrs.field(factory=list)

    def prune(self, now: float) -> None:
        cutoff = now - self.spec.ttl_s if self.spec.ttl_s > 0 else -math.inf
        for key in [
            k
            for k, item in self.items.items()
            if item.stored_at <= cutoff or (item.expires_at is not None and item.expires_at <= now)
        ]:
            del self.items[key]

    def expiry(self, ttl_s: float | None, now: float) -> float | None:
        """When a write with ``ttl_s`` expires; refused, as by nats-server, unless the bucket
        allows per-message TTLs."""
        if ttl_s is None:
            return None
        seconds = check_msg_ttl(ttl_s)
        if not self.spec.message_ttl:
            raise TransportError(
                f"bucket {self.spec.name!r}: per-message TTL is disabled (provision it with "
                "message_ttl)"
            )
        return now + seconds

    def current_revision(self, key: str) -> int:
        item = self.items.get(key)
        return item.revision if item is not None else 0

    def write(
        self, key: str, value: bytes | None, now: float, expires_at: float | None = None
    ) -> int:
        self.seq += 1
        self.items.pop(key, None)  # keep dict order = write order, like the stream underneath
        self.items[key] = _KvItem(value, self.seq, now, expires_at)
        entry = KvEntry(self.spec.name, key, value, self.seq)
        for watcher in list(self.watchers):
            if key.startswith(watcher.prefix):
                # A full watcher loses the change, as a slow NATS subscriber would.
                with suppress(trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                    watcher.send.send_nowait(entry)
        return self.seq


@attrs.define(eq=False)
class _Sub:
    owner: SimTransport
    pattern: str
    queue: str | None
    send: trio.MemorySendChannel[CoreMsg]


@attrs.define(eq=False)
class _ReplySlot:
    event: trio.Event = attrs.field(factory=trio.Event)
    data: bytes = b""


@final
class SimServer:
    """One simulated nats-server with JetStream; :meth:`connect` opens a connection to it."""

    def __init__(self, faults: SimFaults | None = None) -> None:
        self.faults = faults if faults is not None else SimFaults()
        self._streams: dict[str, _Stream] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._consumers: dict[tuple[str, str], _Consumer] = {}
        self._subs: list[_Sub] = []
        self._queue_turns: dict[tuple[str, str], int] = {}
        self._replies: dict[str, _ReplySlot] = {}
        self._changed = trio.Event()
        self._connections = 0

    def connect(self) -> SimTransport:
        """A new connection; close it with ``aclose`` (or use it as ``async with``)."""
        self._connections += 1
        return SimTransport(self, self._connections)

    # --- internals shared by connections ----------------------------------------------------

    def _notify(self) -> None:
        """Wake every fetch waiting for something to change."""
        self._changed.set()
        self._changed = trio.Event()

    def _stream(self, name: str) -> _Stream:
        stream = self._streams.get(name)
        if stream is None:
            raise NotProvisioned(f"stream {name!r} does not exist")
        stream.prune(trio.current_time())
        return stream

    def _bucket(self, name: str) -> _Bucket:
        bucket = self._buckets.get(name)
        if bucket is None:
            raise NotProvisioned(f"key-value bucket {name!r} does not exist")
        bucket.prune(trio.current_time())
        return bucket

    def _consumer(self, stream: str, durable: str) -> _Consumer:
        self._stream(stream)
        consumer = self._consumers.get((stream, durable))
        if consumer is None:
            raise NotProvisioned(f"consumer {durable!r} on stream {stream!r} does not exist")
        return consumer

    def _owner(self, subject: str) -> _Stream:
        for stream in self._streams.values():
            if stream.owns(subject):
                stream.prune(trio.current_time())
                return stream
        raise NotProvisioned(f"no stream owns subject {subject!r}")

    def _take(self, stream: _Stream, consumer: _Consumer, batch: int) -> list[tuple[_Msg, int]]:
        """Pick up to ``batch`` deliverable messages: due redeliveries first, then new ones."""
        now = trio.current_time()
        max_deliver = consumer.config.max_deliver
        chosen: list[tuple[_Msg, _Pending]] = []
        for seq in sorted(consumer.pending):
            if len(chosen) >= batch:
                break
            pending = consumer.pending[seq]
            msg = stream.msgs.get(seq)
            if msg is None or (max_deliver > 0 and pending.delivered >= max_deliver):
                if msg is None or pending.due <= now:
                    del consumer.pending[seq]
                continue
            if pending.due > now:
                continue
            pending.delivered += 1
            chosen.append((msg, pending))
        while len(chosen) < batch and consumer.cursor <= stream.last_seq:
            seq = consumer.cursor
            consumer.cursor += 1
            msg = stream.msgs.get(seq)
            if msg is None or not subject_matches(consumer.config.filter_subject, msg.subject):
                continue
            pending = _Pending(delivered=1, due=now)
            consumer.pending[seq] = pending
            chosen.append((msg, pending))
        out: list[tuple[_Msg, int]] = []
        durable = consumer.config.durable
        for msg, pending in chosen:
            pending.due = now + consumer.config.ack_wait_for(pending.delivered)
            if self.faults._spend(self.faults.drop_deliveries, durable):
                continue
            if self.faults._spend(self.faults.duplicate_deliveries, durable):
                pending.due = now
                self._notify()
            out.append((msg, pending.delivered))
        return out

    def _settle(self, stream_name: str, durable: str, seq: int, *, remove: bool) -> None:
        consumer = self._consumers.get((stream_name, durable))
        if consumer is None or consumer.pending.pop(seq, None) is None:
            return
        stream = self._streams.get(stream_name)
        if remove and stream is not None and stream.spec.work_queue:
            stream.remove(seq)

    def _pending(self, stream_name: str, durable: str, seq: int) -> _Pending | None:
        consumer = self._consumers.get((stream_name, durable))
        return None if consumer is None else consumer.pending.get(seq)

    def _deliver_core(
        self, subject: str, data: bytes, headers: dict[str, str], reply: str | None
    ) -> int:
        """Hand a core message to matching subscribers; returns how many got it."""
        slot = self._replies.get(subject)
        if slot is not None:
            if not slot.event.is_set():
                slot.data = data
                slot.event.set()
            return 1
        msg = CoreMsg(subject, data, headers, reply)
        groups: dict[str, list[_Sub]] = {}
        delivered = 0
        for sub in self._subs:
            if not subject_matches(sub.pattern, subject):
                continue
            if sub.queue is None:
                delivered += _offer(sub.send, msg)
            else:
                groups.setdefault(sub.queue, []).append(sub)
        for queue, members in groups.items():
            turn = self._queue_turns.get((subject, queue), 0)
            self._queue_turns[(subject, queue)] = turn + 1
            delivered += _offer(members[turn % len(members)].send, msg)
        return delivered


def _offer(send: trio.MemorySendChannel[CoreMsg], msg: CoreMsg) -> int:
    try:
        send.send_nowait(msg)
    except trio.WouldBlock:
        return 1  # a slow consumer: counted as interest, message dropped (as NATS does)
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        return 0
    return 1


# ---------------------------------------------------------------------------------------------
# Connection.
# ---------------------------------------------------------------------------------------------


@final
@attrs.frozen
class SimDelivery:
    """A delivery from :meth:`SimTransport.fetch`; implements :class:`Delivery`."""

    subject: str
    data: bytes
    headers: Headers
    stream_seq: int
    num_delivered: int
    _conn: SimTransport = attrs.field(repr=False)
    _stream: str = attrs.field(repr=False)
    _durable: str = attrs.field(repr=False)

    async def ack(self) -> None:
        await self._conn._call()
        self._conn._server._settle(self._stream, self._durable, self.stream_seq, remove=True)

    async def ack_nowait(self) -> None:
        if not await self._conn._fire_and_forget():
            return
        self._conn._server._settle(self._stream, self._durable, self.stream_seq, remove=True)

    async def nak(self, delay_s: float | None = None) -> None:
        if not await self._conn._fire_and_forget():
            return
        server = self._conn._server
        pending = server._pending(self._stream, self._durable, self.stream_seq)
        if pending is not None:
            pending.due = trio.current_time() + (delay_s or 0.0)
            server._notify()

    async def in_progress(self) -> None:
        if not await self._conn._fire_and_forget():
            return
        server = self._conn._server
        pending = server._pending(self._stream, self._durable, self.stream_seq)
        consumer = server._consumers.get((self._stream, self._durable))
        if pending is not None and consumer is not None:
            pending.due = trio.current_time() + consumer.config.ack_wait_for(pending.delivered)

    async def term(self) -> None:
        if not await self._conn._fire_and_forget():
            return
        self._conn._server._settle(self._stream, self._durable, self.stream_seq, remove=True)


@final
class SimTransport:
    """One connection to a :class:`SimServer`; implements :class:`Transport`."""

    def __init__(self, server: SimServer, conn_id: int) -> None:
        self._server = server
        self._id = conn_id
        self._round_trips = 0
        self._closed = False
        self._inbox_seq = 0
        self._subs: list[_Sub] = []
        self._watchers: list[_Watcher] = []

    @property
    def server(self) -> SimServer:
        return self._server

    @property
    def faults(self) -> SimFaults:
        return self._server.faults

    @property
    def round_trips(self) -> int:
        return self._round_trips

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

    # --- streams ---------------------------------------------------------------------------

    async def publish(
        self,
        subject: str,
        data: bytes,
        *,
        headers: Headers | None = None,
        msg_id: str | None = None,
        expected_last_subject_seq: int | None = None,
    ) -> int:
        _check_publish_subject(subject)
        await self._call()
        server = self._server
        stream = server._owner(subject)
        now = trio.current_time()
        if msg_id is not None and msg_id in stream.msg_ids:
            return stream.msg_ids[msg_id][0]
        if expected_last_subject_seq is not None:
            last = stream.last_subject_seq(subject)
            if last != expected_last_subject_seq:
                raise WrongLastSequence(
                    f"wrong last sequence on {subject!r}: expected "
                    f"{expected_last_subject_seq}, last is {last}"
                )
        stored_headers = dict(headers or {})
        if msg_id is not None:
            stored_headers[MSG_ID_HEADER] = msg_id
        seq = stream.store(subject, data, stored_headers, now)
        if msg_id is not None:
            stream.msg_ids[msg_id] = (seq, now)
        server._notify()
        if server.faults._spend_lost_ack(subject):
            raise TransportTimeout(f"publish to {subject!r}: ack lost (simulated)")
        return seq

    async def get_msg(self, stream: str, seq: int) -> StoredMsg:
        await self._call()
        msg = self._server._stream(stream).msgs.get(seq)
        if msg is None:
            raise NotFound(f"no message {seq} in stream {stream!r}")
        return msg.stored()

    async def get_last_msg(self, stream: str, subject: str) -> StoredMsg | None:
        await self._call()
        s = self._server._stream(stream)
        seqs = s.subject_seqs(subject)
        return s.msgs[seqs[-1]].stored() if seqs else None

    async def read_subject(
        self, stream: str, subject: str, from_seq: int, limit: int
    ) -> list[StoredMsg]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        await self._call()
        s = self._server._stream(stream)
        seqs = s.subject_seqs(subject)
        start = bisect.bisect_left(seqs, from_seq)
        page = [s.msgs[seq].stored() for seq in seqs[start : start + limit]]
        # One get per message, and one more that finds the end when the page is short.
        self._round_trips += len(page) - (1 if len(page) == limit else 0)
        return page

    async def purge_subject(self, stream: str, subject: str) -> None:
        await self._call()
        s = self._server._stream(stream)
        for seq in s.subject_seqs(subject):
            s.remove(seq)

    # --- key-value -------------------------------------------------------------------------

    async def kv_get(self, bucket: str, key: str) -> KvEntry | None:
        await self._call()
        item = self._server._bucket(bucket).items.get(key)
        if item is None or item.value is None:
            return None
        return KvEntry(bucket, key, item.value, item.revision)

    async def kv_put(self, bucket: str, key: str, value: bytes) -> int:
        await self._call()
        return self._server._bucket(bucket).write(key, value, trio.current_time())

    async def kv_create(
        self, bucket: str, key: str, value: bytes, *, ttl_s: float | None = None
    ) -> int:
        await self._call()
        b = self._server._bucket(bucket)
        now = trio.current_time()
        expires_at = b.expiry(ttl_s, now)
        item = b.items.get(key)
        if item is not None and item.value is not None:
            raise KeyExists(f"key {key!r} already exists in bucket {bucket!r}")
        return b.write(key, value, now, expires_at)

    async def kv_update(
        self, bucket: str, key: str, value: bytes, revision: int, *, ttl_s: float | None = None
    ) -> int:
        await self._call()
        b = self._server._bucket(bucket)
        now = trio.current_time()
        expires_at = b.expiry(ttl_s, now)
        current = b.current_revision(key)
        if current != revision:
            raise RevisionMismatch(
                f"key {key!r} in bucket {bucket!r} is at revision {current}, not {revision}"
            )
        return b.write(key, value, now, expires_at)

    async def kv_delete(self, bucket: str, key: str, revision: int | None = None) -> None:
        await self._call()
        b = self._server._bucket(bucket)
        if revision is not None:
            current = b.current_revision(key)
            if current != revision:
                raise RevisionMismatch(
                    f"key {key!r} in bucket {bucket!r} is at revision {current}, not {revision}"
                )
        b.write(key, None, trio.current_time())

    async def kv_keys(self, bucket: str, prefix: str = "") -> list[str]:
        await self._call()
        b = self._server._bucket(bucket)
        return sorted(
            k for k, item in b.items.items() if item.value is not None and k.startswith(prefix)
        )

    @asynccontextmanager
    async def kv_watch(
        self, bucket: str, prefix: str = ""
    ) -> AsyncIterator[AsyncIterator[KvEntry]]:
        await self._call()
        b = self._server._bucket(bucket)
        send, receive = trio.open_memory_channel[KvEntry](WATCH_PENDING_ENTRIES_LIMIT)
        watcher = _Watcher(self, prefix, send)
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
        server = self._server
        stream = server._stream(config.stream)
        if stream.spec.work_queue:
            for (name, durable), other in server._consumers.items():
                if (
                    name == config.stream
                    and durable != config.durable
                    and subjects_overlap(other.config.filter_subject, config.filter_subject)
                ):
                    raise TransportError(
                        f"consumer {config.durable!r}: filter {config.filter_subject!r} overlaps "
                        f"consumer {durable!r} on work-queue stream {config.stream!r}"
                    )
        existing = server._consumers.get((config.stream, config.durable))
        if existing is None:
            server._consumers[(config.stream, config.durable)] = _Consumer(config)
        else:
            existing.config = config
        server._notify()

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

    # --- core NATS ---------------------------------------------------------------------------

    async def core_publish(self, subject: str, data: bytes, headers: Headers | None = None) -> None:
        _check_publish_subject(subject)
        await self._arrive()
        self._server._deliver_core(subject, data, dict(headers or {}), None)

    @asynccontextmanager
    async def subscribe(
        self, subject: str, queue: str | None = None
    ) -> AsyncIterator[AsyncIterator[CoreMsg]]:
        await self._arrive()
        send, receive = trio.open_memory_channel[CoreMsg](SUB_PENDING_MSGS_LIMIT)
        sub = _Sub(self, subject, queue, send)
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
        _check_publish_subject(subject)
        await self._call(jetstream=False)
        server = self._server
        self._inbox_seq += 1
        inbox = f"_INBOX.sim{self._id}.{self._inbox_seq}"
        slot = _ReplySlot()
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
        server = self._server
        for other in server._streams.values():
            if other.spec.name == spec.name:
                continue
            for mine in spec.subjects:
                for theirs in other.spec.subjects:
                    if subjects_overlap(mine, theirs):
                        raise TransportError(
                            f"stream {spec.name!r}: subject {mine!r} overlaps {theirs!r} of "
                            f"stream {other.spec.name!r}"
                        )
        existing = server._streams.get(spec.name)
        if existing is None:
            server._streams[spec.name] = _Stream(spec)
        else:
            existing.spec = spec

    async def ensure_bucket(self, spec: BucketSpec, replicas: int = 1) -> None:
        _check_replicas(replicas)
        await self._call()
        existing = self._server._buckets.get(spec.name)
        if existing is None:
            self._server._buckets[spec.name] = _Bucket(spec)
        else:
            existing.spec = spec

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
async def open_sim_transport(*, faults: SimFaults | None = None) -> AsyncIterator[SimTransport]:
    """One fresh :class:`SimServer` and one connection to it (not provisioned)."""
    server = SimServer(faults)
    async with server.connect() as transport:
        yield transport


if TYPE_CHECKING:

    def _conforms(t: SimTransport, d: SimDelivery) -> tuple[Transport, Delivery]:
        """mypy proves here that the simulation implements the whole interface."""
        return t, d
