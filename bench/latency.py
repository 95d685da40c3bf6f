"""Where a scripted agent run's time goes (issue 12 goal 1): each waited step, timed.

Each side's transport is wrapped in :class:`TimingTransport`, which notes the start and end of
every call that waits for the server (and, for a fetch, when its deliveries arrived). Over
sequential runs of the headline script (and of the script writing each record alone), the
steps of one run are laid out in time, from ``start_run`` to the moment the client sees the
finished snapshot, and summed per kind (journal publish, history publish, KV CAS / create,
task publish, purge, fetch: from the publish that stored the delivered message to the fetch's
return). What the steps do not cover is the gap: this process's CPU on the critical path and
the server's work between an ack and the next request. The raw floors of the same server are
printed beside: a fenced publish on one subject, and a chain alternating the streams the way a
run does (bench/spread.py part 3 does the same for 50 runs at once).

On demand: ``just bench latency`` (``--quick`` for a shorter one); not part of the full bench.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import attrs
import trio

from dagnats_trio.testing import expected_answer
from dagnats_trio.transport import Delivery, Feed, StreamSpec, Transport, open_nats_transport

from . import agent
from ._stack import Stack, open_stack, percentile

#: Sequential runs of each script that are laid out (after the warm-up).
RUNS = 300
RUNS_QUICK = 60
WARMUP_RUNS = 10
#: Calls that wait for a server answer and are timed (fetch is timed to its deliveries).
TIMED_CALLS = frozenset(
    {
        "publish",
        "publish_batch",
        "kv_create",
        "kv_update",
        "kv_put",
        "kv_delete",
        "kv_get",
        "get_last_msg",
        "get_last_msgs",
        "get_msg",
        "get_batch",
        "read_subject",
        "purge_subject",
        "request",
        "fetch",
    }
)
#: Pairs of runs timed settled and back to back (see :func:`_back_to_back`).
PAIRS = 150
PAIRS_QUICK = 30
#: The synthetic chains: fenced publishes of this size, this many per chain, median over them.
CHAIN_BODY_BYTES = 300
CHAIN_WRITES = 2000
CHAIN_STREAMS = ("LAT_A", "LAT_B", "LAT_C", "LAT_D")


@attrs.frozen
class Step:
    """One timed call: which side made it, its kind, when it started and ended
    (``time.perf_counter`` seconds)."""

    side: str
    kind: str
    start: float
    end: float


def _kind(name: str, args: tuple[Any, ...]) -> str:
    """A call's kind, named by what it writes or reads (the first argument: subject, stream or
    bucket)."""
    first = str(args[0]) if args else ""
    if name in {"publish", "publish_batch"}:
        target = first.split(".", 1)[0] if name == "publish" else "batch"
        return f"{name} {target}"
    return f"{name} {first}"


class _TimedFeed:
    """A feed whose fetches that returned deliveries are timed steps (``fetch {stream}``)."""

    def __init__(self, inner: Feed, stream: str, side: str, steps: list[Step]) -> None:
        self._inner = inner
        self._stream = stream
        self._side = side
        self._steps = steps

    async def fetch(self, timeout_s: float) -> list[Delivery]:
        start = time.perf_counter()
        result = await self._inner.fetch(timeout_s)
        if result:  # an empty fetch (its timeout) is idle, not a step of a run
            self._steps.append(
                Step(self._side, f"fetch {self._stream}", start, time.perf_counter())
            )
        return result


class TimingTransport:
    """Passes every call on; notes the time of each call that waits for the server."""

    def __init__(self, inner: Transport, side: str, steps: list[Step]) -> None:
        self._inner = inner
        self._side = side
        self._steps = steps

    @property
    def inner(self) -> Transport:
        return self._inner

    @asynccontextmanager
    async def consume(self, stream: str, durable: str, batch: int) -> AsyncIterator[Feed]:
        """The inner feed, its fetches timed as a fetch of the transport is."""
        async with self._inner.consume(stream, durable, batch) as feed:
            yield _TimedFeed(feed, stream, self._side, self._steps)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in TIMED_CALLS:
            return attr
        side, steps, call = self._side, self._steps, attr

        async def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            result = await call(*args, **kwargs)
            end = time.perf_counter()
            if name == "fetch":
                if result:  # an empty fetch (its timeout) is idle, not a step of a run
                    steps.append(Step(side, f"fetch {args[0]}", start, end))
            else:
                steps.append(Step(side, _kind(name, args), start, end))
            return result

        setattr(self, name, timed)
        return timed


@attrs.frozen
class RunLayout:
    """One run's steps (clipped to the run) and its wall time, seconds."""

    wall: float
    steps: tuple[Step, ...]


def steps_per_run(layouts: list[RunLayout]) -> dict[str, float]:
    """Timed steps per run, by ``"side kind"`` (fetches: those that returned deliveries)."""
    counts: dict[str, int] = defaultdict(int)
    for lay in layouts:
        for s in lay.steps:
            counts[f"{s.side} {s.kind}"] += 1
    return {key: n / len(layouts) for key, n in sorted(counts.items())}


def _summary(layouts: list[RunLayout]) -> list[str]:
    """Per kind: count per run, p50 of one call (us), total per run (ms, the calls' time, a
    fetch's from the last write before it to its return); and the gap."""
    per_kind: dict[str, list[float]] = defaultdict(list)
    by_position: dict[tuple[str, int], list[float]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    walls, covered = [], []
    for lay in layouts:
        walls.append(lay.wall)
        busy = 0.0
        last_end = min((s.start for s in lay.steps), default=0.0)
        ordered = sorted(lay.steps, key=lambda s: s.end)
        seen: dict[str, int] = defaultdict(int)
        for s in ordered:
            key = f"{s.side:6} {s.kind}"
            counts[key] += 1
            seen[key] += 1
            if s.kind.startswith("fetch"):
                # A fetch waits idle until a message is stored: its cost on the path is from
                # the last write's end before its return (the delivery), not from its start.
                writes = [o.end for o in ordered if o is not s and o.end <= s.end]
                begin = max(max(writes, default=s.start), s.start)
            else:
                begin = s.start
            per_kind[key].append(s.end - begin)
            by_position[key, seen[key]].append(s.end - begin)
            # Time covered by some waited step (the union of intervals, in end order).
            lo = max(begin, last_end)
            if s.end > lo:
                busy += s.end - lo
            last_end = max(last_end, s.end)
        covered.append(busy)
    n = len(layouts)
    lines = [f"    {'side   kind':44} {'per run':>7} {'p50 us':>8} {'ms/run':>7}"]
    for key in sorted(per_kind, key=lambda k: -sum(per_kind[k])):
        vals = per_kind[key]
        lines.append(
            f"    {key:44} {counts[key] / n:7.2f} {statistics.median(vals) * 1e6:8.0f} "
            f"{sum(vals) / n * 1000:7.2f}"
        )
    lines.append("    p50 us by position in the run (1st, 2nd, ... call of its kind):")
    for key in sorted(per_kind, key=lambda k: -sum(per_kind[k])):
        cells = [
            f"{statistics.median(by_position[key, i]) * 1e6:4.0f}"
            for i in range(1, 1 + max(i for k, i in by_position if k == key))
            if len(by_position[key, i]) * 2 >= n
        ]
        if len(cells) > 1:
            lines.append(f"      {key:42} {' '.join(cells)}")
    wall_p50 = percentile([w * 1000 for w in walls], 50)
    cov_p50 = percentile([c * 1000 for c in covered], 50)
    lines.append(
        f"    run wall p50 {wall_p50:.2f} ms; covered by a waited step p50 {cov_p50:.2f} ms; "
        f"gap (CPU, scheduling, the watch's delivery) p50 "
        f"{percentile([(w - c) * 1000 for w, c in zip(walls, covered, strict=True)], 50):.2f} ms"
    )
    return lines


def _on_the_path(step: Step, start: float, end: float) -> bool:
    """Whether ``step`` overlaps the time from a run's start to the client seeing it finished,
    and is not one of the run end's purges (off the path: ``agent.OFF_PATH_PER_RUN``)."""
    return step.end >= start and step.start <= end and not step.kind.startswith("purge_subject")


async def lay_out(stack: Stack, steps: list[Step], workflow: str, runs: int) -> list[RunLayout]:
    """``runs`` sequential runs of ``workflow`` after a warm-up, each laid out (the engine
    settled between runs, so a run's off-path writes end before the next starts)."""
    answer = expected_answer()
    for _ in range(WARMUP_RUNS):
        await stack.run(workflow, {"task": "deploy"})
    await stack.wait_settled()
    out: list[RunLayout] = []
    for _ in range(runs):
        steps.clear()
        start = time.perf_counter()
        snap = await stack.run(workflow, {"task": "deploy"})
        end = time.perf_counter()
        if snap.outputs().get("agent") != answer:
            raise RuntimeError(f"wrong answer {snap.outputs()!r}")
        await stack.wait_settled()
        # Steps that overlap the run, but the run end's purges: they are off the path, sent
        # once the finished snapshot is saved, and may be in flight when the client sees it.
        # A fetch begins before the run (it waits for the delivery); a step may end after the
        # client saw the run finished: the worker's last event publish, whose ack the worker
        # can read after the engine has already acted on the event (taken by their ends alone,
        # one run in three missed it on a loaded machine).
        out.append(RunLayout(end - start, tuple(s for s in steps if _on_the_path(s, start, end))))
    return out


async def _back_to_back(stack: Stack, workflow: str, pairs: int) -> tuple[float, float]:
    """p50 ms of a run started once the engine settled (the run before it has done its run-end
    purges) and of a run started as soon as the one before it finished (its purges in flight),
    taken in turn: what the off-path writes of one run cost the next."""
    settled: list[float] = []
    back: list[float] = []
    payload = {"task": "deploy"}
    for _ in range(pairs):
        for into, settle in ((settled, True), (back, False)):
            await stack.run(workflow, payload)
            if settle:
                await stack.wait_settled()
            start = time.perf_counter()
            await stack.run(workflow, payload)
            into.append((time.perf_counter() - start) * 1000)
            await stack.wait_settled()
    return percentile(settled, 50), percentile(back, 50)


async def _chain_us(tp: Transport, streams: tuple[str, ...]) -> float:
    """Median us of a fenced publish in a chain visiting ``streams`` in turn (each on a subject
    of its own, fenced on its last sequence, as a journal append is)."""
    for s in streams:
        await tp.ensure_stream(StreamSpec(s, (f"{s.lower()}.>",)))
    last: dict[str, int] = {}
    body = b"x" * CHAIN_BODY_BYTES
    samples = []
    for i in range(CHAIN_WRITES):
        s = streams[i % len(streams)]
        subject = f"{s.lower()}.k"
        t0 = time.perf_counter()
        last[s] = await tp.publish(subject, body, expected_last_subject_seq=last.get(s, 0))
        samples.append(time.perf_counter() - t0)
    for s in streams:
        await tp.request(f"$JS.API.STREAM.PURGE.{s}", b"")
    return statistics.median(samples) * 1e6


@asynccontextmanager
async def open_timed_stack(*, sync_always: bool) -> AsyncIterator[tuple[Stack, list[Step]]]:
    """The agent bench's stack (both scripts registered), each side's transport timed into the
    list handed back beside it."""
    steps: list[Step] = []

    @asynccontextmanager
    async def opener(url: str, *, name: str) -> AsyncIterator[Transport]:
        async with open_nats_transport(url, name=name) as raw:
            timed = TimingTransport(raw, name.removeprefix("bench-"), steps)
            yield cast(Transport, timed)

    handlers, workflows = agent._handlers_and_workflows((agent.HEADLINE, agent.ALONE))
    async with open_stack(
        sync_always=sync_always, handlers=handlers, workflows=workflows, open_transport=opener
    ) as stack:
        yield stack, steps


async def _measure(sync_always: bool, runs: int, pairs: int) -> list[str]:
    lines: list[str] = []
    async with open_timed_stack(sync_always=sync_always) as (stack, steps):
        chains = [
            ("one stream", CHAIN_STREAMS[:1]),
            ("two streams alternating", CHAIN_STREAMS[:2]),
            ("four streams in turn", CHAIN_STREAMS),
        ]
        for label, streams in chains:
            us = await _chain_us(stack.worker_tp, streams)
            lines.append(f"    synthetic chain of fenced {CHAIN_BODY_BYTES} B publishes, "
                         f"{label}: p50 {us:.0f} us per publish")  # fmt: skip
        for variant in (agent.HEADLINE, agent.ALONE):
            layouts = await lay_out(stack, steps, variant.workflow, runs)
            lines.append(f"   {variant.workflow}: {runs} sequential runs")
            lines += _summary(layouts)
        settled, back = await _back_to_back(stack, agent.HEADLINE.workflow, pairs)
        lines.append(f"   {agent.HEADLINE.workflow}, {pairs} pairs in turn: p50 {settled:.2f} ms "
                     f"started once the run before settled, {back:.2f} ms started as soon as "
                     f"it finished (its run-end purges in flight)")  # fmt: skip
    return lines


def run(*, quick: bool = False) -> dict[str, float]:
    runs, pairs = (RUNS_QUICK, PAIRS_QUICK) if quick else (RUNS, PAIRS)
    print("== latency: the scripted agent's waited steps, timed per kind (sequential runs)")
    for sync_always, label in ((True, "sync_interval always"), (False, "sync_interval default")):
        print(f"  single node, {label}:")
        for line in trio.run(_measure, sync_always, runs, pairs):
            print(line)
    return {}
