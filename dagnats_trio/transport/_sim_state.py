"""What the simulated server stores: streams and their messages, consumers and their pending
deliveries, key-value buckets and their watchers, core subscriptions and request reply slots.

Plain records with the few rules that belong to the data (max age, the duplicate window, KV
TTLs, watcher fan-out); the server (``_sim_server``) and the connection (``_sim``) act on them.
"""

from __future__ import annotations

import math
from contextlib import suppress
from typing import TYPE_CHECKING

import attrs
import trio

from ._errors import TransportError
from ._sim_subjects import is_pattern, subject_matches
from ._values import (
    BucketSpec,
    ConsumerConfig,
    CoreMsg,
    KvEntry,
    StoredMsg,
    StreamSpec,
    check_msg_ttl,
)

if TYPE_CHECKING:
    from ._sim import SimTransport

#: nats-server uses this duplicate window when a stream asks for none.
DEFAULT_DUPLICATE_WINDOW_S = 120.0


@attrs.define
class SimMsg:
    subject: str
    seq: int
    data: bytes
    headers: dict[str, str]
    stored_at: float

    def stored(self) -> StoredMsg:
        return StoredMsg(self.subject, self.seq, self.data, dict(self.headers))


@attrs.define
class SimStream:
    spec: StreamSpec
    msgs: dict[int, SimMsg] = attrs.field(factory=dict)
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
        self.msgs[seq] = SimMsg(subject, seq, data, headers, now)
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
        if not is_pattern(subject):
            return list(self.by_subject.get(subject, ()))
        return [seq for seq, msg in self.msgs.items() if subject_matches(subject, msg.subject)]


@attrs.define
class Pending:
    delivered: int
    due: float


@attrs.define
class SimConsumer:
    config: ConsumerConfig
    cursor: int = 1
    pending: dict[int, Pending] = attrs.field(factory=dict)

    def next_due(self) -> float:
        return min((p.due for p in self.pending.values()), default=math.inf)

    def at_max_ack_pending(self) -> bool:
        """Holds as many unsettled deliveries as its ``max_ack_pending`` lets it (-1: never)."""
        limit = self.config.max_ack_pending
        return limit > 0 and len(self.pending) >= limit


@attrs.define
class KvItem:
    value: bytes | None
    revision: int
    stored_at: float
    #: Trio time at which a per-message TTL removes the key; None: no TTL of its own.
    expires_at: float | None = None


@attrs.define(eq=False)
class Watcher:
    owner: SimTransport
    prefix: str
    send: trio.MemorySendChannel[KvEntry]


@attrs.define
class SimBucket:
    spec: BucketSpec
    seq: int = 0
    items: dict[str, KvItem] = attrs.field(factory=dict)
    watchers: list[Watcher] = attrs.field(factory=list)
    #: No per-message TTL expires before this (a lower bound: a key rewritten or deleted since
    #: keeps it until the next scan), so a look at the bucket scans it only when a key may be due.
    next_expiry: float = math.inf

    def prune(self, now: float) -> None:
        """Drop what the bucket's TTL and the per-message TTLs have expired. Items are in write
        order (oldest first), so the bucket's TTL stops at the first one young enough; per-message
        TTLs cost a scan only once one is due: a soak of thousands of runs looks at its buckets
        tens of thousands of times."""
        if self.spec.ttl_s > 0:
            cutoff = now - self.spec.ttl_s
            while self.items:
                key, first = next(iter(self.items.items()))
                if first.stored_at > cutoff:
                    break
                del self.items[key]
        if self.next_expiry <= now:
            for key in [
                k
                for k, item in self.items.items()
                if item.expires_at is not None and item.expires_at <= now
            ]:
                del self.items[key]
            self.next_expiry = min(
                (i.expires_at for i in self.items.values() if i.expires_at is not None),
                default=math.inf,
            )

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
        self.items[key] = KvItem(value, self.seq, now, expires_at)
        if expires_at is not None:
            self.next_expiry = min(self.next_expiry, expires_at)
        entry = KvEntry(self.spec.name, key, value, self.seq)
        for watcher in list(self.watchers):
            if key.startswith(watcher.prefix):
                # A full watcher loses the change, as a slow NATS subscriber would.
                with suppress(trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                    watcher.send.send_nowait(entry)
        return self.seq


@attrs.define(eq=False)
class CoreSub:
    owner: SimTransport
    pattern: str
    queue: str | None
    send: trio.MemorySendChannel[CoreMsg]


@attrs.define(eq=False)
class ReplySlot:
    event: trio.Event = attrs.field(factory=trio.Event)
    data: bytes = b""
