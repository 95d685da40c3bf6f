"""A batch that never commits is never stored, on a real nats-server.

The writer's side of a crash inside a fenced append of several records: the first messages of a
batch reach the server, then the writer dies (its connection drops) or is cancelled before the
commit. The server holds such messages apart and abandons them; nothing of the batch may ever be
readable, the subject's sequence must not move, and the next writer's batch must go through.
"""

from __future__ import annotations

import pytest
import trio

from dagnats_trio.nats import open_connection
from dagnats_trio.protocol.layout import JOURNAL_STREAM, journal_subject
from dagnats_trio.transport import BatchMsg, StoredMsg, Transport
from dagnats_trio.transport._jetstream_batch import batch_wire, new_batch_id
from dagnats_trio.transport._trio_nats import TrioNatsTransport

#: Bound on each test.
TEST_BOUND_S = 60.0
#: Messages in each batch of these tests.
BATCH_MSGS = 40
#: Deadlines after which a batch in flight is cancelled, in seconds: from "before anything was
#: sent" to "after the commit was queued", so some attempts are cut and others complete.
CANCEL_AFTER_S = (0.0, 0.00001, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 1.0)
#: Rounds over CANCEL_AFTER_S.
CANCEL_ROUNDS = 3


class _Crash(Exception):
    """The writer dies here."""


async def _on_subject(t: Transport, subject: str) -> list[StoredMsg]:
    return await t.get_batch(JOURNAL_STREAM, 1, BATCH_MSGS * 100, subject=subject)


async def test_a_batch_whose_writer_dies_before_the_commit_stores_nothing(
    trio_transport: TrioNatsTransport, nats_url: str
) -> None:
    t = trio_transport
    subject = journal_subject(f"crash{new_batch_id()[:8]}", "step")
    tail = await t.publish(subject, b"before", expected_last_subject_seq=0)
    msgs = [BatchMsg(subject, f"r{i}".encode()) for i in range(BATCH_MSGS)]
    wire = batch_wire(msgs, new_batch_id(), tail)
    with trio.fail_after(TEST_BOUND_S):
        with pytest.raises(_Crash):
            async with open_connection(nats_url, name="dying-writer") as conn:
                for msg in wire[:-1]:  # everything but the commit
                    await conn.publish(msg.subject, msg.data, headers=msg.headers)
                await conn.flush()  # the server has them all
                raise _Crash
        # The uncommitted messages are nowhere: not on the subject, not in the stream.
        assert [m.data for m in await _on_subject(t, subject)] == [b"before"]
        assert await t.get_batch(JOURNAL_STREAM, tail + 1, BATCH_MSGS * 10, subject=subject) == []
        last = await t.get_last_msg(JOURNAL_STREAM, subject)
        assert last is not None and last.seq == tail
        # The next writer, fenced on the same tail, stores its batch whole.
        ack = await t.publish_batch(msgs, expected_last_subject_seq=tail)
        stored = await _on_subject(t, subject)
        assert [m.data for m in stored] == [b"before"] + [m.data for m in msgs]
        assert [m.seq for m in stored[1:]] == list(ack.seqs)
    print(f"uncommitted batch of {BATCH_MSGS - 1} messages: nothing stored; next batch at {ack}")


async def test_batches_cancelled_at_any_point_are_whole_or_absent(
    trio_transport: TrioNatsTransport,
) -> None:
    t = trio_transport
    run = f"cancel{new_batch_id()[:8]}"
    subject = journal_subject(run, "step")
    marker = journal_subject(run, "marker")
    stored = cut = 0
    tail = 0
    with trio.fail_after(TEST_BOUND_S):
        for attempt in range(CANCEL_ROUNDS * len(CANCEL_AFTER_S)):
            delay = CANCEL_AFTER_S[attempt % len(CANCEL_AFTER_S)]
            msgs = [BatchMsg(subject, f"{attempt}.{i}".encode()) for i in range(BATCH_MSGS)]
            with trio.move_on_after(delay):
                await t.publish_batch(msgs, expected_last_subject_seq=tail)
            # A publish acknowledged after the batch's messages means the server has processed
            # whatever of the batch it got (one connection, one stream: in order).
            await t.publish(marker, b"m")
            on_subject = await _on_subject(t, subject)
            mine = [m for m in on_subject if m.data.startswith(f"{attempt}.".encode())]
            assert len(mine) in (0, BATCH_MSGS), f"attempt {attempt}: {len(mine)} stored"
            if mine:
                stored += 1
                assert [m.data for m in mine] == [m.data for m in msgs]
                tail = mine[-1].seq
            else:
                cut += 1
            assert len(on_subject) == stored * BATCH_MSGS
        # The connection is still usable and the subject still fences on its tail.
        ack = await t.publish_batch(msgs[:2], expected_last_subject_seq=tail)
        assert ack.count == 2
    print(f"{stored + cut} cancelled batches of {BATCH_MSGS}: {stored} stored whole, {cut} absent")
    assert stored >= 1 and cut >= 1  # the deadline 0 always cuts, 1 s always completes


async def test_cancelled_direct_gets_release_their_inbox(
    trio_transport: TrioNatsTransport,
) -> None:
    t = trio_transport
    run = f"gets{new_batch_id()[:8]}"
    subject = journal_subject(run, "step")
    ack = await t.publish_batch([BatchMsg(subject, f"{i}".encode()) for i in range(BATCH_MSGS)])
    subs_before = t.open_subscriptions
    cut = 0
    with trio.fail_after(TEST_BOUND_S):
        for attempt in range(CANCEL_ROUNDS * len(CANCEL_AFTER_S)):
            with trio.move_on_after(CANCEL_AFTER_S[attempt % len(CANCEL_AFTER_S)]) as scope:
                if attempt % 2:
                    await t.get_batch(JOURNAL_STREAM, ack.first_seq, BATCH_MSGS, subject=subject)
                else:
                    await t.get_last_msgs(JOURNAL_STREAM, [journal_subject(run, "*")])
            cut += scope.cancelled_caught
            # Leaving a gather unsubscribes its inbox at once, cancelled or not.
            assert t.open_subscriptions == subs_before
        got = await t.get_batch(JOURNAL_STREAM, ack.first_seq, BATCH_MSGS, subject=subject)
        assert [m.seq for m in got] == list(ack.seqs)
    print(f"{CANCEL_ROUNDS * len(CANCEL_AFTER_S)} direct gets, {cut} cancelled; inbox released")
    assert cut >= 1
