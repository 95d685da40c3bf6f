"""Journal reads as the journal grows (issue 12 item 5), on a real nats-server and SimTransport:
reading streams a page per request (batch direct get), opening an iteration costs the same
requests at 1,000 and 10,000 records, and a short page from a lagging replica is finished from
the leader, never read with a gap."""

from __future__ import annotations

import math
from typing import Any

from dagnats_trio.journal import READ_PAGE_RECORDS, open_journal, read_journal
from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    CommitRecord,
    ModelRecord,
    encode_record,
    record_headers,
)
from dagnats_trio.protocol.layout import journal_subject
from dagnats_trio.transport import MAX_BATCH_PUBLISH_MSGS, BatchMsg, StoredMsg, Transport

from ._helpers import make_task, uid

#: Records per filled iteration: claim, model record, continue commit.
PER_ITERATION = 3


async def fill(t: Transport, run_id: str, records: int) -> tuple[int, int]:
    """Whole iterations, about ``records`` records; (next iteration, last commit's sequence)."""
    subject = journal_subject(run_id, "agent")
    msgs: list[BatchMsg] = []
    for i in range(records // PER_ITERATION):
        nonce = f"n{i}"
        for rec in (
            ClaimRecord(i, 1, f"c{i}", nonce),
            ModelRecord(i, 1, f"c{i}", 0, {"turn": i}),
            CommitRecord(i, 1, f"c{i}", nonce, CommitAction.CONTINUE, state={"turn": i}),
        ):
            msgs.append(BatchMsg(subject, encode_record(rec), headers=record_headers(rec)))
    last = 0
    for at in range(0, len(msgs), MAX_BATCH_PUBLISH_MSGS):
        last = (await t.publish_batch(msgs[at : at + MAX_BATCH_PUBLISH_MSGS])).last_seq
    return records // PER_ITERATION, last


async def test_reading_a_journal_streams_a_page_per_request(transport: Transport) -> None:
    run = uid()
    await fill(transport, run, 3_000)
    before = transport.round_trips
    records = await read_journal(transport, run, "agent")
    requests = transport.round_trips - before
    assert len(records) == 3_000
    assert [r.iteration for _, r in records[::PER_ITERATION]] == list(range(1_000))
    # the tail, then one request per page (one request per record before batch direct get)
    assert requests <= 1 + math.ceil(3_000 / READ_PAGE_RECORDS) + 1, requests
    print(f"read 3,000 records in {requests} requests")


async def _open_costs(t: Transport, records: int) -> tuple[int, int]:
    """Requests to open the next iteration (fast path) and to reopen it as a redelivery."""
    run = uid()
    iteration, seq = await fill(t, run, records)
    task = make_task(run, iteration=iteration, journal_seq=seq)
    before = t.round_trips
    j = await open_journal(t, task)
    opened = t.round_trips - before
    await j.model(lambda: {"turn": "new"})
    before = t.round_trips
    j2 = await open_journal(t, task)
    reopened = t.round_trips - before
    assert len(j2.placed_inputs()) == 0 and j2.next_call == 0
    assert await j2.model(lambda: "asked again") == {"turn": "new"}  # replayed, not asked
    return opened, reopened


async def test_opening_costs_the_same_at_1000_and_10000_records(transport: Transport) -> None:
    small = await _open_costs(transport, 1_000)
    large = await _open_costs(transport, 10_000)
    assert small == large, (small, large)
    assert small[0] == 2  # the tail read and the claim
    print(f"open: {small[0]} requests, reopen: {small[1]} requests, at 1,000 and 10,000")


class ShortPages:
    """A transport whose batch gets answer like a lagging replica: at most ``keep`` messages,
    and nothing past ``stop_seq`` (what the replica has stored so far)."""

    def __init__(self, inner: Transport, stop_seq: int) -> None:
        self._inner = inner
        self.stop_seq = stop_seq
        self.leader_reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def get_batch(self, stream: str, from_seq: int, max_msgs: int, **kw: Any) -> Any:
        page: list[StoredMsg] = await self._inner.get_batch(stream, from_seq, max_msgs, **kw)
        return [m for m in page if m.seq <= self.stop_seq]

    async def read_subject(self, *args: Any) -> Any:
        self.leader_reads += 1
        return await self._inner.read_subject(*args)


async def test_a_short_page_from_a_lagging_replica_is_finished_from_the_leader(
    transport: Transport,
) -> None:
    run = uid()
    _, last = await fill(transport, run, 300)
    lagging = ShortPages(transport, stop_seq=last - 10)
    records = await read_journal(lagging, run, "agent")  # type: ignore[arg-type]
    assert len(records) == 300 and records[-1][0] == last
    assert [s for s, _ in records] == sorted({s for s, _ in records})
    assert lagging.leader_reads >= 1
