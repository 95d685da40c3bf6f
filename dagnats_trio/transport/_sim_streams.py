"""The stream operations of a :class:`~._sim.SimTransport`: publish (the message-id duplicate
check before the expected-subject-sequence check, as nats-server does), atomic batches, gets by
sequence, subject and batch, reads and purges of a subject.

Each is one simulated round trip on the connection (its delays and unavailability) and then
reads or writes the shared :class:`SimServer`'s streams; a lost publish ack is spent after the
message is stored, so the caller sees a timeout for a write that happened.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Sequence

import trio

from ._errors import (
    Closed,
    NotFound,
    TemporarilyUnavailable,
    TransportError,
    TransportTimeout,
    WrongLastSequence,
)
from ._max_payload import check_max_payload
from ._sim_batch import MSG_ID_HEADER, batch_from, check_batch_streams, last_msgs, store_batch
from ._sim_faults import SimFaults
from ._sim_payload import check_batch_max_payload, publish_wire_headers
from ._sim_server import SimServer
from ._sim_subjects import check_publish_subject
from ._values import (
    BatchAck,
    BatchMsg,
    Headers,
    KvEntry,
    PublishMsg,
    StoredMsg,
    SubjectPurge,
    check_batch,
    check_get_batch,
    check_last_msgs_subjects,
)


class SimStreams(ABC):
    """Stream operations of :class:`~._sim.SimTransport` (a mixin: the connection holds the
    server, the round-trip count and the call plumbing)."""

    _server: SimServer
    _round_trips: int

    @abstractmethod
    async def _call(self, *, jetstream: bool = True) -> None:
        """A request that waits for the server's answer: counts a round trip."""

    @abstractmethod
    async def kv_get(self, bucket: str, key: str) -> KvEntry | None:
        """The key's entry (the simulator's KV)."""

    @property
    @abstractmethod
    def faults(self) -> SimFaults:
        """The server's faults (a publish spends its lost acks)."""

    async def publish(
        self,
        subject: str,
        data: bytes,
        *,
        headers: Headers | None = None,
        msg_id: str | None = None,
        expected_last_subject_seq: int | None = None,
    ) -> int:
        check_publish_subject(subject)
        wire = publish_wire_headers(headers, msg_id, expected_last_subject_seq)
        check_max_payload(self._server.max_payload_bytes, data, wire, f"publish to {subject!r}")
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

    async def publish_many(self, msgs: Sequence[PublishMsg]) -> list[int | TransportError]:
        """Each publish in turn (the simulated store answers each at once)."""
        results: list[int | TransportError] = []
        for m in msgs:
            try:
                results.append(
                    await self.publish(
                        m.subject,
                        m.data,
                        msg_id=m.msg_id,
                        expected_last_subject_seq=m.expected_last_subject_seq,
                    )
                )
            except (Closed, TemporarilyUnavailable):
                raise
            except TransportError as exc:
                results.append(exc)
        return results

    async def kv_get_and_publish_many(
        self, bucket: str, key: str, msgs: Sequence[PublishMsg]
    ) -> tuple[KvEntry | TransportError | None, list[int | TransportError]]:
        """The read (:meth:`kv_get`, the simulator's), then each publish in turn."""
        entry: KvEntry | TransportError | None
        try:
            entry = await self.kv_get(bucket, key)
        except (Closed, TemporarilyUnavailable):
            raise
        except TransportError as exc:
            entry = exc
        return entry, await self.publish_many(msgs)

    async def publish_batch(
        self, msgs: Sequence[BatchMsg], *, expected_last_subject_seq: int | None = None
    ) -> BatchAck:
        check_batch(msgs, expected_last_subject_seq)
        for msg in msgs:
            check_publish_subject(msg.subject)
        what = f"batch of {len(msgs)} to {msgs[0].subject!r}"
        max_payload = self._server.max_payload_bytes
        check_batch_max_payload(max_payload, msgs, expected_last_subject_seq, what)
        await self._call()
        server = self._server
        stream = check_batch_streams([server._owner(m.subject) for m in msgs], what)
        ack = store_batch(stream, msgs, expected_last_subject_seq, trio.current_time(), what)
        server._notify()
        if server.faults._spend_lost_ack(msgs[-1].subject):
            raise TransportTimeout(f"{what}: ack lost (simulated)")
        return ack

    async def get_last_msgs(
        self, stream: str, subjects: Sequence[str], *, up_to_seq: int | None = None
    ) -> list[StoredMsg]:
        check_last_msgs_subjects(subjects)
        await self._call()
        what = f"last messages of {len(subjects)} subject(s) in {stream}"
        return last_msgs(self._server._stream(stream), subjects, up_to_seq, what)

    async def get_batch(
        self, stream: str, from_seq: int, max_msgs: int, *, subject: str | None = None
    ) -> list[StoredMsg]:
        check_get_batch(from_seq, max_msgs)
        await self._call()
        return batch_from(self._server._stream(stream), from_seq, max_msgs, subject)

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

    async def purge_subjects(self, purges: Sequence[SubjectPurge]) -> list[TransportError | None]:
        """Each purge in turn (the simulated store answers each at once)."""
        results: list[TransportError | None] = []
        for p in purges:
            try:
                await self.purge_subject(p.stream, p.subject)
            except (Closed, TemporarilyUnavailable):
                raise
            except TransportError as exc:
                results.append(exc)
            else:
                results.append(None)
        if not purges:
            await trio.lowlevel.checkpoint()
        return results
