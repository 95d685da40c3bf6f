"""Injectors: what arming a transport fault means on each backend.

On the simulation the faults are :class:`SimFaults` switches. A real nats-server has no such
switches, so :class:`FaultyTransport` wraps a real connection and does the same things at the
client's edge: a dropped delivery is withheld (the server redelivers it after the AckWait), a
duplicated one is also handed to the next fetch of the same consumer (two holders of one message,
as when an AckWait runs out under a live holder), and a lost publish ack stores the message and
then raises :class:`TransportTimeout`. A step-down is a real ``STREAM.LEADER.STEPDOWN`` request on
a cluster and nothing on a single server (it has no other leader to move to).

Each injector counts how many armed faults actually took effect (``consumed``): an armed duplicate
that no delivery came along to use is not counted as injected.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol

import trio

from dagnats_trio.protocol import layout
from dagnats_trio.testing import AGENT_STEP_ID, AGENT_TASK, NODE_KINDS, Fault, FaultKind, Target
from dagnats_trio.transport import (
    DEFAULT_REQUEST_TIMEOUT_S,
    BatchAck,
    BatchMsg,
    BucketSpec,
    ConsumerConfig,
    CoreMsg,
    Delivery,
    Feed,
    Headers,
    KvEntry,
    PublishMsg,
    Puller,
    SimFaults,
    StoredMsg,
    StreamSpec,
    SubjectPurge,
    Transport,
    TransportError,
    TransportTimeout,
    fetch_feed,
    fetch_puller,
)
from dagnats_trio.transport._sim_subjects import subject_matches

if TYPE_CHECKING:
    from ._nodes import NodeFaults

log = logging.getLogger("chaos")

#: Bound on one step-down request to a cluster.
STEP_DOWN_REQUEST_TIMEOUT_S = 5.0
#: KV buckets are streams named ``KV_<bucket>``.
KV_STREAM_PREFIX = "KV_"

TRANSPORT_KINDS = (FaultKind.DUPLICATE, FaultKind.DROP, FaultKind.LOST_ACK, FaultKind.STEP_DOWN)
#: Kinds an injector performs (counted as they took effect, not as they fired at their seam).
INJECTED_KINDS = TRANSPORT_KINDS + NODE_KINDS


def durable_of(target: Target | None) -> str:
    if target is Target.HISTORY:
        return layout.ENGINE_DURABLE
    return layout.worker_durable(AGENT_TASK)


def subject_of(target: Target | None, run_id: str) -> str:
    if target is Target.JOURNAL:
        return layout.journal_subject(run_id, AGENT_STEP_ID)
    if target is Target.HISTORY:
        return layout.history_subject(run_id)
    return layout.task_subject(AGENT_TASK, run_id)


def stream_of(target: Target | None) -> str:
    return {
        Target.JOURNAL: layout.JOURNAL_STREAM,
        Target.HISTORY: layout.HISTORY_STREAM,
        Target.TASKS: layout.TASK_STREAM,
        Target.RUNS: KV_STREAM_PREFIX + layout.RUNS_BUCKET,
    }[target or Target.JOURNAL]


class Injector(Protocol):
    async def arm(self, fault: Fault, run_id: str) -> str:
        """Switch ``fault`` on now; returns a note for the trace."""
        ...

    def consumed(self) -> dict[FaultKind, int]:
        """Armed transport (and node) faults that took effect, by kind."""
        ...

    async def settle(self) -> None:
        """Return once no fault armed earlier is still being performed."""
        ...

    async def room(self) -> None:
        """Return once the injector can take more runs (a cluster's node faults are performed
        one at a time; the soak waits here before starting a run when it has node faults)."""
        ...

    def notes(self) -> tuple[str, ...]:
        """Lines for the summary (what the node faults did), if any."""
        ...


class SimInjector:
    """Arms :class:`SimFaults` of one :class:`SimServer`."""

    def __init__(self, faults: SimFaults) -> None:
        self.faults = faults
        self._armed = dict.fromkeys(TRANSPORT_KINDS, 0)
        self._lost_acks_overwritten = 0

    async def arm(self, fault: Fault, run_id: str) -> str:
        f = self.faults
        self._armed[fault.kind] += 1
        if fault.kind is FaultKind.DUPLICATE:
            f.duplicate_next(durable_of(fault.target), 1)
            return durable_of(fault.target)
        if fault.kind is FaultKind.DROP:
            f.drop_next(durable_of(fault.target), 1)
            return durable_of(fault.target)
        if fault.kind is FaultKind.LOST_ACK:
            # lose_next_publish_acks replaces an armed one: that one is then never injected.
            self._lost_acks_overwritten += f.lose_publish_acks
            subject = subject_of(fault.target, run_id)
            f.lose_next_publish_acks(1, subject)
            return subject
        if fault.kind is FaultKind.STEP_DOWN:
            # Never shorten a window already open.
            until = trio.current_time() + fault.window_s
            f.unavailable_until = max(f.unavailable_until, until)
            return f"unavailable {fault.window_s}s"
        raise ValueError(f"not a transport fault: {fault.kind}")

    def consumed(self) -> dict[FaultKind, int]:
        f = self.faults
        return {
            FaultKind.DUPLICATE: self._armed[FaultKind.DUPLICATE]
            - sum(f.duplicate_deliveries.values()),
            FaultKind.DROP: self._armed[FaultKind.DROP] - sum(f.drop_deliveries.values()),
            FaultKind.LOST_ACK: self._armed[FaultKind.LOST_ACK]
            - self._lost_acks_overwritten
            - f.lose_publish_acks,
            FaultKind.STEP_DOWN: self._armed[FaultKind.STEP_DOWN],
        }

    async def settle(self) -> None:
        await trio.lowlevel.checkpoint()

    async def room(self) -> None:
        await trio.lowlevel.checkpoint()

    def notes(self) -> tuple[str, ...]:
        return ()


class ProxyFaults:
    """Client-side faults shared by every :class:`FaultyTransport` of a soak."""

    def __init__(self) -> None:
        self.duplicates: dict[str, int] = {}
        self.drops: dict[str, int] = {}
        self.lost_acks: list[str] = []
        self.stash: dict[str, list[Delivery]] = {}
        self.used = dict.fromkeys(TRANSPORT_KINDS, 0)

    def take_lost_ack(self, subject: str) -> bool:
        for i, pattern in enumerate(self.lost_acks):
            if subject_matches(pattern, subject):
                del self.lost_acks[i]
                self.used[FaultKind.LOST_ACK] += 1
                return True
        return False

    def filter(self, durable: str, deliveries: list[Delivery]) -> list[Delivery]:
        out = []
        for d in deliveries:
            if self.drops.get(durable, 0) > 0:
                self.drops[durable] -= 1
                self.used[FaultKind.DROP] += 1
                continue
            if self.duplicates.get(durable, 0) > 0:
                self.duplicates[durable] -= 1
                self.used[FaultKind.DUPLICATE] += 1
                self.stash.setdefault(durable, []).append(d)
            out.append(d)
        return out


class ProxyInjector:
    """Arms :class:`ProxyFaults`; step-downs are real requests when ``control`` (a connection to
    a cluster) is given, no-ops otherwise; node faults go to ``nodes`` (a cluster's)."""

    def __init__(
        self,
        faults: ProxyFaults,
        *,
        control: Transport | None = None,
        nursery: trio.Nursery | None = None,
        nodes: NodeFaults | None = None,
    ) -> None:
        self.faults = faults
        self._control = control
        self._nursery = nursery
        self._nodes = nodes
        self._step_downs_done = 0
        self._step_downs_in_flight = 0
        self._step_downs_idle = trio.Event()
        self._step_downs_idle.set()

    async def arm(self, fault: Fault, run_id: str) -> str:
        f = self.faults
        if fault.kind is FaultKind.DUPLICATE:
            durable = durable_of(fault.target)
            f.duplicates[durable] = f.duplicates.get(durable, 0) + 1
            return durable
        if fault.kind is FaultKind.DROP:
            durable = durable_of(fault.target)
            f.drops[durable] = f.drops.get(durable, 0) + 1
            return durable
        if fault.kind is FaultKind.LOST_ACK:
            subject = subject_of(fault.target, run_id)
            f.lost_acks.append(subject)
            return subject
        if fault.kind is FaultKind.STEP_DOWN:
            stream = stream_of(fault.target)
            if self._control is None or self._nursery is None:
                return f"{stream} no-op (single server)"
            # In the background: the holder that reached the seam goes on meanwhile.
            self._nursery.start_soon(self._step_down, stream)
            return f"{stream} leader step-down requested"
        if fault.kind in NODE_KINDS:
            if self._nodes is None or self._nursery is None:
                raise ValueError(f"a {fault.kind.value} fault needs a cluster")
            # In the background, one node fault at a time: the holder goes on meanwhile.
            self._nursery.start_soon(self._nodes.inject, fault)
            return "node fault queued"
        raise ValueError(f"not a transport fault: {fault.kind}")

    async def _step_down(self, stream: str) -> None:
        self._step_downs_in_flight += 1
        if self._step_downs_idle.is_set():
            self._step_downs_idle = trio.Event()
        try:
            await self._request_step_down(stream)
        finally:
            self._step_downs_in_flight -= 1
            if not self._step_downs_in_flight:
                self._step_downs_idle.set()

    async def _request_step_down(self, stream: str) -> None:
        assert self._control is not None
        subject = f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}"
        try:
            answer = await self._control.request(
                subject, b"", timeout_s=STEP_DOWN_REQUEST_TIMEOUT_S
            )
        except TransportError as exc:
            log.warning("step-down of %s failed: %s", stream, exc)
            return
        body = json.loads(answer or b"{}")
        if body.get("success"):
            self._step_downs_done += 1
        else:
            log.warning("step-down of %s refused: %s", stream, body.get("error"))

    def consumed(self) -> dict[FaultKind, int]:
        used = dict(self.faults.used)
        used[FaultKind.STEP_DOWN] = self._step_downs_done
        if self._nodes is not None:
            used.update(self._nodes.done)
        return used

    async def settle(self) -> None:
        await self._step_downs_idle.wait()
        if self._nodes is not None:
            await self._nodes.wait_idle()
        await trio.lowlevel.checkpoint()

    async def room(self) -> None:
        if self._nodes is not None:
            await self._nodes.wait_room()
        await trio.lowlevel.checkpoint()

    def notes(self) -> tuple[str, ...]:
        return self._nodes.notes() if self._nodes is not None else ()


class FaultyTransport:
    """A :class:`Transport` that forwards to ``inner`` and applies :class:`ProxyFaults`."""

    def __init__(self, inner: Transport, faults: ProxyFaults) -> None:
        self._inner = inner
        self._faults = faults

    @property
    def round_trips(self) -> int:
        return self._inner.round_trips

    @property
    def max_payload_bytes(self) -> int:
        return self._inner.max_payload_bytes

    async def publish(
        self,
        subject: str,
        data: bytes,
        *,
        headers: Headers | None = None,
        msg_id: str | None = None,
        expected_last_subject_seq: int | None = None,
    ) -> int:
        seq = await self._inner.publish(
            subject,
            data,
            headers=headers,
            msg_id=msg_id,
            expected_last_subject_seq=expected_last_subject_seq,
        )
        if self._faults.take_lost_ack(subject):
            raise TransportTimeout(f"publish to {subject!r}: ack lost (chaos)")
        return seq

    async def publish_many(self, msgs: Sequence[PublishMsg]) -> list[int | TransportError]:
        """A lost ack applies to each message as to a publish: stored, then its answer lost."""
        return self._lose_acks(msgs, await self._inner.publish_many(msgs))

    def _lose_acks(
        self, msgs: Sequence[PublishMsg], results: list[int | TransportError]
    ) -> list[int | TransportError]:
        return [
            TransportTimeout(f"publish to {m.subject!r}: ack lost (chaos)")
            if isinstance(r, int) and self._faults.take_lost_ack(m.subject)
            else r
            for m, r in zip(msgs, results, strict=True)
        ]

    async def publish_batch(
        self, msgs: Sequence[BatchMsg], *, expected_last_subject_seq: int | None = None
    ) -> BatchAck:
        """A lost ack applies to a batch as to a publish: stored whole, then the answer lost."""
        ack = await self._inner.publish_batch(
            msgs, expected_last_subject_seq=expected_last_subject_seq
        )
        if msgs and self._faults.take_lost_ack(msgs[0].subject):
            raise TransportTimeout(f"batch to {msgs[0].subject!r}: ack lost (chaos)")
        return ack

    async def fetch(
        self, stream: str, durable: str, batch: int, timeout_s: float
    ) -> list[Delivery]:
        stash = self._faults.stash.get(durable)
        if stash:
            taken, stash[:] = stash[:batch], stash[batch:]
            return taken
        got = await self._inner.fetch(stream, durable, batch, timeout_s)
        return self._faults.filter(durable, got)

    def consume(self, stream: str, durable: str, batch: int) -> AbstractAsyncContextManager[Feed]:
        """A feed over this transport's own :meth:`fetch`, so the engine's deliveries pass
        through the faults as the worker's do."""
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
        """A puller over this transport's own :meth:`fetch`, so the worker's deliveries pass
        through the faults (an ack with next is a plain ack and a place asked)."""
        return fetch_puller(
            self,
            stream,
            durable,
            expires_s=expires_s,
            on_release=on_release,
            on_delivery=on_delivery,
        )

    async def get_msg(self, stream: str, seq: int) -> StoredMsg:
        return await self._inner.get_msg(stream, seq)

    async def get_last_msg(self, stream: str, subject: str) -> StoredMsg | None:
        return await self._inner.get_last_msg(stream, subject)

    async def read_subject(
        self, stream: str, subject: str, from_seq: int, limit: int
    ) -> list[StoredMsg]:
        return await self._inner.read_subject(stream, subject, from_seq, limit)

    async def get_last_msgs(
        self, stream: str, subjects: Sequence[str], *, up_to_seq: int | None = None
    ) -> list[StoredMsg]:
        return await self._inner.get_last_msgs(stream, subjects, up_to_seq=up_to_seq)

    async def get_batch(
        self, stream: str, from_seq: int, max_msgs: int, *, subject: str | None = None
    ) -> list[StoredMsg]:
        return await self._inner.get_batch(stream, from_seq, max_msgs, subject=subject)

    async def purge_subject(self, stream: str, subject: str) -> None:
        await self._inner.purge_subject(stream, subject)

    async def purge_subjects(self, purges: Sequence[SubjectPurge]) -> list[TransportError | None]:
        return await self._inner.purge_subjects(purges)

    async def kv_get(self, bucket: str, key: str) -> KvEntry | None:
        return await self._inner.kv_get(bucket, key)

    async def kv_get_and_publish_many(
        self, bucket: str, key: str, msgs: Sequence[PublishMsg]
    ) -> tuple[KvEntry | TransportError | None, list[int | TransportError]]:
        """A lost ack applies to each message as :meth:`publish_many`'s."""
        entry, results = await self._inner.kv_get_and_publish_many(bucket, key, msgs)
        return entry, self._lose_acks(msgs, results)

    async def kv_get_many(self, bucket: str, keys: Sequence[str]) -> dict[str, KvEntry]:
        return await self._inner.kv_get_many(bucket, keys)

    async def kv_put(self, bucket: str, key: str, value: bytes) -> int:
        return await self._inner.kv_put(bucket, key, value)

    async def kv_create(
        self, bucket: str, key: str, value: bytes, *, ttl_s: float | None = None
    ) -> int:
        return await self._inner.kv_create(bucket, key, value, ttl_s=ttl_s)

    async def kv_update(
        self, bucket: str, key: str, value: bytes, revision: int, *, ttl_s: float | None = None
    ) -> int:
        return await self._inner.kv_update(bucket, key, value, revision, ttl_s=ttl_s)

    async def kv_delete(self, bucket: str, key: str, revision: int | None = None) -> None:
        await self._inner.kv_delete(bucket, key, revision)

    async def kv_keys(self, bucket: str, prefix: str = "") -> list[str]:
        return await self._inner.kv_keys(bucket, prefix)

    def kv_watch(
        self, bucket: str, prefix: str = ""
    ) -> AbstractAsyncContextManager[AsyncIterator[KvEntry]]:
        return self._inner.kv_watch(bucket, prefix)

    async def ensure_consumer(self, config: ConsumerConfig) -> None:
        await self._inner.ensure_consumer(config)

    async def core_publish(self, subject: str, data: bytes, headers: Headers | None = None) -> None:
        await self._inner.core_publish(subject, data, headers)

    def subscribe(
        self, subject: str, queue: str | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[CoreMsg]]:
        return self._inner.subscribe(subject, queue)

    async def respond(self, msg: CoreMsg, data: bytes) -> None:
        await self._inner.respond(msg, data)

    async def request(
        self,
        subject: str,
        data: bytes,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        headers: Headers | None = None,
    ) -> bytes:
        return await self._inner.request(subject, data, timeout_s, headers)

    async def ping(self, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> None:
        await self._inner.ping(timeout_s)

    async def ensure_stream(self, spec: StreamSpec, replicas: int = 1) -> None:
        await self._inner.ensure_stream(spec, replicas)

    async def ensure_bucket(self, spec: BucketSpec, replicas: int = 1) -> None:
        await self._inner.ensure_bucket(spec, replicas)

    async def aclose(self) -> None:
        await self._inner.aclose()
