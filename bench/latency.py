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

import bisect
import statistics
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast, final

import attrs
import trio

from dagnats_trio.protocol import RECORD_TYPE_HEADER
from dagnats_trio.testing import expected_answer
from dagnats_trio.transport import (
    Delivery,
    Feed,
    Puller,
    StreamSpec,
    Transport,
    open_nats_transport,
)

from . import agent
from ._stack import Stack, open_stack, percentile
from .steps import short_task_name

#: Sequential runs of each script that are laid out (after the warm-up).
RUNS = 300
RUNS_QUICK = 60
WARMUP_RUNS = 10
#: Sequential runs (after the warm-up) under the instrument that charges each gap to the tasks
#: that ran in it (:func:`tasks_in_gaps`), apart from the runs whose steps are timed.
RUNS_ATTRIBUTED = 100
RUNS_ATTRIBUTED_QUICK = 30
#: Calls that wait for a server answer and are timed (fetch is timed to its deliveries).
TIMED_CALLS = frozenset(
    {
        "publish",
        "publish_many",
        "kv_get_and_publish_many",
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
        "purge_subjects",
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
    (``time.perf_counter`` seconds), and for a journal append the records it stores (its
    ``Dagnats-Record`` header: ``claim``, ``model+tool.intent``, ...; empty for any other)."""

    side: str
    kind: str
    start: float
    end: float
    records: str = ""

    @property
    def name(self) -> str:
        """``side kind``, and the records in brackets when it stores some (the gap table's
        name of the step: which append a transition starts or ends at)."""
        name = f"{self.side} {self.kind}"
        return f"{name} [{self.records}]" if self.records else name


def _kind(name: str, args: tuple[Any, ...]) -> str:
    """A call's kind, named by what it writes or reads (the first argument: subject, stream or
    bucket; for ``publish_many``, its first message's subject; for ``purge_subjects``, its
    first purge's stream)."""
    if name == "publish_many":
        return f"{name} {args[0][0].subject.split('.', 1)[0]}"
    if name == "purge_subjects":
        return f"{name} {args[0][0].stream if args[0] else ''}"
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


class _TimedPuller:
    """A worker's puller whose fetches that returned deliveries are timed steps, as a feed's;
    with an ``on_delivery``, each delivery handed to it is such a step, from the start of the
    fetch it came during to when it was handed."""

    def __init__(
        self,
        stream: str,
        side: str,
        steps: list[Step],
        on_delivery: Callable[[Delivery], None] | None,
    ) -> None:
        self._inner: Puller
        self._feed: _TimedFeed
        self._stream = stream
        self._side = side
        self._steps = steps
        self._on_delivery = on_delivery
        self._fetch_started = time.perf_counter()

    def attach(self, inner: Puller) -> None:
        self._inner = inner
        self._feed = _TimedFeed(inner, self._stream, self._side, self._steps)

    def handed(self, delivery: Delivery) -> None:
        assert self._on_delivery is not None
        self._steps.append(
            Step(self._side, f"fetch {self._stream}", self._fetch_started, time.perf_counter())
        )
        self._on_delivery(delivery)

    @property
    def asked(self) -> int:
        return self._inner.asked

    async def ask(self, n: int) -> None:
        await self._inner.ask(n)

    async def fetch(self, timeout_s: float) -> list[Delivery]:
        self._fetch_started = time.perf_counter()
        return await self._feed.fetch(timeout_s)

    def ack_next(self, delivery: Delivery) -> bool:
        return self._inner.ack_next(delivery)


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

    @asynccontextmanager
    async def pull(
        self,
        stream: str,
        durable: str,
        *,
        expires_s: float,
        on_release: Callable[[int], None],
        on_delivery: Callable[[Delivery], None] | None = None,
    ) -> AsyncIterator[Puller]:
        """The inner puller, its fetches (or its deliveries handed) timed as a feed's are."""
        timed = _TimedPuller(stream, self._side, self._steps, on_delivery)
        async with self._inner.pull(
            stream,
            durable,
            expires_s=expires_s,
            on_release=on_release,
            on_delivery=None if on_delivery is None else timed.handed,
        ) as puller:
            timed.attach(puller)
            yield timed

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
                headers = kwargs.get("headers") or {}
                records = headers.get(RECORD_TYPE_HEADER, "") if name == "publish" else ""
                steps.append(Step(side, _kind(name, args), start, end, records))
            return result

        setattr(self, name, timed)
        return timed


@attrs.frozen
class RunLayout:
    """One run's steps (clipped to the run), its start (``time.perf_counter`` seconds) and
    its wall time, seconds."""

    start: float
    wall: float
    steps: tuple[Step, ...]


def steps_per_run(layouts: list[RunLayout]) -> dict[str, float]:
    """Timed steps per run, by ``"side kind"`` (fetches: those that returned deliveries)."""
    counts: dict[str, int] = defaultdict(int)
    for lay in layouts:
        for s in lay.steps:
            counts[f"{s.side} {s.kind}"] += 1
    return {key: n / len(layouts) for key, n in sorted(counts.items())}


#: Labels of a run's two ends in the gap table (see :func:`gaps_by_transition`).
RUN_START = "start_run called"
RUN_SEEN = "client saw it finished"
#: Transitions printed in the gap table, the largest total first.
GAP_TOP_TRANSITIONS = 14


def _begin(step: Step, ordered: list[Step]) -> float:
    """When a step starts costing the run: its start, but for a fetch, which waits idle until
    a message is stored, the end of the last write before its return (its delivery)."""
    if not step.kind.startswith("fetch"):
        return step.start
    writes = [o.end for o in ordered if o is not step and o.end <= step.end]
    return max(max(writes, default=step.start), step.start)


@attrs.frozen
class Gap:
    """Time of a run covered by no waited step: ``transition`` names the step that ended
    before it and the step that began after it (``"a -> b"``); ``start`` and ``end`` are
    ``time.perf_counter`` seconds."""

    transition: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def gaps_by_transition(layout: RunLayout) -> list[Gap]:
    """The run's time (from ``start_run`` to the client seeing it finished) covered by no
    waited step, cut at each uncovered interval and named by the transition it sits in: from
    the step that ended before it to the step whose beginning closed it, by
    :attr:`Step.name` (a fetch begins at its delivery: :func:`_begin`). The step before is the
    last to end, before the gap, of the side that closed it (what that side waited on: the
    claim's answer before the model's append, though the engine read its own answer later),
    else the last to end of any side; the first gap is named from :data:`RUN_START`, the last
    (the finished save's delivery to the client's watch, and the client's wake-up) to
    :data:`RUN_SEEN`. Steps are clipped to the run, so the gaps sum to the run's wall time less
    the time its steps cover (:func:`covered_s`)."""
    start, end = layout.start, layout.start + layout.wall
    ordered = sorted(layout.steps, key=lambda s: s.end)
    spans = sorted(((_begin(s, ordered), s.end, i) for i, s in enumerate(ordered)))
    out: list[Gap] = []
    last_end, last_name = start, RUN_START
    for begin, stop, i in spans:
        if begin >= end:
            break
        step = ordered[i]
        if begin > last_end:
            before = [o for o in ordered if o.side == step.side and o.end <= begin]
            opened = before[-1].name if before else last_name
            out.append(Gap(f"{opened} -> {step.name}", last_end, begin))
        if stop > last_end:
            last_end, last_name = min(stop, end), step.name
    if end > last_end:
        out.append(Gap(f"{last_name} -> {RUN_SEEN}", last_end, end))
    return out


def covered_s(layout: RunLayout) -> float:
    """Seconds of the run covered by some waited step (the union of their intervals, clipped
    to the run): its wall time less its gaps."""
    return layout.wall - sum(gap.seconds for gap in gaps_by_transition(layout))


@final
class TaskSteps(trio.abc.Instrument):
    """Every task step while installed: the task's name, when it began and ended
    (``time.perf_counter``), so a gap's time can be charged to the tasks that ran in it."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, float, float]] = []
        self._began: dict[trio.lowlevel.Task, float] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began[task] = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        began = self._began.pop(task, None)
        if began is not None:  # a step under way when the instrument was added is left out
            self.steps.append((task.name, began, time.perf_counter()))


def gap_by_task(layouts: list[RunLayout], steps: TaskSteps) -> dict[str, dict[str, float]]:
    """Per transition, the seconds per run each task (``bench.steps.short_task_name``) ran
    inside its gaps; what no task ran in (``(scheduler, I/O wait)``) is the rest."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    ordered = sorted(steps.steps, key=lambda s: s[1])
    starts = [s[1] for s in ordered]
    for lay in layouts:
        for gap in gaps_by_transition(lay):
            ran = 0.0
            # Steps are short: those that began up to a second before the gap may overlap it.
            for name, began, ended in ordered[bisect.bisect_left(starts, gap.start - 1.0) :]:
                if began >= gap.end:
                    break
                inside = min(ended, gap.end) - max(began, gap.start)
                if inside > 0:
                    out[gap.transition][short_task_name(name)] += inside
                    ran += inside
            out[gap.transition][NO_TASK] += max(0.0, gap.seconds - ran)
    n = len(layouts)
    return {k: {t: v / n for t, v in by.items()} for k, by in out.items()}


#: What a gap's time not spent in any task step is charged to (Trio's run loop between steps,
#: the wait for the socket to be readable).
NO_TASK = "(scheduler, I/O wait)"
#: Width of a transition's name in the gap table (the longest, tool intent -> result, fits).
GAP_NAME_CHARS = 92
#: Tasks shown per transition in the table of who ran in the gaps.
GAP_TOP_TASKS = 4


def _gap_table(layouts: list[RunLayout], by_task: dict[str, dict[str, float]]) -> list[str]:
    """Per transition: how often it is a gap per run, p50 us of one, ms per run (the sum); and
    beneath, the tasks that ran in it (us per run), when ``by_task`` has them."""
    per: dict[str, list[float]] = defaultdict(list)
    for lay in layouts:
        for gap in gaps_by_transition(lay):
            per[gap.transition].append(gap.seconds)
    n = len(layouts)
    lines = ["    gap by transition (time no waited step covers: the step that ended -> the next)",
             f"    {'':{GAP_NAME_CHARS}} {'per run':>7} {'p50 us':>7} {'ms/run':>7}"]  # fmt: skip
    ranked = sorted(per, key=lambda k: -sum(per[k]))
    for name in ranked[:GAP_TOP_TRANSITIONS]:
        vals = per[name]
        p50_us = statistics.median(vals) * 1e6
        lines.append(f"    {name:{GAP_NAME_CHARS}} {len(vals) / n:7.2f} {p50_us:7.0f} "
                     f"{sum(vals) / n * 1000:7.2f}")  # fmt: skip
        tasks = by_task.get(name, {})
        shown = [t for t in sorted(tasks, key=lambda t: -tasks[t]) if tasks[t] >= 1e-6]
        for task in shown[:GAP_TOP_TASKS]:
            lines.append(f"        {tasks[task] * 1e6:6.0f} us/run in {task}")
    others = len(ranked) - len(ranked[:GAP_TOP_TRANSITIONS])
    rest = sum(sum(per[k]) for k in ranked[GAP_TOP_TRANSITIONS:]) / n * 1000
    lines.append(
        f"    {f'({others} other transitions)':{GAP_NAME_CHARS}} {'':7} {'':7} {rest:7.2f}"
    )
    return lines


def _summary(layouts: list[RunLayout]) -> list[str]:
    """Per kind: count per run, p50 of one call (us), total per run (ms, the calls' time, a
    fetch's from the last write before it to its return); and the gap."""
    per_kind: dict[str, list[float]] = defaultdict(list)
    by_position: dict[tuple[str, int], list[float]] = defaultdict(list)
    counts: dict[str, int] = defaultdict(int)
    walls = [lay.wall for lay in layouts]
    covered = [covered_s(lay) for lay in layouts]
    for lay in layouts:
        ordered = sorted(lay.steps, key=lambda s: s.end)
        seen: dict[str, int] = defaultdict(int)
        for s in ordered:
            key = f"{s.side:6} {s.kind}"
            counts[key] += 1
            seen[key] += 1
            begin = _begin(s, ordered)
            per_kind[key].append(s.end - begin)
            by_position[key, seen[key]].append(s.end - begin)
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


def waited_in_a_row(steps: list[Step]) -> int:
    """How many of ``steps`` were waited on one after another: the longest chain of steps each
    started after the one before it ended (steps sent together count once)."""
    chain, last_end = 0, float("-inf")
    for s in sorted(steps, key=lambda s: s.end):
        if s.start >= last_end:
            chain, last_end = chain + 1, s.end
    return chain


#: The client's call that publishes a run's ``workflow.started``: alone, or with the first task.
STARTED_PUBLISHES = ("publish history", "publish_many task")


def client_start_line(layouts: list[RunLayout]) -> str:
    """The client's start of a run (``Service.start_run``): from its first request to the
    answer of its ``workflow.started`` publish (with the first task, when the service
    dispatched it), and how many of its requests wait in a row."""
    spans: list[float] = []
    chains: list[int] = []
    for lay in layouts:
        client = sorted((s for s in lay.steps if s.side == "client"), key=lambda s: s.start)
        ends = [i for i, s in enumerate(client) if s.kind in STARTED_PUBLISHES]
        if not ends:
            continue
        start = client[: ends[0] + 1]
        spans.append((start[-1].end - start[0].start) * 1e6)
        chains.append(waited_in_a_row(start))
    if not spans:
        return "    client start: not seen"
    return (
        f"    client start p50 {percentile(spans, 50):.0f} us from its first request to the "
        f"workflow.started ack; requests waited in a row p50 {statistics.median(chains):.0f}"
    )


def _on_the_path(step: Step, start: float, end: float) -> bool:
    """Whether ``step`` overlaps the time from a run's start to the client seeing it finished,
    and is not one of the run end's purges (off the path: ``agent.OFF_PATH_PER_RUN``)."""
    return step.end >= start and step.start <= end and not step.kind.startswith("purge_subject")


#: The engine's read of a run's snapshot: in a crash-free run only for a start the service
#: dispatched whose snapshot it could not derive from the event (an older service's event,
#: ``engine._store.started_with``), whose later events it decides on the copy it kept.
_START_READ = "kv_get workflow_runs"


def _start_handling(steps: list[Step]) -> set[int]:
    """Indices in ``steps`` of the engine's handling of a start the service dispatched: the
    fetch that delivered its ``workflow.started`` and the first task repeated (a duplicate),
    with no save between them (the snapshot derived from the event, or read: then the read
    too). Off the path (``agent.OFF_PATH_PER_RUN``): the worker has had the task since the
    start answered, and works on it meanwhile. Every later task follows a save."""
    engine = sorted(
        (i for i, s in enumerate(steps) if s.side == "engine"), key=lambda i: steps[i].start
    )
    off: set[int] = set()
    for n, i in enumerate(engine):
        if steps[i].kind != "publish task":
            continue
        before = engine[:n]
        read = [before.pop()] if before and steps[before[-1]].kind == _START_READ else []
        if before and steps[before[-1]].kind.startswith("fetch"):
            off.update([i, before[-1], *read])
    return off


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
        # So are the engine's handling of the start (the service dispatched its first task).
        off = _start_handling(steps)
        on = [s for i, s in enumerate(steps) if i not in off and _on_the_path(s, start, end)]
        out.append(RunLayout(start, end - start, tuple(on)))
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


async def tasks_in_gaps(
    stack: Stack, steps: list[Step], workflow: str, runs: int
) -> dict[str, dict[str, float]]:
    """:func:`gap_by_task` over ``runs`` runs laid out under a :class:`TaskSteps` instrument
    (installed only for them: it costs every task step two clock reads)."""
    recorder = TaskSteps()
    trio.lowlevel.add_instrument(recorder)
    try:
        layouts = await lay_out(stack, steps, workflow, runs)
    finally:
        trio.lowlevel.remove_instrument(recorder)
    return gap_by_task(layouts, recorder)


async def _measure(sync_always: bool, runs: int, pairs: int, attributed: int) -> list[str]:
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
            lines.append(client_start_line(layouts))
            by_task = await tasks_in_gaps(stack, steps, variant.workflow, attributed)
            lines.append(f"    (the tasks that ran in the gaps: {attributed} more runs "
                         "under a Trio instrument, which slows them a little)")  # fmt: skip
            lines += _gap_table(layouts, by_task)
        settled, back = await _back_to_back(stack, agent.HEADLINE.workflow, pairs)
        lines.append(f"   {agent.HEADLINE.workflow}, {pairs} pairs in turn: p50 {settled:.2f} ms "
                     f"started once the run before settled, {back:.2f} ms started as soon as "
                     f"it finished (its run-end purges in flight)")  # fmt: skip
    return lines


def run(*, quick: bool = False) -> dict[str, float]:
    runs, pairs = (RUNS_QUICK, PAIRS_QUICK) if quick else (RUNS, PAIRS)
    attributed = RUNS_ATTRIBUTED_QUICK if quick else RUNS_ATTRIBUTED
    print("== latency: the scripted agent's waited steps, timed per kind (sequential runs)")
    for sync_always, label in ((True, "sync_interval always"), (False, "sync_interval default")):
        print(f"  single node, {label}:")
        for line in trio.run(_measure, sync_always, runs, pairs, attributed):
            print(line)
    return {}
