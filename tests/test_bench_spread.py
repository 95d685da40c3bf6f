"""``just bench spread`` (issue 12 goal 1, 50 runs at once with fsync): the section counts each
stream's durable writes of the agent burst from the server's own stream state, and its synthetic
runs are laid out as those writes are, so what it says about fsyncs per run stays true."""

from __future__ import annotations

from collections import Counter

from bench.__main__ import SECTIONS
from bench.spread import (
    RUN_CHAIN,
    Chain,
    StreamWrites,
    burst_writes,
    chain_rates,
    shorter,
)
from dagnats_trio.protocol.layout import (
    HISTORY_STREAM,
    JOURNAL_STREAM,
    RUN_ACTIVE_STREAM,
    RUN_INDEX_STREAM,
    RUNS_BUCKET,
    TASK_STREAM,
)

#: Runs started at once in the test (the bench starts 50).
TEST_BURST_RUNS = 3
#: The synthetic chain's stream kinds, by the stream each stands for.
KIND_OF = {
    JOURNAL_STREAM: "journal",
    TASK_STREAM: "task",
    f"KV_{RUNS_BUCKET}": "kv",
    HISTORY_STREAM: "history",
    RUN_ACTIVE_STREAM: "active",
    RUN_INDEX_STREAM: "index",
}


async def test_the_burst_counts_each_streams_writes_per_run_and_the_chain_matches_them() -> None:
    rate, writes = await burst_writes(TEST_BURST_RUNS)
    assert rate > 0
    by_stream = {w.stream: w for w in writes}
    assert set(by_stream) == set(KIND_OF)
    # Stored per run (paired records: claim, model + intent, result + commit per tool
    # iteration; claim, answer + complete commit for the last).
    stored = {s: w.stored for s, w in by_stream.items()}
    assert stored == {
        JOURNAL_STREAM: 11.0,
        TASK_STREAM: 4.0,
        f"KV_{RUNS_BUCKET}": 5.0,
        HISTORY_STREAM: 5.0,
        RUN_ACTIVE_STREAM: 1.0,
        RUN_INDEX_STREAM: 1.0,
    }
    # Appends only: nothing removed from the journal, the history or the index.
    for stream in (JOURNAL_STREAM, HISTORY_STREAM, RUN_INDEX_STREAM):
        assert by_stream[stream].removed == 0.0
    # A run's tasks and its active marker are removed by a purge each when it ends (after the
    # finished snapshot, so the last may trail the burst's end): one fsync per purge.
    for stream in (TASK_STREAM, RUN_ACTIVE_STREAM):
        assert 0.0 <= by_stream[stream].removed <= stored[stream]
        assert by_stream[stream].fsyncs <= stored[stream] + 1.0
    # A snapshot's older revision goes by the bucket's limit: no tombstone, no fsync.
    kv = by_stream[f"KV_{RUNS_BUCKET}"]
    assert kv.fsyncs == kv.stored
    # The synthetic run of part 3 makes the same fsynced writes per stream, removals included.
    settled = {
        KIND_OF[s]: w.stored + (1 if s in (TASK_STREAM, RUN_ACTIVE_STREAM) else 0)
        for s, w in by_stream.items()
    }
    assert Counter(RUN_CHAIN) == settled
    assert len(RUN_CHAIN) == 29


def test_a_shorter_chain_keeps_the_order_and_the_mix() -> None:
    for n in (24, 18, 12):
        short = shorter(RUN_CHAIN, n)
        assert len(short) == n
        rest = iter(RUN_CHAIN)
        assert all(kind in rest for kind in short)  # a subsequence, in order
        assert {"journal", "kv", "history", "task"} <= set(short)


async def test_synthetic_runs_are_timed_with_the_journal_in_one_stream_or_spread() -> None:
    one, spread = await chain_rates(
        True, [Chain(("journal", "kv", "journal")), Chain(("journal", "kv", "journal"), 2)], 1
    )
    assert one > 0 and spread > 0
    assert SECTIONS["spread"] == "bench.spread"


def test_fsyncs_count_a_removal_except_by_a_limit_and_a_purge_once() -> None:
    assert StreamWrites(HISTORY_STREAM, 4.0, 4.0).fsyncs == 8.0
    assert StreamWrites(f"KV_{RUNS_BUCKET}", 6.0, 5.0).fsyncs == 6.0
    assert StreamWrites(TASK_STREAM, 4.0, 4.0).fsyncs == 5.0
    assert StreamWrites(TASK_STREAM, 4.0, 2.0).fsyncs == 4.5  # half the runs' purges trail
    assert StreamWrites(RUN_ACTIVE_STREAM, 1.0, 1.0).fsyncs == 2.0
