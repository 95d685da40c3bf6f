"""Atomic batches and batch direct gets on the simulated server, with nats-server's outcomes.

A batch is checked whole before anything is stored and stored in one step (no await between
the checks and the last store), so it is all or nothing as on the server: a caller cancelled
before the call reached the server stored nothing. The checks follow what a NATS transport
reports for the server's answers: a stream without ``allow_atomic`` is :class:`NotProvisioned`,
messages in two streams are refused (the server calls it an incomplete batch), an expectation
is checked on the first message's subject against the stream before the batch, and a batch
that repeats stored message ids is a retry when its last message is still the last on its
subject (its first ack was lost), refused otherwise.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from ._errors import NotProvisioned, TransportError, WrongLastSequence
from ._sim_state import SimStream
from ._sim_subjects import subject_matches
from ._values import MAX_LAST_MSGS_SUBJECTS, BatchAck, BatchMsg, StoredMsg

#: Header under which a publish's message id is stored, as nats-server does.
MSG_ID_HEADER = "Nats-Msg-Id"


def check_batch_streams(streams: Sequence[SimStream], what: str) -> SimStream:
    """The one stream every message of a batch goes to, allowing atomic batches."""
    stream = streams[0]
    if any(other is not stream for other in streams):
        raise TransportError(
            f"{what}: the server saw an incomplete batch (its messages must all go to one "
            "stream); nothing was stored"
        )
    if not stream.spec.allow_atomic:
        raise NotProvisioned(
            f"{what}: stream {stream.spec.name!r} does not allow atomic batches (provision it "
            "with StreamSpec(allow_atomic=True))"
        )
    return stream


def store_batch(
    stream: SimStream,
    msgs: Sequence[BatchMsg],
    expected_last_subject_seq: int | None,
    now: float,
    what: str,
) -> BatchAck:
    """Store ``msgs`` whole in ``stream``, or raise having stored nothing."""
    first, last = msgs[0], msgs[-1]
    wrong = (
        expected_last_subject_seq is not None
        and stream.last_subject_seq(first.subject) != expected_last_subject_seq
    )
    repeated = any(m.msg_id is not None and m.msg_id in stream.msg_ids for m in msgs)
    ids = [m.msg_id for m in msgs if m.msg_id is not None]
    if len(set(ids)) != len(ids):
        raise TransportError(f"{what}: atomic publish batch contains duplicate message id")
    if wrong or repeated:
        tail = stream.last_subject_seq(last.subject)
        if (
            last.msg_id is not None
            and tail
            and (stream.msgs[tail].headers.get(MSG_ID_HEADER) == last.msg_id)
        ):
            return BatchAck(stream.spec.name, tail - len(msgs) + 1, tail)
        if wrong:
            raise WrongLastSequence(
                f"{what}: wrong last sequence on {first.subject!r}: expected "
                f"{expected_last_subject_seq}, last is {stream.last_subject_seq(first.subject)}"
            )
        raise TransportError(f"{what}: atomic publish batch contains duplicate message id")
    seqs = []
    for msg in msgs:
        headers = dict(msg.headers)
        if msg.msg_id is not None:
            headers[MSG_ID_HEADER] = msg.msg_id
        seq = stream.store(msg.subject, msg.data, headers, now)
        if msg.msg_id is not None:
            stream.msg_ids[msg.msg_id] = (seq, now)
        seqs.append(seq)
    return BatchAck(stream.spec.name, seqs[0], seqs[-1])


def last_msgs(
    stream: SimStream, subjects: Sequence[str], up_to_seq: int | None, what: str
) -> list[StoredMsg]:
    """The last message (at or before ``up_to_seq``) of each subject matching ``subjects``."""
    last: list[int] = []
    for subject, seqs in stream.by_subject.items():
        if not any(subject_matches(p, subject) for p in subjects):
            continue
        i = len(seqs) if up_to_seq is None else bisect.bisect_right(seqs, up_to_seq)
        if i:
            last.append(seqs[i - 1])
    if len(last) > MAX_LAST_MSGS_SUBJECTS:
        raise TransportError(f"{what}: matches more than {MAX_LAST_MSGS_SUBJECTS} subjects")
    return [stream.msgs[seq].stored() for seq in sorted(last)]


def batch_from(
    stream: SimStream, from_seq: int, max_msgs: int, subject: str | None
) -> list[StoredMsg]:
    """Up to ``max_msgs`` messages at or after ``from_seq`` (on ``subject`` when given)."""
    seqs = stream.subject_seqs(subject) if subject is not None else list(stream.msgs)
    start = bisect.bisect_left(seqs, from_seq)
    return [stream.msgs[seq].stored() for seq in seqs[start : start + max_msgs]]
