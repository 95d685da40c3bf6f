"""Fencing: the one place a claim's records are written to a step's journal.

Every write is an append whose expected last subject sequence is the last sequence this writer
saw, so a holder whose tail moved (a successor claimed) stores nothing and is fenced. A lost
publish ack is resolved by reading the tail: the record stored is ours only when its bytes are
exactly the ones we sent; anything else fences. The journal handle, its claim and the failure of
an unreadable journal all write through a :class:`FencedWriter`.
"""

from __future__ import annotations

from typing import final

import trio

from dagnats_trio.protocol import (
    ClaimRecord,
    DecodeError,
    JournalRecord,
    decode_record,
    encode_record,
    record_headers,
)
from dagnats_trio.transport import (
    StoredMsg,
    TemporarilyUnavailable,
    TransientRetry,
    Transport,
    TransportTimeout,
    WrongLastSequence,
)

from ._errors import Fenced
from ._holder import DeliveryState
from ._reads import read_tail


def moved_by(tail: StoredMsg | None, own_claim: str) -> str:
    """What a holder that lost the tail is told: a successor's claim, or what else is there."""
    if tail is None:
        return "its records are gone (purged?), not claimed by a successor"
    try:
        rec = decode_record(tail.data)
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
    ) -> None:
        self._transport = transport
        self._subject = subject
        self._holder = holder
        self._claim_id = claim_id
        self._last_seq = last_seq
        self._lock = trio.Lock()

    @property
    def claim_id(self) -> str:
        return self._claim_id

    @property
    def last_seq(self) -> int:
        """The last sequence this writer saw (the tail it claimed after, then each append)."""
        return self._last_seq

    async def append(self, record: JournalRecord) -> int:
        """Append ``record`` after the last sequence seen; raises :class:`Fenced` on a lost tail
        (and the holder is fenced), :class:`HolderKilled` once the holder is dead."""
        self._holder.check_writable()
        data = encode_record(record)
        headers = record_headers(record)
        await self._acquire_lock()
        try:
            backoff = TransientRetry()
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
                    if not await backoff.pause():
                        raise
                    tail = await read_tail(self._transport, self._subject)
                    if tail is not None and tail.seq > self._last_seq:
                        # Stored before the error, or someone else wrote: never write twice.
                        return await self._after_lost_tail(data, tail)
                    continue
                self._last_seq = seq
                return seq
        finally:
            self._lock.release()

    async def check_tail(self) -> None:
        """Read the tail before spending a model request: a fenced holder spends nothing."""
        tail = await read_tail(self._transport, self._subject)
        if tail is None or tail.seq != self._last_seq:
            why = self._moved(tail)
            self._holder.fence(why)
            raise Fenced(why)

    async def _acquire_lock(self) -> None:
        """``await self._lock.acquire()`` without its scheduler pass when the lock is free.

        ``trio.Lock.acquire`` raises if cancelled, then yields to the scheduler even when the
        lock was free. The cancellation check is kept (a cancelled writer still writes nothing),
        and the yield is left out: the append that follows waits on the server anyway. Taking
        the lock only when no task is queued for it keeps ``trio.Lock``'s first-come order.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            self._lock.acquire_nowait()
        except trio.WouldBlock:
            await self._lock.acquire()

    async def _after_lost_tail(self, data: bytes, tail: StoredMsg | None = None) -> int:
        """A lost publish ack whose record stored is not fencing: the tail is our own record."""
        if tail is None:
            tail = await read_tail(self._transport, self._subject)
        if tail is not None and tail.seq > self._last_seq and tail.data == data:
            self._last_seq = tail.seq
            return tail.seq
        why = self._moved(tail)
        self._holder.fence(why)
        raise Fenced(f"{why}, so this holder stops writing")

    def _moved(self, tail: StoredMsg | None) -> str:
        moved_by_what = moved_by(tail, self._claim_id)
        return f"journal {self._subject} moved past sequence {self._last_seq}: {moved_by_what}"
