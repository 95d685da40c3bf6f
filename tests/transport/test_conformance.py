"""One set of outcomes, held by every transport: each case runs on SimTransport and nats-server.

Every test takes ``clock`` (autojumping for the simulation, real for nats) so the same body runs
on both; subjects, keys and durables carry ``uid`` because the real server is shared.
"""

from __future__ import annotations

import attrs
import pytest
import trio

from dagnats_trio.protocol.layout import (
    CHECKPOINTS_BUCKET,
    HISTORY_STREAM,
    JOURNAL_STREAM,
    TASK_STREAM,
    TIMER_STREAM,
    history_subject,
    journal_subject,
    run_tasks_filter,
    run_timers_filter,
    task_subject,
    timer_subject,
)
from dagnats_trio.transport import (
    BatchMsg,
    ConsumerConfig,
    Delivery,
    KeyExists,
    KvEntry,
    NotFound,
    NotProvisioned,
    PublishMsg,
    RevisionMismatch,
    StreamSpec,
    SubjectPurge,
    TemporarilyUnavailable,
    Transport,
    WrongLastSequence,
)

ACK_WAIT_S = 1.0
NAK_DELAY_S = 1.0
#: Waits shorter than an AckWait: "nothing arrives yet".
SHORT_WAIT_S = 0.3
#: The longest a test waits for something that must come.
ARRIVAL_S = 4.0
#: Real-clock slack when asserting that a redelivery was not early. The reference time of such
#: a check is read *before* the action that starts the server's timer (the fetch, the nak), never
#: after it returns: on a loaded machine the return can come late, and a late reference would make
#: a punctual redelivery look early.
SLACK_S = 0.15
#: AckWait of the in-progress test: its beat comes at 0.6 of it, so the beat has 0.4 of it
#: (0.8 s) to reach the server on a loaded machine before the original deadline passes.
IN_PROGRESS_ACK_WAIT_S = 2.0
TEST_BOUND_S = 15.0


async def fetch_one(t: Transport, stream: str, durable: str) -> Delivery:
    got = await t.fetch(stream, durable, 1, ARRIVAL_S)
    assert len(got) == 1, f"expected one delivery from {durable}, got {got}"
    return got[0]


async def history_consumer(
    t: Transport, uid: str, *, ack_wait_s: float = ACK_WAIT_S, max_deliver: int = -1
) -> str:
    durable = f"c-{uid}"
    config = ConsumerConfig(HISTORY_STREAM, durable, history_subject(uid), ack_wait_s, max_deliver)
    await t.ensure_consumer(config)
    return durable


# --- streams -------------------------------------------------------------------------------


async def test_fencing_with_expected_last_subject_seq(
    transport: Transport, clock: object, uid: str
) -> None:
    subject = journal_subject(uid, "step")
    first = await transport.publish(subject, b"a", expected_last_subject_seq=0)
    with pytest.raises(WrongLastSequence):
        await transport.publish(subject, b"stale", expected_last_subject_seq=0)
    second = await transport.publish(subject, b"b", expected_last_subject_seq=first)
    assert second > first
    with pytest.raises(WrongLastSequence):
        await transport.publish(subject, b"stale", expected_last_subject_seq=first)
    # The check is per subject, the sequence is per stream.
    other = await transport.publish(
        journal_subject(uid, "other"), b"c", expected_last_subject_seq=0
    )
    assert other > second
    third = await transport.publish(subject, b"d", expected_last_subject_seq=second)
    assert third > other
    page = await transport.read_subject(JOURNAL_STREAM, subject, 0, 10)
    assert [(m.seq, m.data) for m in page] == [(first, b"a"), (second, b"b"), (third, b"d")]


async def test_publish_many_answers_each_message_on_its_own(
    transport: Transport, clock: object, uid: str
) -> None:
    """Independent publishes sent at once, to two streams: each stored or refused on its own
    (a fenced one does not stop the others), each answered in order; no stream, an error."""
    journal, history = journal_subject(uid, "step"), history_subject(uid)
    first = await transport.publish(journal, b"a", expected_last_subject_seq=0)
    results = await transport.publish_many(
        [
            PublishMsg(journal, b"stale", expected_last_subject_seq=0),
            PublishMsg(history, b"h", expected_last_subject_seq=0),
            PublishMsg(journal, b"b", expected_last_subject_seq=first),
            PublishMsg(f"nostream.{uid}", b"x"),
        ]
    )
    assert isinstance(results[0], WrongLastSequence)
    assert isinstance(results[1], int) and isinstance(results[2], int)
    assert results[2] > first
    assert isinstance(results[3], NotProvisioned)
    page = await transport.read_subject(JOURNAL_STREAM, journal, 0, 10)
    assert [(m.seq, m.data) for m in page] == [(first, b"a"), (results[2], b"b")]
    assert [m.data for m in await transport.read_subject(HISTORY_STREAM, history, 0, 10)] == [b"h"]
    assert await transport.publish_many([]) == []


async def test_duplicate_msg_id_returns_original_sequence(
    transport: Transport, clock: object, uid: str
) -> None:
    subject = history_subject(uid)
    seq = await transport.publish(subject, b"one", msg_id=f"{uid}-1")
    assert await transport.publish(subject, b"again", msg_id=f"{uid}-1") == seq
    # The duplicate check wins over the expected-sequence check: a retry after a lost ack
    # learns its own sequence instead of being fenced.
    assert (
        await transport.publish(subject, b"again", msg_id=f"{uid}-1", expected_last_subject_seq=0)
        == seq
    )
    other = await transport.publish(subject, b"two", msg_id=f"{uid}-2")
    assert other > seq
    page = await transport.read_subject(HISTORY_STREAM, subject, 0, 10)
    assert [m.data for m in page] == [b"one", b"two"]


async def test_publish_many_deduplicates_by_msg_id(
    transport: Transport, clock: object, uid: str
) -> None:
    """A message of ``publish_many`` with a msg id is stored once, as a publish with it is: a
    repeat (before or after, alone or among others) answers the original sequence."""
    history, tasks = history_subject(uid), task_subject("t", uid)
    first = await transport.publish(tasks, b"task", msg_id=f"{uid}.task")
    results = await transport.publish_many(
        [
            PublishMsg(tasks, b"task again", msg_id=f"{uid}.task"),
            PublishMsg(history, b"started", msg_id=f"{uid}.started"),
        ]
    )
    assert results[0] == first
    assert isinstance(results[1], int)
    again = await transport.publish_many([PublishMsg(history, b"again", msg_id=f"{uid}.started")])
    assert again == [results[1]]
    assert await transport.publish(history, b"alone", msg_id=f"{uid}.started") == results[1]
    assert [m.data for m in await transport.read_subject(TASK_STREAM, tasks, 0, 10)] == [b"task"]
    assert [m.data for m in await transport.read_subject(HISTORY_STREAM, history, 0, 10)] == [
        b"started"
    ]


async def test_get_msg_by_sequence_with_headers(
    transport: Transport, clock: object, uid: str
) -> None:
    subject = journal_subject(uid, "s")
    seq = await transport.publish(subject, b"body", headers={"Dagnats-Record": "claim"})
    msg = await transport.get_msg(JOURNAL_STREAM, seq)
    assert (msg.subject, msg.seq, msg.data) == (subject, seq, b"body")
    assert msg.headers.get("Dagnats-Record") == "claim"
    with pytest.raises(NotFound):
        await transport.get_msg(JOURNAL_STREAM, seq + 1_000_000)


async def test_last_message_of_a_subject(transport: Transport, clock: object, uid: str) -> None:
    subject = journal_subject(uid, "s")
    assert await transport.get_last_msg(JOURNAL_STREAM, subject) is None
    await transport.publish(subject, b"first")
    last = await transport.publish(subject, b"second")
    await transport.publish(journal_subject(uid, "other"), b"elsewhere")
    msg = await transport.get_last_msg(JOURNAL_STREAM, subject)
    assert msg is not None
    assert (msg.seq, msg.data, msg.subject) == (last, b"second", subject)


async def test_read_subject_in_pages(transport: Transport, clock: object, uid: str) -> None:
    subject = journal_subject(uid, "s")
    sent = []
    for i in range(5):
        sent.append(await transport.publish(subject, f"m{i}".encode()))
        await transport.publish(journal_subject(uid, "noise"), b"x")
    pages = []
    from_seq = 0
    while True:
        page = await transport.read_subject(JOURNAL_STREAM, subject, from_seq, 2)
        if not page:
            break
        assert len(page) <= 2
        pages.append([m.seq for m in page])
        from_seq = page[-1].seq + 1
    assert pages == [sent[0:2], sent[2:4], sent[4:5]]
    middle = await transport.read_subject(JOURNAL_STREAM, subject, sent[1] + 1, 10)
    assert [m.data for m in middle] == [b"m2", b"m3", b"m4"]
    assert all(m.subject == subject for m in middle)


async def test_purge_subject(transport: Transport, clock: object, uid: str) -> None:
    subject = journal_subject(uid, "s")
    kept = journal_subject(uid, "kept")
    for i in range(3):
        await transport.publish(subject, f"m{i}".encode())
    keep_seq = await transport.publish(kept, b"k")
    await transport.purge_subject(JOURNAL_STREAM, subject)
    assert await transport.get_last_msg(JOURNAL_STREAM, subject) is None
    assert await transport.read_subject(JOURNAL_STREAM, subject, 0, 10) == []
    kept_last = await transport.get_last_msg(JOURNAL_STREAM, kept)
    assert kept_last is not None and kept_last.seq == keep_seq
    # An emptied subject fences like a new one.
    await transport.publish(subject, b"fresh", expected_last_subject_seq=0)


async def test_purge_subjects_answers_each_purge_on_its_own(
    transport: Transport, clock: object, uid: str
) -> None:
    """Purges sent at once, in two streams: each made or refused on its own (a stream that does
    not exist does not stop the others), each answered in order; what they name is gone, what
    they do not name is kept."""
    journal, kept = journal_subject(uid, "s"), journal_subject(uid, "kept")
    history = history_subject(uid)
    for i in range(2):
        await transport.publish(journal, f"m{i}".encode())
    await transport.publish(history, b"h")
    keep_seq = await transport.publish(kept, b"k")
    results = await transport.purge_subjects(
        [
            SubjectPurge(JOURNAL_STREAM, journal),
            SubjectPurge(f"NO_STREAM_{uid}", f"nowhere.{uid}"),
            SubjectPurge(HISTORY_STREAM, history),
        ]
    )
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], NotProvisioned)
    assert await transport.read_subject(JOURNAL_STREAM, journal, 0, 10) == []
    assert await transport.read_subject(HISTORY_STREAM, history, 0, 10) == []
    kept_last = await transport.get_last_msg(JOURNAL_STREAM, kept)
    assert kept_last is not None and kept_last.seq == keep_seq
    assert await transport.purge_subjects([]) == []


async def test_kv_get_and_publish_many_answers_the_read_and_each_publish(
    transport: Transport, clock: object, uid: str
) -> None:
    """A key's read and publishes sent at once: the read answers what a read answers (the
    value, None when absent or deleted, its error for a bucket that does not exist), each
    publish is stored or refused on its own whatever the read's answer."""
    b, key = CHECKPOINTS_BUCKET, f"{uid}.read"
    journal = journal_subject(uid, "step")
    rev = await transport.kv_create(b, key, b"v1")
    first = await transport.publish(journal, b"a", expected_last_subject_seq=0)
    entry, results = await transport.kv_get_and_publish_many(
        b,
        key,
        [
            PublishMsg(journal, b"stale", expected_last_subject_seq=0),
            PublishMsg(history_subject(uid), b"h", expected_last_subject_seq=0),
        ],
    )
    assert isinstance(entry, KvEntry) and (entry.value, entry.revision) == (b"v1", rev)
    assert isinstance(results[0], WrongLastSequence) and isinstance(results[1], int)
    page = await transport.read_subject(JOURNAL_STREAM, journal, 0, 10)
    assert [(m.seq, m.data) for m in page] == [(first, b"a")]
    await transport.kv_delete(b, key)
    entry, results = await transport.kv_get_and_publish_many(b, key, [])
    assert (entry, results) == (None, [])
    entry, results = await transport.kv_get_and_publish_many(
        f"no_bucket_{uid}", key, [PublishMsg(journal, b"b")]
    )
    assert isinstance(entry, NotProvisioned)
    assert isinstance(results[0], int) and results[0] > page[0].seq


async def test_not_provisioned(transport: Transport, clock: object, uid: str) -> None:
    with pytest.raises(NotProvisioned):
        await transport.publish(f"nowhere.{uid}", b"x")
    with pytest.raises(NotProvisioned):
        await transport.get_msg(f"NO_STREAM_{uid}", 1)
    with pytest.raises(NotProvisioned):
        await transport.get_last_msg(f"NO_STREAM_{uid}", f"nowhere.{uid}")
    with pytest.raises(NotProvisioned):
        await transport.kv_get(f"no_bucket_{uid}", "k")
    with pytest.raises(NotProvisioned):
        await transport.kv_put(f"no_bucket_{uid}", "k", b"v")
    with pytest.raises(NotProvisioned):
        await transport.fetch(HISTORY_STREAM, f"no-durable-{uid}", 1, SHORT_WAIT_S)
    with pytest.raises(NotProvisioned):
        await transport.ensure_consumer(
            ConsumerConfig(f"NO_STREAM_{uid}", f"c-{uid}", f"nowhere.{uid}", ACK_WAIT_S)
        )


# --- key-value -----------------------------------------------------------------------------


async def test_kv_compare_and_set(transport: Transport, clock: object, uid: str) -> None:
    b, key = CHECKPOINTS_BUCKET, f"{uid}.step"
    assert await transport.kv_get(b, key) is None
    rev1 = await transport.kv_create(b, key, b"v1")
    with pytest.raises(KeyExists):
        await transport.kv_create(b, key, b"other")
    rev2 = await transport.kv_update(b, key, b"v2", rev1)
    assert rev2 > rev1
    with pytest.raises(RevisionMismatch):
        await transport.kv_update(b, key, b"stale", rev1)
    entry = await transport.kv_get(b, key)
    assert entry is not None and (entry.key, entry.value, entry.revision) == (key, b"v2", rev2)
    with pytest.raises(RevisionMismatch):
        await transport.kv_delete(b, key, revision=rev1)
    assert await transport.kv_get(b, key) is not None
    await transport.kv_delete(b, key, revision=rev2)
    assert await transport.kv_get(b, key) is None
    rev3 = await transport.kv_create(b, key, b"v3")  # a deleted key can be created again
    assert rev3 > rev2
    rev4 = await transport.kv_put(b, key, b"v4")
    assert rev4 > rev3
    await transport.kv_delete(b, key)
    assert await transport.kv_get(b, key) is None


async def test_kv_keys_by_prefix(transport: Transport, clock: object, uid: str) -> None:
    b = CHECKPOINTS_BUCKET
    for key in (f"{uid}.b", f"{uid}.a", f"{uid}x.c", f"{uid}.gone"):
        await transport.kv_put(b, key, b"v")
    await transport.kv_delete(b, f"{uid}.gone")
    assert await transport.kv_keys(b, f"{uid}.") == [f"{uid}.a", f"{uid}.b"]
    assert await transport.kv_keys(b, uid) == [f"{uid}.a", f"{uid}.b", f"{uid}x.c"]
    assert await transport.kv_keys(b, f"{uid}.none") == []
    # A prefix on a token boundary reads only its keys (server-side filter), deeper ones too.
    await transport.kv_put(b, f"{uid}.deep.er", b"v")
    assert await transport.kv_keys(b, f"{uid}.") == [f"{uid}.a", f"{uid}.b", f"{uid}.deep.er"]
    assert await transport.kv_keys(b, f"{uid}.deep.") == [f"{uid}.deep.er"]
    assert await transport.kv_keys(b, f"{uid}.nothing.") == []


async def test_kv_watch_sees_put_and_delete(transport: Transport, clock: object, uid: str) -> None:
    b = CHECKPOINTS_BUCKET
    await transport.kv_put(b, f"{uid}.before", b"old")
    with trio.fail_after(TEST_BOUND_S):
        async with transport.kv_watch(b, f"{uid}.") as changes:
            rev = await transport.kv_put(b, f"{uid}.k", b"new")
            await transport.kv_put(b, f"other{uid}.k", b"not watched")
            await transport.kv_delete(b, f"{uid}.k")
            first = await changes.__anext__()
            second = await changes.__anext__()
    assert (first.key, first.value, first.revision) == (f"{uid}.k", b"new", rev)
    assert (second.key, second.value) == (f"{uid}.k", None)
    assert second.revision > rev


# --- durable pull consumers ----------------------------------------------------------------


async def test_ack_wait_redelivery_counts(transport: Transport, clock: object, uid: str) -> None:
    durable = await history_consumer(transport, uid)
    await transport.ensure_consumer(  # idempotent
        ConsumerConfig(HISTORY_STREAM, durable, history_subject(uid), ACK_WAIT_S)
    )
    seq = await transport.publish(history_subject(uid), b"event")
    with trio.fail_after(TEST_BOUND_S):
        fetched_at = trio.current_time()
        first = await fetch_one(transport, HISTORY_STREAM, durable)
        assert (first.stream_seq, first.num_delivered, first.data) == (seq, 1, b"event")
        assert first.subject == history_subject(uid)
        assert await transport.fetch(HISTORY_STREAM, durable, 1, SHORT_WAIT_S) == []
        second = await fetch_one(transport, HISTORY_STREAM, durable)
        assert trio.current_time() - fetched_at >= ACK_WAIT_S - SLACK_S
        assert (second.stream_seq, second.num_delivered) == (seq, 2)
        await second.ack()
        await second.ack()  # settling twice is harmless
        assert await transport.fetch(HISTORY_STREAM, durable, 1, ACK_WAIT_S + SHORT_WAIT_S) == []


#: A lease schedule of growing AckWaits, one per delivery count (the last one repeats).
BACKOFF_S = (0.6, 1.8)


async def test_backoff_gives_each_redelivery_its_own_ack_wait(
    transport: Transport, clock: object, uid: str
) -> None:
    """Delivery n gets ``backoff_s[n - 1]``, and ``in_progress`` restarts that same deadline:
    the workers' growing leases (worker/_lease.py) rest on it, on both transports."""
    durable = f"c-{uid}"
    config = ConsumerConfig(
        HISTORY_STREAM, durable, history_subject(uid), BACKOFF_S[0], backoff_s=BACKOFF_S
    )
    assert [config.ack_wait_for(n) for n in (1, 2, 3)] == [0.6, 1.8, 1.8]
    await transport.ensure_consumer(config)
    await transport.ensure_consumer(config)  # idempotent
    seq = await transport.publish(history_subject(uid), b"event")
    with trio.fail_after(TEST_BOUND_S):
        first = await fetch_one(transport, HISTORY_STREAM, durable)
        assert first.num_delivered == 1
        second = await fetch_one(transport, HISTORY_STREAM, durable)
        assert (second.stream_seq, second.num_delivered) == (seq, 2)
        # The second delivery holds 1.8 s: beats every 0.9 s (longer than the first lease)
        # keep it, and nothing comes meanwhile.
        for _ in range(3):
            assert await transport.fetch(HISTORY_STREAM, durable, 1, BACKOFF_S[1] / 2) == []
            await second.in_progress()
        beaten_at = trio.current_time()
        third = await fetch_one(transport, HISTORY_STREAM, durable)
        assert trio.current_time() - beaten_at >= BACKOFF_S[1] - SLACK_S
        assert third.num_delivered == 3
        await third.ack()
        assert await transport.fetch(HISTORY_STREAM, durable, 1, BACKOFF_S[1] + SHORT_WAIT_S) == []


async def test_fetch_times_out_empty(transport: Transport, clock: object, uid: str) -> None:
    durable = await history_consumer(transport, uid)
    with trio.fail_after(TEST_BOUND_S):
        started = trio.current_time()
        assert await transport.fetch(HISTORY_STREAM, durable, 3, SHORT_WAIT_S) == []
        assert trio.current_time() - started >= SHORT_WAIT_S - SLACK_S


async def test_fetchers_share_a_durable(transport: Transport, clock: object, uid: str) -> None:
    durable = await history_consumer(transport, uid)
    sent = [await transport.publish(history_subject(uid), f"{i}".encode()) for i in range(4)]
    with trio.fail_after(TEST_BOUND_S):
        seen: list[int] = []
        while len(seen) < len(sent):
            batch = await transport.fetch(HISTORY_STREAM, durable, 2, ARRIVAL_S)
            assert 1 <= len(batch) <= 2
            for d in batch:
                assert d.num_delivered == 1
                await d.ack()
            seen.extend(d.stream_seq for d in batch)
    assert sorted(seen) == sent


async def test_nak_with_delay(transport: Transport, clock: object, uid: str) -> None:
    durable = await history_consumer(transport, uid, ack_wait_s=5.0)
    seq = await transport.publish(history_subject(uid), b"event")
    with trio.fail_after(TEST_BOUND_S):
        first = await fetch_one(transport, HISTORY_STREAM, durable)
        nakked_at = trio.current_time()
        await first.nak(delay_s=NAK_DELAY_S)
        assert await transport.fetch(HISTORY_STREAM, durable, 1, SHORT_WAIT_S) == []
        second = await fetch_one(transport, HISTORY_STREAM, durable)
        assert trio.current_time() - nakked_at >= NAK_DELAY_S - SLACK_S
        assert (second.stream_seq, second.num_delivered) == (seq, 2)
        await second.nak()  # no delay: back at once, long before the 5 s AckWait
        third = await fetch_one(transport, HISTORY_STREAM, durable)
        assert trio.current_time() - nakked_at < 5.0
        assert third.num_delivered == 3
        await third.ack()


async def test_in_progress_extends_the_deadline(
    transport: Transport, clock: object, uid: str
) -> None:
    ack_wait_s = IN_PROGRESS_ACK_WAIT_S
    durable = await history_consumer(transport, uid, ack_wait_s=ack_wait_s)
    seq = await transport.publish(history_subject(uid), b"event")
    with trio.fail_after(TEST_BOUND_S):
        first = await fetch_one(transport, HISTORY_STREAM, durable)
        delivered_at = trio.current_time()
        await trio.sleep(0.6 * ack_wait_s)  # time passing is the subject of this test
        progressed_at = trio.current_time()
        await first.in_progress()
        # Past the original AckWait, still inside the extended one: nothing comes back.
        await trio.sleep(max(0.0, delivered_at + ack_wait_s + 0.1 - trio.current_time()))
        assert await transport.fetch(HISTORY_STREAM, durable, 1, 0.2) == []
        second = await fetch_one(transport, HISTORY_STREAM, durable)
        assert trio.current_time() - progressed_at >= ack_wait_s - SLACK_S
        assert (second.stream_seq, second.num_delivered) == (seq, 2)
        await second.ack()


async def test_term_stops_redelivery(transport: Transport, clock: object, uid: str) -> None:
    durable = await history_consumer(transport, uid)
    await transport.publish(history_subject(uid), b"poison")
    keep = await transport.publish(history_subject(uid), b"fine")
    with trio.fail_after(TEST_BOUND_S):
        first = await fetch_one(transport, HISTORY_STREAM, durable)
        assert first.data == b"poison"
        await first.term()
        second = await fetch_one(transport, HISTORY_STREAM, durable)
        assert second.stream_seq == keep
        await second.ack()
        assert await transport.fetch(HISTORY_STREAM, durable, 1, ACK_WAIT_S + SHORT_WAIT_S) == []


async def test_max_deliver(transport: Transport, clock: object, uid: str) -> None:
    durable = await history_consumer(transport, uid, max_deliver=2)
    await transport.publish(history_subject(uid), b"event")
    with trio.fail_after(TEST_BOUND_S):
        assert (await fetch_one(transport, HISTORY_STREAM, durable)).num_delivered == 1
        assert (await fetch_one(transport, HISTORY_STREAM, durable)).num_delivered == 2
        assert await transport.fetch(HISTORY_STREAM, durable, 1, ACK_WAIT_S + SHORT_WAIT_S) == []


#: The limit of the max_ack_pending test, and the messages it publishes (more than the limit).
MAX_ACK_PENDING = 2
MAX_ACK_PENDING_MSGS = 4
#: AckWait of that test: longer than all of it, so nothing comes back unasked.
LONG_ACK_WAIT_S = 30.0


async def test_max_ack_pending_bounds_the_unsettled_deliveries(
    transport: Transport, clock: object, uid: str
) -> None:
    """A consumer holding ``max_ack_pending`` deliveries not settled gets no new message; a nak
    does not settle (a message nakked with a delay stays counted until it is back and acked),
    though the nakked one itself comes back; an ack makes room for one more; -1 (set on the
    existing consumer) lets every message come."""
    t = transport
    durable = f"c-{uid}"
    limited = ConsumerConfig(
        HISTORY_STREAM,
        durable,
        history_subject(uid),
        LONG_ACK_WAIT_S,
        max_ack_pending=MAX_ACK_PENDING,
    )
    await t.ensure_consumer(limited)
    seqs = [
        await t.publish(history_subject(uid), f"{i}".encode()) for i in range(MAX_ACK_PENDING_MSGS)
    ]
    with trio.fail_after(TEST_BOUND_S):
        # (A fetch asks for no more than comes: nats-server ends a pull request that got part
        # of its batch only at its expiry while messages are held back by the limit.)
        held = await t.fetch(HISTORY_STREAM, durable, MAX_ACK_PENDING, ARRIVAL_S)
        assert [d.stream_seq for d in held] == seqs[:MAX_ACK_PENDING]
        assert await t.fetch(HISTORY_STREAM, durable, MAX_ACK_PENDING_MSGS, SHORT_WAIT_S) == []
        await held[0].nak(delay_s=NAK_DELAY_S)
        assert await t.fetch(HISTORY_STREAM, durable, MAX_ACK_PENDING_MSGS, SHORT_WAIT_S) == []
        back = await fetch_one(t, HISTORY_STREAM, durable)
        assert (back.stream_seq, back.num_delivered) == (seqs[0], 2)
        await back.ack()
        room = await fetch_one(t, HISTORY_STREAM, durable)
        assert (room.stream_seq, room.num_delivered) == (seqs[2], 1)
        assert await t.fetch(HISTORY_STREAM, durable, MAX_ACK_PENDING_MSGS, SHORT_WAIT_S) == []
        await t.ensure_consumer(attrs.evolve(limited, max_ack_pending=-1))
        rest = await fetch_one(t, HISTORY_STREAM, durable)
        assert (rest.stream_seq, rest.num_delivered) == (seqs[3], 1)
        # Unlimited: a second consumer takes all four at once, none settled.
        unlimited = attrs.evolve(limited, durable=f"u-{uid}", max_ack_pending=-1)
        await t.ensure_consumer(unlimited)
        taken: list[int] = []
        while len(taken) < len(seqs):
            got = await t.fetch(HISTORY_STREAM, unlimited.durable, len(seqs), ARRIVAL_S)
            assert got, f"-1 held back messages after {taken}"
            taken.extend(d.stream_seq for d in got)
        assert taken == seqs
        for d in [held[1], room, rest]:
            await d.ack()


def test_max_ack_pending_is_minus_one_or_positive() -> None:
    for bad in (0, -2, True):
        with pytest.raises(ValueError, match="max_ack_pending must be -1"):
            ConsumerConfig(HISTORY_STREAM, "d", "h.x", ACK_WAIT_S, max_ack_pending=bad)
    assert ConsumerConfig(HISTORY_STREAM, "d", "h.x", ACK_WAIT_S).max_ack_pending == 1000
    assert ConsumerConfig(HISTORY_STREAM, "d", "h.x", 1.0, max_ack_pending=-1).max_ack_pending < 0


async def work_queue_stream(t: Transport, uid: str, *, work_queue: bool = True) -> str:
    """A stream of this test's own (``wq.{uid}.*``) and a consumer on it; its durable."""
    await t.ensure_stream(StreamSpec(f"WQ_{uid}", (f"wq.{uid}.*",), work_queue=work_queue))
    durable = f"wq-{uid}"
    await t.ensure_consumer(ConsumerConfig(f"WQ_{uid}", durable, f"wq.{uid}.*", ACK_WAIT_S))
    return durable


async def ack_one(t: Transport, stream: str, durable: str, subject: str) -> int:
    """Publish to ``subject``, take it from ``durable`` and ack it (waited on); its sequence."""
    seq = await t.publish(subject, b"task")
    delivery = await fetch_one(t, stream, durable)
    assert delivery.stream_seq == seq
    assert (await t.get_msg(stream, seq)).data == b"task"
    await delivery.ack()
    return seq


async def test_work_queue_ack_removes_the_message(
    transport: Transport, clock: object, uid: str
) -> None:
    durable = await work_queue_stream(transport, uid)
    with trio.fail_after(TEST_BOUND_S):
        seq = await ack_one(transport, f"WQ_{uid}", durable, f"wq.{uid}.a")
        with pytest.raises(NotFound):
            await transport.get_msg(f"WQ_{uid}", seq)
        assert await transport.fetch(f"WQ_{uid}", durable, 1, SHORT_WAIT_S) == []


async def test_an_existing_stream_keeps_its_retention_and_takes_the_rest(
    transport: Transport, clock: object, uid: str
) -> None:
    """nats-server cannot turn a work queue into a limits stream or back: provisioning a store
    made by an earlier version keeps the retention it has (and updates the rest)."""
    stream = f"WQ_{uid}"
    durable = await work_queue_stream(transport, uid)
    await transport.ensure_stream(StreamSpec(stream, (f"wq.{uid}.*",), allow_atomic=True))
    with trio.fail_after(TEST_BOUND_S):
        seq = await ack_one(transport, stream, durable, f"wq.{uid}.a")
        with pytest.raises(NotFound):  # still a work queue
            await transport.get_msg(stream, seq)
        # The update took: the stream stores an atomic batch now.
        ack = await transport.publish_batch([BatchMsg(f"wq.{uid}.b", b"1")])
        assert (await transport.get_msg(stream, ack.last_seq)).data == b"1"
    limits = f"{uid}L"
    durable = await work_queue_stream(transport, limits, work_queue=False)
    await transport.ensure_stream(StreamSpec(f"WQ_{limits}", (f"wq.{limits}.*",), work_queue=True))
    with trio.fail_after(TEST_BOUND_S):
        seq = await ack_one(transport, f"WQ_{limits}", durable, f"wq.{limits}.a")
        assert (await transport.get_msg(f"WQ_{limits}", seq)).data == b"task"  # still limits


async def test_the_task_stream_keeps_an_acked_task_until_its_runs_tasks_are_purged(
    transport: Transport, clock: object, uid: str
) -> None:
    """An ack removes nothing from the task stream (no tombstone to fsync) and the task is not
    delivered again; one purge of ``task.*.{run}`` removes the run's tasks of every type."""
    durable = f"workers-{uid}"
    await transport.ensure_consumer(
        ConsumerConfig(TASK_STREAM, durable, f"task.{uid}.*", ACK_WAIT_S)
    )
    run, other = f"{uid}r1", f"{uid}r2"
    with trio.fail_after(TEST_BOUND_S):
        acked = await ack_one(transport, TASK_STREAM, durable, task_subject(uid, run))
        assert (await transport.get_msg(TASK_STREAM, acked)).data == b"task"
        assert await transport.fetch(TASK_STREAM, durable, 1, SHORT_WAIT_S) == []
        queued = await transport.publish(task_subject(f"{uid}b", run), b"queued")
        kept = await transport.publish(task_subject(uid, other), b"other run")
        await transport.purge_subject(TASK_STREAM, run_tasks_filter(run))
        for seq in (acked, queued):
            with pytest.raises(NotFound):
                await transport.get_msg(TASK_STREAM, seq)
        assert (await transport.get_msg(TASK_STREAM, kept)).data == b"other run"
        delivery = await fetch_one(transport, TASK_STREAM, durable)
        assert delivery.stream_seq == kept
        await delivery.ack()


async def test_the_timer_stream_keeps_a_fired_timer_until_its_runs_timers_are_purged(
    transport: Transport, clock: object, uid: str
) -> None:
    """An ack removes nothing from the timer stream (no tombstone to fsync) and the timer is not
    delivered again; one purge of ``sleep.{run}.*`` removes the run's timers, fired or pending
    (nakked until due), and the consumer goes on without redelivering the purged one."""
    run, other = f"{uid}r1", f"{uid}r2"
    durable = f"timers-{uid}"
    await transport.ensure_consumer(
        ConsumerConfig(TIMER_STREAM, durable, timer_subject(run, "*"), ACK_WAIT_S)
    )
    with trio.fail_after(TEST_BOUND_S):
        fired = await ack_one(transport, TIMER_STREAM, durable, timer_subject(run, "a"))
        assert (await transport.get_msg(TIMER_STREAM, fired)).data == b"task"
        assert await transport.fetch(TIMER_STREAM, durable, 1, SHORT_WAIT_S) == []
        pending = await transport.publish(timer_subject(run, "b"), b"not due")
        not_due = await fetch_one(transport, TIMER_STREAM, durable)
        assert not_due.stream_seq == pending
        await not_due.nak(NAK_DELAY_S)
        kept = await transport.publish(timer_subject(other, "a"), b"other run")
        await transport.purge_subject(TIMER_STREAM, run_timers_filter(run))
        for seq in (fired, pending):
            with pytest.raises(NotFound):
                await transport.get_msg(TIMER_STREAM, seq)
        assert (await transport.get_msg(TIMER_STREAM, kept)).data == b"other run"
        # Past the nak's delay the purged timer does not come back; a later one does.
        assert await transport.fetch(TIMER_STREAM, durable, 1, NAK_DELAY_S + SHORT_WAIT_S) == []
        later = await transport.publish(timer_subject(run, "c"), b"later")
        delivery = await fetch_one(transport, TIMER_STREAM, durable)
        assert delivery.stream_seq == later
        await delivery.ack()


# --- core NATS -----------------------------------------------------------------------------


async def test_core_publish_subscribe(transport: Transport, clock: object, uid: str) -> None:
    with trio.fail_after(TEST_BOUND_S):
        async with transport.subscribe(f"preview.{uid}.*") as messages:
            await transport.core_publish(f"other.{uid}.s", b"not for us")
            await transport.core_publish(f"preview.{uid}.s", b"token", {"K": "v"})
            msg = await messages.__anext__()
    assert (msg.subject, msg.data, msg.reply) == (f"preview.{uid}.s", b"token", None)
    assert msg.headers.get("K") == "v"


async def test_queue_group_delivers_each_message_once(
    transport: Transport, clock: object, uid: str
) -> None:
    subject = f"work.{uid}"
    count = 6
    got: list[bytes] = []
    everything: list[bytes] = []
    with trio.fail_after(TEST_BOUND_S):
        async with (
            transport.subscribe(subject, queue="q") as a,
            transport.subscribe(subject, queue="q") as b,
            transport.subscribe(subject) as plain,
        ):
            for i in range(count):
                await transport.core_publish(subject, f"{i}".encode())
            async with trio.open_nursery() as nursery:

                async def drain(messages: object) -> None:
                    async for msg in messages:  # type: ignore[attr-defined]
                        got.append(msg.data)
                        if len(got) == count:
                            nursery.cancel_scope.cancel()

                nursery.start_soon(drain, a)
                nursery.start_soon(drain, b)
            async for msg in plain:
                everything.append(msg.data)
                if len(everything) == count:
                    break
    assert sorted(got) == sorted(f"{i}".encode() for i in range(count))
    assert everything == [f"{i}".encode() for i in range(count)]


async def test_request_reply(transport: Transport, clock: object, uid: str) -> None:
    subject = f"api.{uid}.echo"

    async def responder(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with transport.subscribe(subject) as requests:
            task_status.started()
            async for msg in requests:
                assert msg.reply is not None
                await transport.respond(msg, msg.data.upper())

    with trio.fail_after(TEST_BOUND_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(responder)
            assert await transport.request(subject, b"hello", timeout_s=ARRIVAL_S) == b"HELLO"
            assert await transport.request(subject, b"again", timeout_s=ARRIVAL_S) == b"AGAIN"
            nursery.cancel_scope.cancel()
        with pytest.raises(TemporarilyUnavailable):
            await transport.request(f"api.{uid}.nobody", b"x", timeout_s=ARRIVAL_S)


async def test_round_trips_are_counted(transport: Transport, clock: object, uid: str) -> None:
    before = transport.round_trips
    await transport.publish(history_subject(uid), b"x")
    await transport.get_last_msg(HISTORY_STREAM, history_subject(uid))
    assert transport.round_trips >= before + 2


async def test_ping_is_a_round_trip(transport: Transport, clock: object, uid: str) -> None:
    before = transport.round_trips
    await transport.ping(ARRIVAL_S)
    assert transport.round_trips == before + 1
