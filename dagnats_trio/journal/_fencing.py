"""Fencing: the one place a claim's records are written to a step's journal.

Every write is an append whose expected last subject sequence is the last sequence this writer
saw, so a holder whose tail moved (a successor claimed) stores nothing and is fenced. A lost
publish ack is resolved by reading the tail: the record stored is ours only when its bytes are
exactly the ones we sent; anything else fences. The journal handle, its claim and the failure of
an unreadable journal all write through a :class:`FencedWriter`.

Records stored together (:meth:`FencedWriter.append_batch`: a tool group's intents, a record
held with the next append) go as ONE message on the journal subject, a record group
(:class:`dagnats_trio.protocol.RecordGroup`) fenced once like any append, when its body is at
most :data:`MAX_GROUP_MESSAGE_BYTES`: stored whole or not at all because it is one message, at
the cost of one publish. A bigger group goes as one JetStream atomic batch fenced on the same
last sequence (the server stores it whole or not at all too, staged on disk first: several
publishes' worth on a single-replica file stream).

Records that may be written again without harm (a model response, a safe tool's result) can be
*held* (:meth:`FencedWriter.hold`): they are stored with the next append, in one group with it,
so they are stored with it or not at all. A crash before that leaves the journal as if the
held records had never been made; the replay rules then ask the model again or run the safe tool
again, which the spec allows for both (a new attempt runs them fresh too). Nothing that may
not run twice is ever held: a tool intent is the last record of its group, stored before its
tool starts; an unsafe tool's result is written at once.

Before a model request the holder must hold the tail (:meth:`FencedWriter.check_tail`, the
spec's "reads the tail first, so a holder that is already fenced does not spend a model call").
A fenced append's ack proves that exactly as a tail read's answer does: the server stored the
record only because this writer's last sequence was the tail. So an ack (or a matching tail
read) that arrived less than :data:`TAIL_PROOF_FRESH_S` ago *is* the tail read: the model call
right after the claim waits on no read of its own.
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import Any, Final, final

import trio

from dagnats_trio._seams import Seam, current_hook
from dagnats_trio.protocol import (
    BATCH_HEADER,
    ClaimRecord,
    CommitRecord,
    DecodeError,
    JournalRecord,
    decode_records,
    encode_group,
    encode_record,
    group_headers,
    record_headers,
)
from dagnats_trio.transport import (
    MAX_BATCH_PUBLISH_MSGS,
    BatchMsg,
    StoredMsg,
    TemporarilyUnavailable,
    TransientRetry,
    Transport,
    TransportTimeout,
    WrongLastSequence,
)

from ._append_lock import AppendLock
from ._errors import Fenced
from ._holder import DeliveryState
from ._known import KnownCommits
from ._reads import read_tail

#: How long (seconds, on the holder's Trio clock, from the moment the answer arrived) the answer
#: of a fenced append, or a tail read that found this writer's last sequence, stands for a tail
#: read before a model request. Why it is safe: a tail read's answer also only says what the
#: tail was when the server answered, and it ages too before the model request leaves (the
#: scheduler, the handler's code), so a proof younger than this bound is a read answered at
#: most this much later. The spec's check is about a holder that is *already* fenced: a
#: successor's claim needs this delivery's lease to have run out first, which takes the holder
#: silent for AckWait minus one heartbeat interval (0.6 s at the default 0.8 s AckWait,
#: heartbeat every 0.2 s, worker ``_lease``), then the successor's own tail read and claim.
#: 20 ms is a tenth of the default heartbeat interval and a fortieth of the AckWait, so the
#: proof is as fresh, on the lease's scale, as a read the scheduler delivered late; yet it
#: comfortably covers the handler's code between the claim and its first model call (well
#: under a millisecond, a few on a loaded machine). Anything older is read again.
TAIL_PROOF_FRESH_S: Final = 0.02

#: Largest body (bytes) of a group of records sent as ONE message; a bigger group goes as an
#: atomic batch. A quarter of nats-server's default ``max_payload`` (1 MiB,
#: ``dagnats_trio.nats.DEFAULT_MAX_PAYLOAD_BYTES``), so the group's message stays well under
#: what a server accepts with its headers; a server announcing less lowers it
#: (:func:`group_message_max_bytes`).
MAX_GROUP_MESSAGE_BYTES: Final = 256 * 1024
#: The share of the server's announced ``max_payload`` a group's body may take.
GROUP_SHARE_OF_MAX_PAYLOAD: Final = 4


def group_message_max_bytes(max_payload_bytes: int) -> int:
    """The largest group body sent as one message to a server announcing ``max_payload_bytes``:
    a group sized for the default server would be refused, for good, by a server configured
    smaller, where the same records go through as an atomic batch of one message each."""
    return min(MAX_GROUP_MESSAGE_BYTES, max_payload_bytes // GROUP_SHARE_OF_MAX_PAYLOAD)


def moved_by(tail: StoredMsg | None, own_claim: str) -> str:
    """What a holder that lost the tail is told: a successor's claim, or what else is there."""
    if tail is None:
        return "its records are gone (purged?), not claimed by a successor"
    try:
        rec = decode_records(tail.data)[-1]
    except DecodeError as exc:
        return (
            f"the record at sequence {tail.seq} is not a claim but unreadable ({exc}); no "
            "successor claimed it"
        )
    if isinstance(rec, ClaimRecord):
        return f"a successor claimed it (claim {rec.claim_id} at sequence {tail.seq})"
    if rec.claim_id != own_claim:
        return f"a successor claimed it (claim {rec.claim_id} wrote sequence {tail.seq})"
    return (
        f"the {rec.TYPE!r} record at sequence {tail.seq} carries this holder's own claim but is "
        "not one it wrote: not a successor's claim"
    )


@final
class FencedWriter:
    """The appends of one claim to one journal subject, each fenced on the last sequence seen.

    Appends are written one at a time (a lock, first come first served), so records from the
    tasks of a tool group take consecutive sequences and each expects the one before.
    """

    def __init__(
        self,
        *,
        transport: Transport,
        subject: str,
        holder: DeliveryState,
        claim_id: str,
        last_seq: int,
        known: KnownCommits | None = None,
    ) -> None:
        self._transport = transport
        self._subject = subject
        self._holder = holder
        self._claim_id = claim_id
        self._last_seq = last_seq
        self._lock = AppendLock()
        self._held: list[JournalRecord] = []
        self._group_max_bytes = group_message_max_bytes(transport.max_payload_bytes)
        #: Told of each commit stored (the server's ack gives its sequence), so the client's next
        #: claim of this step can go without a tail read (``_open``, the predicted claim).
        self._known = known
        #: When (Trio clock) the last proof that this writer held the tail arrived: an append's
        #: ack, or a tail read that found ``_last_seq``; None before the first.
        self._tail_proven_at: float | None = None

    @property
    def claim_id(self) -> str:
        return self._claim_id

    @property
    def last_seq(self) -> int:
        """The last sequence this writer saw (the tail it claimed after, then each append)."""
        return self._last_seq

    @property
    def holding(self) -> bool:
        """True while records are held for the next append."""
        return bool(self._held)

    def hold(self, record: JournalRecord) -> None:
        """Keep ``record`` to be stored with the next append, in one group with it (only records
        that may be made again without harm: see the module's docstring)."""
        self._holder.check_writable()
        self._held.append(record)

    def append(self, record: JournalRecord) -> Coroutine[Any, Any, int]:
        """Append ``record`` after the last sequence seen (after the records held, stored
        together); raises :class:`Fenced` on a lost tail (and the holder is fenced),
        :class:`HolderKilled` once the holder is dead. Returns ``record``'s sequence.

        Await what this returns, at once: it is :meth:`append_batch`'s coroutine, with no frame
        of its own in between (one frame fewer passed through when the ack wakes the caller)."""
        return self.append_batch((record,))

    async def append_batch(self, records: Sequence[JournalRecord]) -> int:
        """Append ``records`` stored together (after the records held, in the same group
        when the server's batch limit allows), fenced like :meth:`append`: stored whole or not
        at all, as one message (a record group) or, over :func:`group_message_max_bytes`, one
        atomic batch. Held records that would take the group past
        :data:`MAX_BATCH_PUBLISH_MSGS` are stored first, in a group of their own (they may be
        written at any time before). ValueError, writing nothing, for an empty list or one over
        the limit. Returns the last record's sequence (a group's records share it)."""
        n = len(records)
        if not 1 <= n <= MAX_BATCH_PUBLISH_MSGS:
            raise ValueError(
                f"an atomic batch of journal records holds 1 to {MAX_BATCH_PUBLISH_MSGS} records "
                f"(the server's limit), got {n}"
            )
        self._holder.check_writable()
        await self._lock.acquire()
        try:
            held = self._held
            if not held:
                seq = await self._write_locked(records, n)
            else:
                self._held = []
                k = len(held)
                if k + n > MAX_BATCH_PUBLISH_MSGS:
                    await self._write_locked(held, k)
                    held, k = [], 0
                seq = await self._write_locked([*held, *records], k + n)
            last = records[-1]
            if self._known is not None and isinstance(last, CommitRecord):
                self._known.stored(self._subject, seq, last)
            return seq
        finally:
            self._lock.release()

    async def flush(self) -> int:
        """Store the records held, if any (one group); returns the last sequence seen."""
        await self._lock.acquire()
        records, self._held = self._held, []
        try:
            if records:
                await self._write_locked(records, len(records))
            return self._last_seq
        finally:
            self._lock.release()

    def _write_locked(self, records: Sequence[JournalRecord], n: int) -> Coroutine[Any, Any, int]:
        """The coroutine that stores the ``n`` ``records`` (awaited at once): a single record's
        is the publish's own, with no frame of this method in between."""
        if n == 1:
            return self._publish(encode_record(records[0]), record_headers(records[0]))
        return self._write_group(list(records))

    def _write_group(self, records: list[JournalRecord]) -> Coroutine[Any, Any, int]:
        """The coroutine that stores ``records`` as one group message (awaited at once), or as
        an atomic batch when too big: the publish's own, with no frame of this method in
        between, unless a crash-seam hook is installed (tests)."""
        data = encode_group(records)
        if len(data) > self._group_max_bytes:
            return self._publish_batch(records)
        if current_hook() is not None:
            return self._seam_then_publish(data, group_headers(records))
        return self._publish(data, group_headers(records))

    async def _seam_then_publish(self, data: bytes, headers: dict[str, str]) -> int:
        await self._holder.seam(Seam.INSIDE_BATCH)
        return await self._publish(data, headers)

    async def _publish(self, data: bytes, headers: dict[str, str]) -> int:
        """One message (a record, or a group of them), fenced on the last sequence seen. A lost
        answer is resolved on the tail: the message there exactly as sent is ours (for a group:
        all of its records, stored as that one message)."""
        backoff: TransientRetry | None = None  # made at the first failure, if one comes
        while True:
            self._holder.check_writable()
            try:
                seq = await self._transport.publish(
                    self._subject,
                    data,
                    headers=headers,
                    expected_last_subject_seq=self._last_seq,
                )
            except WrongLastSequence:
                return await self._after_lost_tail(data)
            except (TemporarilyUnavailable, TransportTimeout):
                if backoff is None:
                    backoff = TransientRetry()
                if not await backoff.pause():
                    raise
                tail = await read_tail(self._transport, self._subject)
                if tail is not None and tail.seq > self._last_seq:
                    # Stored before the error, or someone else wrote: never write twice.
                    return await self._after_lost_tail(data, tail)
                continue
            self._proven(seq)
            return seq

    async def _publish_batch(self, records: list[JournalRecord]) -> int:
        """The records as one atomic batch (a group too big for one message), fenced on the
        last sequence seen. Each carries
        :data:`BATCH_HEADER` (its place in the batch), so the audit can see the batch whole.
        A lost answer is resolved as for one record, on the batch's last record: the server
        stores a batch whole or not at all, so its last record at the tail, exactly as sent,
        means the whole batch is ours."""
        n = len(records)
        msgs = [
            BatchMsg(
                self._subject,
                encode_record(rec),
                headers={**record_headers(rec), BATCH_HEADER: f"{k + 1}/{n}"},
            )
            for k, rec in enumerate(records)
        ]
        last = msgs[-1].data
        if current_hook() is not None:
            await self._holder.seam(Seam.INSIDE_BATCH)
        backoff: TransientRetry | None = None  # made at the first failure, if one comes
        while True:
            self._holder.check_writable()
            try:
                ack = await self._transport.publish_batch(
                    msgs, expected_last_subject_seq=self._last_seq
                )
            except WrongLastSequence:
                return await self._after_lost_tail(last)
            except (TemporarilyUnavailable, TransportTimeout):
                if backoff is None:
                    backoff = TransientRetry()
                if not await backoff.pause():
                    raise
                tail = await read_tail(self._transport, self._subject)
                if tail is not None and tail.seq > self._last_seq:
                    return await self._after_lost_tail(last, tail)
                continue
            self._proven(ack.last_seq)
            return ack.last_seq

    async def check_tail(self) -> None:
        """Before spending a model request, make sure this holder still holds the tail: a fenced
        holder spends nothing. With records held, storing them is that proof (a fenced append
        succeeds only on the tail), so they are written instead of reading the tail. An append
        acked (or a tail read answered) less than :data:`TAIL_PROOF_FRESH_S` ago, by a holder
        still writable whose lease was not lost, is that proof too: no read then, and no
        scheduler pass either (the model's record is appended next, which waits on the server):
        only the cancellation check, so a cancelled holder still spends nothing."""
        if self._held:
            await self.flush()
            return
        if self._tail_proof_fresh():
            await trio.lowlevel.checkpoint_if_cancelled()
            return
        tail = await read_tail(self._transport, self._subject)
        if tail is None or tail.seq != self._last_seq:
            why = self._moved(tail)
            self._holder.fence(why)
            raise Fenced(why)
        self._proven(tail.seq)

    def _tail_proof_fresh(self) -> bool:
        """True when the last proof of the tail arrived less than :data:`TAIL_PROOF_FRESH_S`
        ago and this holder may still write (raises if it may not: killed or fenced)."""
        self._holder.check_writable()
        if self._holder.lease_lost_because or self._tail_proven_at is None:
            return False
        return trio.current_time() - self._tail_proven_at < TAIL_PROOF_FRESH_S

    def _proven(self, seq: int) -> None:
        """The server just said ``seq`` is this writer's and the tail: remember it and when."""
        self._last_seq = seq
        self._tail_proven_at = trio.current_time()

    async def _after_lost_tail(self, data: bytes, tail: StoredMsg | None = None) -> int:
        """A lost publish ack whose record stored is not fencing: the tail is our own record."""
        if tail is None:
            tail = await read_tail(self._transport, self._subject)
        if tail is not None and tail.seq > self._last_seq and tail.data == data:
            self._proven(tail.seq)
            return tail.seq
        why = self._moved(tail)
        self._holder.fence(why)
        raise Fenced(f"{why}, so this holder stops writing")

    def _moved(self, tail: StoredMsg | None) -> str:
        moved_by_what = moved_by(tail, self._claim_id)
        return f"journal {self._subject} moved past sequence {self._last_seq}: {moved_by_what}"
