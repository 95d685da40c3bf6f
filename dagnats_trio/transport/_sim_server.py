"""The simulated nats-server: JetStream state shared by its connections, and core routing.

Several connections (``SimTransport``) may share one :class:`SimServer`, as several engines and
workers share one real server. The server picks deliveries for pull consumers (due redeliveries
first, then new messages), settles them, and routes core messages to subscribers and reply slots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs
import trio

from ..nats import DEFAULT_MAX_PAYLOAD_BYTES
from ._errors import NotProvisioned, TransportError
from ._sim_faults import SimFaults
from ._sim_state import (
    CoreSub,
    Pending,
    ReplySlot,
    SimBucket,
    SimConsumer,
    SimMsg,
    SimStream,
)
from ._sim_subjects import subject_matches, subjects_overlap
from ._values import BucketSpec, ConsumerConfig, CoreMsg, StreamSpec

if TYPE_CHECKING:
    from ._sim import SimTransport


@final
class SimServer:
    """One simulated nats-server with JetStream; :meth:`connect` opens a connection to it."""

    def __init__(
        self,
        faults: SimFaults | None = None,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        self.faults = faults if faults is not None else SimFaults()
        #: The ``max_payload`` this server announces to its connections (as nats-server's
        #: configuration sets it); a test sets a small one to reach the bounds it implies.
        self.max_payload_bytes = max_payload_bytes
        self._streams: dict[str, SimStream] = {}
        self._buckets: dict[str, SimBucket] = {}
        self._consumers: dict[tuple[str, str], SimConsumer] = {}
        self._subs: list[CoreSub] = []
        self._queue_turns: dict[tuple[str, str], int] = {}
        self._replies: dict[str, ReplySlot] = {}
        self._changed = trio.Event()
        self._connections = 0

    def connect(self) -> SimTransport:
        """A new connection; close it with ``aclose`` (or use it as ``async with``)."""
        from ._sim import SimTransport  # the connection module imports this one

        self._connections += 1
        return SimTransport(self, self._connections)

    # --- internals shared by connections ----------------------------------------------------

    def _notify(self) -> None:
        """Wake every fetch waiting for something to change."""
        self._changed.set()
        self._changed = trio.Event()

    def _ensure_stream(self, spec: StreamSpec) -> None:
        """Create the stream, or give an existing one ``spec`` (its messages and its retention
        stay)."""
        for other in self._streams.values():
            if other.spec.name == spec.name:
                continue
            for mine in spec.subjects:
                for theirs in other.spec.subjects:
                    if subjects_overlap(mine, theirs):
                        raise TransportError(
                            f"stream {spec.name!r}: subject {mine!r} overlaps {theirs!r} of "
                            f"stream {other.spec.name!r}"
                        )
        existing = self._streams.get(spec.name)
        if existing is None:
            self._streams[spec.name] = SimStream(spec)
        else:  # the retention stays, as nats-server cannot change it to or from a work queue
            existing.spec = attrs.evolve(spec, work_queue=existing.spec.work_queue)

    def _ensure_bucket(self, spec: BucketSpec) -> None:
        existing = self._buckets.get(spec.name)
        if existing is None:
            self._buckets[spec.name] = SimBucket(spec)
        else:
            existing.spec = spec

    def _ensure_consumer(self, config: ConsumerConfig) -> None:
        """Create the durable, or give it ``config``; a work-queue stream refuses overlapping
        filters, as nats-server does."""
        stream = self._stream(config.stream)
        if stream.spec.work_queue:
            for (name, durable), other in self._consumers.items():
                if (
                    name == config.stream
                    and durable != config.durable
                    and subjects_overlap(other.config.filter_subject, config.filter_subject)
                ):
                    raise TransportError(
                        f"consumer {config.durable!r}: filter {config.filter_subject!r} overlaps "
                        f"consumer {durable!r} on work-queue stream {config.stream!r}"
                    )
        existing = self._consumers.get((config.stream, config.durable))
        if existing is None:
            self._consumers[(config.stream, config.durable)] = SimConsumer(config)
        else:
            existing.config = config
        self._notify()

    def _stream(self, name: str) -> SimStream:
        stream = self._streams.get(name)
        if stream is None:
            raise NotProvisioned(f"stream {name!r} does not exist")
        stream.prune(trio.current_time())
        return stream

    def _bucket(self, name: str) -> SimBucket:
        bucket = self._buckets.get(name)
        if bucket is None:
            raise NotProvisioned(f"key-value bucket {name!r} does not exist")
        bucket.prune(trio.current_time())
        return bucket

    def _consumer(self, stream: str, durable: str) -> SimConsumer:
        self._stream(stream)
        consumer = self._consumers.get((stream, durable))
        if consumer is None:
            raise NotProvisioned(f"consumer {durable!r} on stream {stream!r} does not exist")
        return consumer

    def _owner(self, subject: str) -> SimStream:
        for stream in self._streams.values():
            if stream.owns(subject):
                stream.prune(trio.current_time())
                return stream
        raise NotProvisioned(f"no stream owns subject {subject!r}")

    def _take(
        self, stream: SimStream, consumer: SimConsumer, batch: int
    ) -> list[tuple[SimMsg, int]]:
        """Pick up to ``batch`` deliverable messages: due redeliveries first, then new ones
        while the consumer holds fewer than its ``max_ack_pending`` unsettled, as nats-server
        does (a redelivery is already counted, so it comes even at the limit)."""
        now = trio.current_time()
        max_deliver = consumer.config.max_deliver
        chosen: list[tuple[SimMsg, Pending]] = []
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
        # Every pending entry was looked at above (the loop stops early only with a full batch),
        # so the ones past their max_deliver are gone and the count is the server's.
        while (
            len(chosen) < batch
            and consumer.cursor <= stream.last_seq
            and not consumer.at_max_ack_pending()
        ):
            seq = consumer.cursor
            consumer.cursor += 1
            msg = stream.msgs.get(seq)
            if msg is None or not subject_matches(consumer.config.filter_subject, msg.subject):
                continue
            pending = Pending(delivered=1, due=now)
            consumer.pending[seq] = pending
            chosen.append((msg, pending))
        out: list[tuple[SimMsg, int]] = []
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
        if consumer is None:
            return
        was_full = consumer.at_max_ack_pending()
        if consumer.pending.pop(seq, None) is None:
            return
        if was_full:  # room for a new message: wake the fetches that wait for one
            self._notify()
        stream = self._streams.get(stream_name)
        if remove and stream is not None and stream.spec.work_queue:
            stream.remove(seq)

    def _redeliver_after(self, stream_name: str, durable: str, seq: int, delay_s: float) -> None:
        """A nak: the pending delivery becomes deliverable again after ``delay_s``."""
        pending = self._pending(stream_name, durable, seq)
        if pending is not None:
            pending.due = trio.current_time() + delay_s
            self._notify()

    def _restart_ack_wait(self, stream_name: str, durable: str, seq: int) -> None:
        """An in-progress: the pending delivery's AckWait starts again."""
        pending = self._pending(stream_name, durable, seq)
        consumer = self._consumers.get((stream_name, durable))
        if pending is not None and consumer is not None:
            pending.due = trio.current_time() + consumer.config.ack_wait_for(pending.delivered)

    def _pending(self, stream_name: str, durable: str, seq: int) -> Pending | None:
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
        groups: dict[str, list[CoreSub]] = {}
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
