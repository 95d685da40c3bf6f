"""Atomic batch publish and batch direct get over plain NATS messages: the part both NATS
transports share.

A batch (ADR-50, nats-server 2.12+) is N ordinary publishes carrying ``Nats-Batch-Id`` and
``Nats-Batch-Sequence`` 1..N, the last also ``Nats-Batch-Commit: 1``. The server holds them
until the commit and then stores all of them under one lock, or none (an expectation that fails,
a gap, a batch that never commits within the server's 10 s: abandoned). Only the commit is a
request here: the messages before it go without a reply subject, so the whole batch costs one
round trip, and a batch cut short before its commit is simply never stored.

A batch direct get (ADR-31, nats-server 2.11+) is one request to ``$JS.API.DIRECT.GET.<stream>``
answered by several messages on the reply subject, each a stored message with its subject and
sequence in headers, then an empty one with status 204 (end of batch) whose ``Nats-Num-Pending``
says how many more matched. A transport supplies :meth:`JetStreamBatches._js_batch` (send the
messages, wait for the commit's answer) and :meth:`JetStreamBatches._js_gather` (one request,
every answer up to the first status message).
"""

from __future__ import annotations

import json
import secrets
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, final

import attrs
import trio

from ._errors import NotProvisioned, TemporarilyUnavailable, TransportError, WrongLastSequence
from ._jetstream_wire import (
    EXPECTED_LAST_SUBJECT_SEQ,
    MSG_ID,
    NoResponders,
    api_error,
    check_key,
    check_name,
    is_delete_marker,
    json_error,
    kv_prefix,
    kv_stream,
)
from ._values import (
    BATCH_COMMIT_HEADER,
    BATCH_ID_HEADER,
    BATCH_SEQUENCE_HEADER,
    MAX_LAST_MSGS_SUBJECTS,
    BatchAck,
    BatchMsg,
    KvEntry,
    StoredMsg,
    check_batch,
    check_get_batch,
    check_last_msgs_subjects,
)

#: Random bytes in a batch id (hex-encoded; the server takes ids up to 64 characters).
BATCH_ID_BYTES = 16

# nats-server JetStream err_codes of atomic batches (server/errors.json).
ERR_ATOMIC_DISABLED = 10174
ERR_BATCH_INCOMPLETE = 10176
ERR_BATCH_DUPLICATE_MSG_ID = 10201
ERR_BATCH_TOO_MANY_INFLIGHT = 10210

#: Statuses that end a direct get's answers: the end of a batch, nothing found, too many
#: subjects, no responders (no such stream, or it does not allow direct gets).
END_OF_BATCH_STATUS = 204
NOT_FOUND_STATUS = 404
TOO_MANY_SUBJECTS_STATUS = 413
NO_RESPONDERS_STATUS = 503

#: Headers a direct get adds to a stored message (not part of what was stored).
NUM_PENDING_HEADER = "Nats-Num-Pending"
_DIRECT_HEADERS = frozenset(
    {
        "Nats-Stream",
        "Nats-Subject",
        "Nats-Sequence",
        "Nats-Time-Stamp",
        NUM_PENDING_HEADER,
        "Nats-Last-Sequence",
        "Nats-UpTo-Sequence",
    }
)


@final
@attrs.frozen
class WireMsg:
    """One message as a transport sends it: subject, payload and headers."""

    subject: str
    data: bytes
    headers: dict[str, str]


@final
@attrs.frozen
class DirectReply:
    """One answer to a direct get: a stored message, or (``status`` set) the end of the answers."""

    data: bytes
    headers: dict[str, str]
    status: int | None = None
    description: str = ""


def new_batch_id() -> str:
    return secrets.token_hex(BATCH_ID_BYTES)


def batch_wire(
    msgs: Sequence[BatchMsg], batch_id: str, expected_last_subject_seq: int | None
) -> list[WireMsg]:
    """The messages of one batch as they go on the wire (ADR-50 headers)."""
    wire: list[WireMsg] = []
    for i, msg in enumerate(msgs, start=1):
        hdrs = dict(msg.headers)
        hdrs[BATCH_ID_HEADER] = batch_id
        hdrs[BATCH_SEQUENCE_HEADER] = str(i)
        if msg.msg_id is not None:
            hdrs[MSG_ID] = msg.msg_id
        if i == 1 and expected_last_subject_seq is not None:
            hdrs[EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last_subject_seq)
        if i == len(msgs):
            hdrs[BATCH_COMMIT_HEADER] = "1"
        wire.append(WireMsg(msg.subject, msg.data, hdrs))
    return wire


def batch_error(err: Mapping[str, Any], what: str) -> TransportError:
    """The interface's error for a refused batch commit."""
    code = err.get("err_code")
    if code == ERR_ATOMIC_DISABLED:
        return NotProvisioned(
            f"{what}: the stream does not allow atomic batches (provision it with "
            "StreamSpec(allow_atomic=True); nats-server 2.12+)"
        )
    if code == ERR_BATCH_TOO_MANY_INFLIGHT:
        # The server's table of open batches is full (50 per stream, 1000 per server by
        # default): nothing was stored, and a batch sent again later can be.
        return TemporarilyUnavailable(
            f"{what}: the server holds too many open batches; nothing was stored"
        )
    if code == ERR_BATCH_INCOMPLETE:
        # Also what a full table of open batches answers a commit with: the first message was
        # refused (answered to no one, it has no reply subject) and the rest found no batch. So
        # it is transient: the writer may send the batch again (still fenced).
        return TemporarilyUnavailable(
            f"{what}: the server saw an incomplete batch (its first message refused while too "
            "many batches were open, or messages lost on the way, or not all sent to one "
            "stream); nothing was stored"
        )
    return json_error(err, what)


def stored_from_direct(reply: DirectReply) -> StoredMsg:
    """A direct get's answer as a :class:`StoredMsg` (its headers without the get's own)."""
    hdrs = reply.headers
    return StoredMsg(
        subject=hdrs["Nats-Subject"],
        seq=int(hdrs["Nats-Sequence"]),
        data=reply.data,
        headers={k: v for k, v in hdrs.items() if k not in _DIRECT_HEADERS},
    )


class JetStreamBatches(ABC):
    """``publish_batch``, ``get_last_msgs`` and ``get_batch`` on a transport's two primitives."""

    @abstractmethod
    async def _js_batch(self, wire: Sequence[WireMsg], what: str) -> bytes:
        """Publish ``wire`` in order, the last as a request; that answer's payload. Raises the
        interface's errors (:class:`NoResponders` when nobody answered the commit)."""

    @abstractmethod
    async def _js_gather(
        self, subject: str, payload: bytes, what: str, max_replies: int
    ) -> list[DirectReply]:
        """Send one request and return every answer up to and with the first that has a status
        (at most ``max_replies`` in all); :class:`TransportError` when more came or the status
        did not come within the request timeout."""

    @abstractmethod
    async def get_last_msg(self, stream: str, subject: str) -> StoredMsg | None: ...

    @abstractmethod
    async def _why_no_stream(self, subject: str) -> TransportError: ...

    @abstractmethod
    async def _api(self, subject: str, body: Mapping[str, Any], what: str) -> dict[str, Any]: ...

    # --- atomic batch publish --------------------------------------------------------------------

    async def publish_batch(
        self, msgs: Sequence[BatchMsg], *, expected_last_subject_seq: int | None = None
    ) -> BatchAck:
        check_batch(msgs, expected_last_subject_seq)
        what = f"batch of {len(msgs)} to {msgs[0].subject!r}"
        wire = batch_wire(msgs, new_batch_id(), expected_last_subject_seq)
        try:
            answer = await self._js_batch(wire, what)
        except NoResponders:
            raise await self._why_no_stream(msgs[-1].subject) from None
        ack = json.loads(answer)
        err = ack.get("error")
        if err is None:
            last_seq = int(ack["seq"])
            count = int(ack.get("count", 0))
            if count != len(msgs):
                raise TransportError(f"{what}: the server acknowledged {count} messages")
            return BatchAck(str(ack["stream"]), last_seq - count + 1, last_seq)
        error = batch_error(err, what)
        last = msgs[-1]
        retried = isinstance(error, WrongLastSequence) or (
            err.get("err_code") == ERR_BATCH_DUPLICATE_MSG_ID
        )
        if not retried:
            raise error
        stream = str(ack.get("stream"))
        if last.msg_id is not None:
            # A retry of a batch that was stored (its answer lost) fails the expectation, or
            # repeats message ids: if the subject still ends with the batch, it is that batch.
            stored = await self.get_last_msg(stream, last.subject)
            if stored is not None and stored.headers.get(MSG_ID) == last.msg_id:
                return BatchAck(stream, stored.seq - len(msgs) + 1, stored.seq)
        if expected_last_subject_seq is not None and not isinstance(error, WrongLastSequence):
            # The server reports repeated ids before a failed expectation; a fenced writer
            # must hear that it was fenced.
            head = await self.get_last_msg(stream, msgs[0].subject)
            if (0 if head is None else head.seq) != expected_last_subject_seq:
                raise WrongLastSequence(f"{what}: wrong last sequence ({error})") from None
        raise error

    # --- batch direct get ------------------------------------------------------------------------

    async def get_last_msgs(
        self, stream: str, subjects: Sequence[str], *, up_to_seq: int | None = None
    ) -> list[StoredMsg]:
        check_last_msgs_subjects(subjects)
        body: dict[str, Any] = {"multi_last": list(subjects)}
        if up_to_seq is not None:
            body["up_to_seq"] = up_to_seq
        what = f"last messages of {len(subjects)} subject(s) in {stream}"
        msgs, pending = await self._direct_get(stream, body, what, MAX_LAST_MSGS_SUBJECTS)
        if pending:
            raise TransportError(
                f"{what}: the answer exceeds the server's byte limit ({pending} left out)"
            )
        return msgs

    async def kv_get_many(self, bucket: str, keys: Sequence[str]) -> dict[str, KvEntry]:
        stream, prefix = kv_stream(bucket), kv_prefix(bucket)
        subjects = [prefix + check_key(key) for key in dict.fromkeys(keys)]
        found: dict[str, KvEntry] = {}
        for start in range(0, len(subjects), MAX_LAST_MSGS_SUBJECTS):
            chunk = subjects[start : start + MAX_LAST_MSGS_SUBJECTS]
            for msg in await self.get_last_msgs(stream, chunk):
                if not is_delete_marker(msg.headers):
                    key = msg.subject[len(prefix) :]
                    found[key] = KvEntry(bucket=bucket, key=key, value=msg.data, revision=msg.seq)
        if not subjects:
            await trio.lowlevel.checkpoint()
        return found

    async def get_batch(
        self, stream: str, from_seq: int, max_msgs: int, *, subject: str | None = None
    ) -> list[StoredMsg]:
        check_get_batch(from_seq, max_msgs)
        what = f"batch from {stream}#{from_seq}"
        out: list[StoredMsg] = []
        seq = from_seq
        while len(out) < max_msgs:
            body: dict[str, Any] = {"seq": seq, "batch": max_msgs - len(out)}
            if subject is not None:
                body["next_by_subj"] = subject
            msgs, pending = await self._direct_get(stream, body, what, max_msgs - len(out))
            out.extend(msgs)
            if not msgs or not pending:
                break
            seq = msgs[-1].seq + 1  # the server ended the answer at its byte limit
        return out

    async def _direct_get(
        self, stream: str, body: Mapping[str, Any], what: str, max_msgs: int
    ) -> tuple[list[StoredMsg], int]:
        """The stored messages of one batch direct get, and how many more matched."""
        subject = f"$JS.API.DIRECT.GET.{check_name('stream', stream)}"
        replies = await self._js_gather(subject, json.dumps(body).encode(), what, max_msgs + 1)
        end = replies[-1]
        if end.status == END_OF_BATCH_STATUS:
            pending = int(end.headers.get(NUM_PENDING_HEADER, "0"))
            return [stored_from_direct(r) for r in replies[:-1]], pending
        if end.status == NOT_FOUND_STATUS:
            return [], 0
        if end.status == TOO_MANY_SUBJECTS_STATUS:
            raise TransportError(f"{what}: matches more than {MAX_LAST_MSGS_SUBJECTS} subjects")
        if end.status == NO_RESPONDERS_STATUS:
            raise await self._why_no_direct(stream)
        raise api_error(end.status, None, end.description, what)

    async def _why_no_direct(self, stream: str) -> TransportError:
        """No responders to a direct get: no such stream, no direct gets on it, or no leader."""
        info = await self._api(
            f"$JS.API.STREAM.INFO.{check_name('stream', stream)}", {}, f"info {stream}"
        )
        if not info.get("config", {}).get("allow_direct"):
            return NotProvisioned(f"stream {stream!r} does not allow direct gets; run provisioning")
        return TemporarilyUnavailable(f"direct get on {stream!r}: no replica answered")
