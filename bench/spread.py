"""Where 50 runs at once spend their time with fsync on every write, and whether spreading the
writes over more streams would help (issue 12 goal 1: 300 runs/s with fsync).

nats-server 2.15.1 stores a single-replica file stream's messages on one goroutine per stream
(``stream.internalLoop``), each written and fsynced before the next (``writeMsgRecord`` flushes
in place, ``msgBlock.flushPendingMsgsLocked`` calls ``mfd.Sync()`` under ``sync_interval:
always``): no group commit of the messages waiting in a stream's queue. A removal that is not
by a limit (a work-queue ack, a purge) writes a tombstone, fsynced the same way, except that a
purge writes all its tombstones and fsyncs once; one by a limit (a KV key's older revision)
writes none. The task stream is a limits stream, so an ack removes nothing; a run's tasks go in
one purge when it ends, as its active marker does. Separate streams have separate loops, so
their fsyncs can overlap; how much that buys is the disk's (and file system's) business. Three
measurements:

1. The agent burst itself (``bench.agent``'s headline, ``BURST_RUNS`` at once): messages stored
   and removed per run in each stream, read from the server's stream state before and after.
2. ``APPENDERS`` concurrent fenced appenders, one subject each: appends/s with every subject in
   one stream, then spread over K streams; fsync and the default store.
3. Synthetic runs: ``BURST_RUNS`` at once, each a chain of fenced appends one after another laid
   out over the streams as an agent run's durable writes are (:data:`RUN_CHAIN`), with no
   runtime code at all: the runs/s the fsyncs alone allow, with the journal in one stream or
   spread over ``JOURNAL_SHARDS`` streams, and with fewer writes per run.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence

import attrs
import trio

from dagnats_trio.protocol.layout import (
    DEFS_BUCKET,
    HISTORY_STREAM,
    JOURNAL_STREAM,
    RUN_ACTIVE_STREAM,
    RUN_INDEX_STREAM,
    RUNS_BUCKET,
    TASK_STREAM,
)
from dagnats_trio.server import open_nats_server
from dagnats_trio.transport import StreamSpec, Transport, open_trio_nats_transport

from . import agent
from ._stack import open_stack

BODY_BYTES = 300
#: Concurrent appenders in part 2: one per run of the agent section's burst.
APPENDERS = agent.BURST_RUNS
#: Streams the appenders are spread over in part 2 (1 = all in one stream).
STREAM_COUNTS = (1, 4, 8)
APPEND_S = 1.0
APPEND_S_QUICK = 0.3
WARMUP_S = 0.3
#: Streams whose removals are by a limit (a KV key keeps one revision): no tombstone, no fsync.
LIMIT_REMOVED = frozenset({f"KV_{RUNS_BUCKET}", f"KV_{DEFS_BUCKET}"})
#: Streams whose removals are one purge per run, when it ends (its tasks, its active marker):
#: the purge's tombstones are fsynced once, so the runs purged count, not the messages removed.
PURGED_AT_RUN_END = frozenset({TASK_STREAM, RUN_ACTIVE_STREAM})
#: The streams an agent run writes to, in the order printed.
RUN_STREAMS = (
    JOURNAL_STREAM,
    TASK_STREAM,
    f"KV_{RUNS_BUCKET}",
    HISTORY_STREAM,
    RUN_ACTIVE_STREAM,
    RUN_INDEX_STREAM,
)
#: Part 3: one agent run's fsynced writes in the order they are made, by stream kind (client:
#: index, active marker, snapshot holding the first dispatch, the first task and started, sent
#: at once (``engine.start_dispatched``); per tool iteration the engine's CAS and task publish
#: (its ack removes nothing; the first iteration's are the client's), the worker's claim, two
#: record messages and event; the answer iteration's claim and ONE record message, the answer
#: with its complete commit; the end's marker purge and task purge).
_WORKER_ITERATION = ("journal", "journal", "journal", "history")
_ITERATION = ("kv", "task", *_WORKER_ITERATION)
_ANSWER_ITERATION = ("kv", "task", "journal", "journal", "history")
RUN_CHAIN: tuple[str, ...] = (
    ("index", "active", "kv", "task", "history")
    + _WORKER_ITERATION
    + _ITERATION * 2
    + _ANSWER_ITERATION
    + ("kv", "active", "task")
)
#: Part 3: streams the journal's share is spread over (subject by run).
JOURNAL_SHARDS = 4
#: Part 3: shorter chains (every k-th write of RUN_CHAIN kept): what fewer writes per run buy.
SHORTER_CHAINS = (24, 18, 12)
ROUNDS = 5
ROUNDS_QUICK = 1


@attrs.frozen
class StreamWrites:
    """One stream's messages stored and removed per run, and the fsyncs they cost."""

    stream: str
    stored: float
    removed: float

    @property
    def fsyncs(self) -> float:
        if self.stream in LIMIT_REMOVED:
            return self.stored
        if self.stream in PURGED_AT_RUN_END and self.stored > 0:
            return self.stored + self.removed / self.stored  # the share of runs purged
        return self.stored + self.removed


async def _stream_state(t: Transport, stream: str) -> tuple[int, int]:
    """(last sequence, messages held) of ``stream``, from the server."""
    info = json.loads(await t.request(f"$JS.API.STREAM.INFO.{stream}", b""))
    state = info["state"]
    return int(state["last_seq"]), int(state["messages"])


async def burst_writes(runs: int = agent.BURST_RUNS) -> tuple[float, list[StreamWrites]]:
    """Part 1: ``runs`` headline agent runs at once on a fresh fsync'd stack: runs/s and each
    stream's writes per run (removals seen when the burst ends; the marker purge may trail)."""
    handlers, workflows = agent._handlers_and_workflows((agent.HEADLINE,))
    async with open_stack(sync_always=True, handlers=handlers, workflows=workflows) as stack:
        for _ in range(agent.WARMUP_RUNS):
            await stack.run(agent.HEADLINE.workflow, {"task": "deploy"})
        await stack.wait_settled()  # no warm-up run's purge inside the window
        t = stack.client_tp
        before = [await _stream_state(t, s) for s in RUN_STREAMS]
        rate = await agent._burst(stack, agent.HEADLINE.workflow, runs)
        after = [await _stream_state(t, s) for s in RUN_STREAMS]
    out = []
    for stream, (seq0, held0), (seq1, held1) in zip(RUN_STREAMS, before, after, strict=True):
        stored = seq1 - seq0
        out.append(StreamWrites(stream, stored / runs, (stored - (held1 - held0)) / runs))
    return rate, out


async def _appender(
    t: Transport, subject: str, body: bytes, stop_at: float, counted_from: float, out: list[int]
) -> None:
    tail = 0
    while (now := time.perf_counter()) < stop_at:
        tail = await t.publish(subject, body, expected_last_subject_seq=tail)
        if now >= counted_from:
            out.append(1)


async def append_rates(sync_always: bool, seconds: float, rounds: int) -> dict[int, float]:
    """Part 2: appends/s, ``APPENDERS`` at once over K streams for each K of
    ``STREAM_COUNTS``, on one server, the Ks taking turns ``rounds`` times (the disk is shared
    with whatever else the machine does: turns spread its drift over every K); medians."""
    async with (
        open_nats_server(sync_always=sync_always) as server,
        open_trio_nats_transport(server.url, name="bench-spread") as t,
    ):
        for k in range(max(STREAM_COUNTS)):
            await t.ensure_stream(StreamSpec(f"SPREAD{k}", (f"spread{k}.*",)))
        body = b"x" * BODY_BYTES
        rates: dict[int, list[float]] = {k: [] for k in STREAM_COUNTS}
        for r in range(rounds):
            for streams in STREAM_COUNTS:
                done: list[int] = []
                counted_from = time.perf_counter() + WARMUP_S
                stop_at = counted_from + seconds
                async with trio.open_nursery() as nursery:
                    for i in range(APPENDERS):
                        subject = f"spread{i % streams}.r{r}k{streams}a{i}"
                        nursery.start_soon(_appender, t, subject, body, stop_at, counted_from, done)
                rates[streams].append(len(done) / seconds)
        return {k: statistics.median(v) for k, v in rates.items()}


def shorter(chain: Sequence[str], writes: int) -> tuple[str, ...]:
    """``writes`` of ``chain``'s writes, evenly picked (keeps the mix of streams)."""
    step = len(chain) / writes
    return tuple(chain[int(i * step)] for i in range(writes))


@attrs.frozen
class Chain:
    """A synthetic run of part 3: its writes in order (stream kinds), and the streams the
    journal's share is spread over."""

    writes: tuple[str, ...]
    journal_shards: int = 1


async def chain_rates(sync_always: bool, chains: Sequence[Chain], rounds: int) -> list[float]:
    """Part 3: runs/s of ``agent.BURST_RUNS`` synthetic runs at once for each of ``chains``,
    on one server, taking turns ``rounds`` times; medians. A run appends its chain's writes in
    order, fenced, one subject per run and stream kind."""
    kinds = sorted({kind for c in chains for kind in c.writes})
    shards = max(c.journal_shards for c in chains)
    async with (
        open_nats_server(sync_always=sync_always) as server,
        open_trio_nats_transport(server.url, name="bench-chain") as t,
    ):
        for kind in kinds:
            for k in range(shards if kind == "journal" else 1):
                await t.ensure_stream(StreamSpec(f"CHAIN_{kind}{k}".upper(), (f"{kind}{k}.*",)))
        body = b"x" * BODY_BYTES

        async def one(chain: Chain, run: str, shard: int) -> None:
            tails: dict[str, int] = {}
            for kind in chain.writes:
                subject = f"{kind}{shard if kind == 'journal' else 0}.{run}{kind}"
                tails[subject] = await t.publish(
                    subject, body, expected_last_subject_seq=tails.get(subject, 0)
                )

        rates: list[list[float]] = [[] for _ in chains]
        for r in range(rounds):
            for c, chain in enumerate(chains):
                start = time.perf_counter()
                async with trio.open_nursery() as nursery:
                    for i in range(agent.BURST_RUNS):
                        shard = i % chain.journal_shards
                        nursery.start_soon(one, chain, f"r{r}c{c}x{i}", shard)
                rates[c].append(agent.BURST_RUNS / (time.perf_counter() - start))
        return [statistics.median(v) for v in rates]


def _load() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def run(*, quick: bool = False) -> dict[str, float]:
    seconds = APPEND_S_QUICK if quick else APPEND_S
    rounds = ROUNDS_QUICK if quick else ROUNDS
    figures: dict[str, float] = {}
    print(f"== spread: {agent.BURST_RUNS} agent runs at once with fsync on every write (single "
          f"node, sync_interval always): where the writes go, and whether more streams help "
          f"(load {_load()})")  # fmt: skip
    rate, writes = trio.run(burst_writes)
    total = sum(w.fsyncs for w in writes)
    print(f"  1. the agent burst: {rate:.0f} runs/s; messages per run stored / removed "
          f"(fsynced writes):")  # fmt: skip
    for w in writes:
        print(f"     {w.stream:18} {w.stored:5.2f} / {w.removed:5.2f}   ({w.fsyncs:5.2f})")
    print(f"     total fsynced writes per run {total:.1f}")
    figures["spread_burst_runs_per_s"] = round(rate, 1)
    figures["spread_burst_fsyncs_per_run"] = round(total, 1)
    print(f"  2. {APPENDERS} fenced appenders ({BODY_BYTES} B, a subject each, one connection), "
          f"appends/s over {seconds:.1f} s, all in one stream or spread over K (median of "
          f"{rounds} turns):")  # fmt: skip
    for sync_always, label, key in ((True, "sync always", "fsync"), (False, "default", "default")):
        rates = trio.run(append_rates, sync_always, seconds, rounds)
        cells = "   ".join(f"K={k}: {r:6.0f}" for k, r in rates.items())
        print(f"     {label:12} {cells}   (K={STREAM_COUNTS[-1]} / K=1: "
              f"{rates[STREAM_COUNTS[-1]] / rates[1]:.2f}x)")  # fmt: skip
        for k, r in rates.items():
            figures[f"spread_{key}_k{k}_appends_per_s"] = round(r, 0)
    print(f"  3. synthetic runs ({agent.BURST_RUNS} at once, fenced appends only, laid out as an "
          f"agent run's writes), runs/s, median of {rounds} turns:")  # fmt: skip
    chains = [
        Chain(RUN_CHAIN),
        Chain(RUN_CHAIN, JOURNAL_SHARDS),
        *(Chain(shorter(RUN_CHAIN, n)) for n in SHORTER_CHAINS),
    ]
    fsync = trio.run(chain_rates, True, chains, rounds)
    default = trio.run(chain_rates, False, chains[:1], rounds)
    n = len(RUN_CHAIN)
    cells = "; ".join(
        f"{len(c.writes)} writes {r:4.0f}" for c, r in zip(chains[2:], fsync[2:], strict=True)
    )
    gain = fsync[1] / fsync[0]
    print(f"     sync always  {n} writes: journal in 1 stream {fsync[0]:4.0f}, in "
          f"{JOURNAL_SHARDS} streams {fsync[1]:4.0f} ({gain:.2f}x); {cells}")  # fmt: skip
    print(f"     default      {n} writes: journal in 1 stream {default[0]:4.0f}")
    figures[f"spread_chain_fsync_{n}_runs_per_s"] = round(fsync[0], 0)
    figures[f"spread_chain_fsync_{n}_sharded_runs_per_s"] = round(fsync[1], 0)
    for c, r in zip(chains[2:], fsync[2:], strict=True):
        figures[f"spread_chain_fsync_{len(c.writes)}_runs_per_s"] = round(r, 0)
    figures[f"spread_chain_default_{n}_runs_per_s"] = round(default[0], 0)
    print(f"  (load {_load()})")
    return figures
