"""``just bench --profile``: where the scripted agent's CPU goes, per component.

The same stack and run as the ``agent`` section (single node, fsync on every write), one
process holding engine, worker and client. First ``PROFILE_PLAIN_RUNS`` runs without the
profiler give the CPU per run (``time.process_time``); then ``PROFILE_RUNS`` runs under
``cProfile``, timed by the process's CPU clock (a wait in epoll is not CPU), give where it
goes. Each function's own time (not its callees') is charged to the component its module
belongs to (:data:`COMPONENTS`); a shared helper (a C function such as ``isinstance`` or a
socket send, attrs' ``evolve``) is charged to the component of the code that called it. The
profiler slows Python calls more than C calls, so the shares are an estimate; the ms column is
the share times the CPU per run measured unprofiled. Last, ``PROFILE_STEP_RUNS`` runs under a
Trio instrument (``bench.steps``) count the scheduler's passes and each task's steps per run.
The unprofiled runs also count the garbage collector's collections and CPU (``bench.gc_count``).
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time
from collections.abc import Callable
from typing import Any, Final

import attrs
import trio

from dagnats_trio.testing import AGENT_TASK, ScriptedAgent, agent_workflow, expected_answer

from ._stack import Stack, open_stack
from .agent import HEADLINE
from .cpu_floor import cpu_floor_line
from .gc_count import GcCounter, print_gc
from .steps import StepCounter, print_steps

PROFILE_WORKFLOW: Final = "bench-agent-profile"
PROFILE_WARMUP_RUNS: Final = 10
PROFILE_PLAIN_RUNS: Final = 200
PROFILE_RUNS: Final = 200
PROFILE_PLAIN_RUNS_QUICK: Final = 40
PROFILE_RUNS_QUICK: Final = 40
#: Runs counted by a Trio instrument (task steps per task, scheduler passes) after the
#: profiled ones; counts, so a few runs suffice.
PROFILE_STEP_RUNS: Final = 50
#: Tasks printed, the busiest first.
PROFILE_TOP_TASKS: Final = 15
#: Entries printed by own time and by cumulative time.
PROFILE_TOP_ENTRIES: Final = 25

#: Component -> path fragments of the modules charged to it, first match wins.
COMPONENTS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    ("codec (records, events, snapshots: cattrs/json)", (
        "dagnats_trio/protocol/", "/cattrs/", "<cattrs generated", "/json/",
    )),
    ("nats client (parser, encoder, connection)", ("dagnats_trio/nats/",)),
    ("transport (jetstream requests, kv)", ("dagnats_trio/transport/",)),
    ("engine (snapshot handling, advance)", ("dagnats_trio/engine/", "dagnats_trio/dag/")),
    ("journal (claim, replay, appends)", ("dagnats_trio/journal/",)),
    ("worker (deliveries, heartbeats)", ("dagnats_trio/worker/",)),
    ("api service + bench driver", (
        "dagnats_trio/api/", "dagnats_trio/testing/", "/bench/",
    )),
    ("trio scheduling and socket I/O", (
        "/trio/", "/outcome/", "/sniffio/", "selectors.py", "/socket.py",
    )),
)  # fmt: skip
OTHER: Final = "other (stdlib, logging, ...)"
#: Helpers everyone calls (C functions have the filename "~"): their own time is charged to
#: the component of their callers, as the callers' shares of it.
SHARED_HELPERS: Final = ("/attr/", "/attrs/", "contextlib.py", "functools.py", "enum.py")
#: ``<attrs generated methods pkg.mod.Class>``: charged by the module of the class it names.
_ATTRS_GENERATED: Final = "<attrs generated"


def component_of(filename: str) -> str:
    """The component a module's file belongs to (``OTHER`` when none claims it)."""
    path = filename.replace("\\", "/")
    if path.startswith(_ATTRS_GENERATED):
        path = "/" + path.rstrip(">").split(" ")[-1].replace(".", "/")
    for name, fragments in COMPONENTS:
        if any(fragment in path for fragment in fragments):
            return name
    return OTHER


#: pstats' key of a function: (filename, line, name); C functions have filename "~".
FuncKey = tuple[str, int, str]


def _is_shared(filename: str) -> bool:
    return filename == "~" or any(helper in filename for helper in SHARED_HELPERS)


def own_time_by_component(stats: pstats.Stats) -> dict[str, float]:
    """Seconds of own time per component; a shared helper's time (a C function, attrs) goes to
    its callers' component, split as the callers' shares of its time (one level up; a helper
    called only by helpers is charged to ``OTHER``)."""
    raw: dict[FuncKey, Any] = stats.stats  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    for key, (_cc, _nc, tt, _ct, callers) in raw.items():
        filename = key[0]
        if not _is_shared(filename):
            name = component_of(filename)
            out[name] = out.get(name, 0.0) + tt
            continue
        shares = {c: v[3] for c, v in callers.items() if not _is_shared(c[0])}
        total = sum(shares.values())
        if total <= 0:
            out[OTHER] = out.get(OTHER, 0.0) + tt
            continue
        for caller, share in shares.items():
            name = component_of(caller[0])
            out[name] = out.get(name, 0.0) + tt * share / total
    return out


async def _runs(stack: Stack, n: int) -> None:
    answer = expected_answer()
    for _ in range(n):
        snap = await stack.run(PROFILE_WORKFLOW, {"task": "deploy"})
        if snap.outputs().get("agent") != answer:
            raise RuntimeError(f"wrong answer {snap.outputs()!r} (status {snap.status.value})")


@attrs.frozen
class _Measured:
    """What :func:`_measure` found: CPU per run unprofiled and under cProfile, the profile, and
    the CPU floor (per raw round trip, and the round trips a run counted)."""

    cpu_ms: float
    stats: pstats.Stats
    profiled_cpu_ms: float
    cpu_floor_us: float
    round_trips_per_run: float


async def _measure(
    plain_runs: int, profiled_runs: int, counter: StepCounter, gc_counter: GcCounter
) -> _Measured:
    agent = ScriptedAgent(paired=HEADLINE.paired)
    async with open_stack(
        sync_always=True,
        handlers={AGENT_TASK: agent.turn},
        workflows=[agent_workflow(PROFILE_WORKFLOW)],
    ) as stack:
        await _runs(stack, PROFILE_WARMUP_RUNS)
        cpu_floor_us = await stack.cpu_floor_us()
        trips0 = stack.counts().total
        cpu0 = time.process_time()
        with gc_counter:  # the garbage collector's share of the unprofiled runs
            await _runs(stack, plain_runs)
        cpu_ms = (time.process_time() - cpu0) * 1000 / plain_runs
        round_trips = (stack.counts().total - trips0) / plain_runs
        # Timed by this process's CPU clock, not the wall clock: a wait in epoll or a
        # preemption by another process is not this process's CPU.
        profiler = cProfile.Profile(time.process_time)
        cpu1 = time.process_time()
        profiler.enable()
        try:
            await _runs(stack, profiled_runs)
        finally:
            profiler.disable()
        profiled_cpu_ms = (time.process_time() - cpu1) * 1000 / profiled_runs
        writes = stack.socket_writes()
        trio.lowlevel.add_instrument(counter)
        try:
            await _runs(stack, PROFILE_STEP_RUNS)
        finally:
            trio.lowlevel.remove_instrument(counter)
        counter.socket_writes = stack.socket_writes() - writes
        return _Measured(cpu_ms, pstats.Stats(profiler), profiled_cpu_ms, cpu_floor_us, round_trips)


def _print_top(stats: pstats.Stats, sort: str, title: str) -> None:
    buf = io.StringIO()
    stats.stream = buf  # type: ignore[attr-defined]
    stats.sort_stats(sort).print_stats(PROFILE_TOP_ENTRIES)
    lines = buf.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    print(f"  top {PROFILE_TOP_ENTRIES} by {title}:")
    for line in lines[start:]:
        if line.strip():
            print(f"    {line}")


def run(*, quick: bool = False) -> dict[str, float]:
    plain = PROFILE_PLAIN_RUNS_QUICK if quick else PROFILE_PLAIN_RUNS
    profiled = PROFILE_RUNS_QUICK if quick else PROFILE_RUNS
    print(f"== profile: scripted agent, single node, sync_interval always; {plain} runs "
          f"unprofiled, then {profiled} under cProfile")  # fmt: skip
    measure: Callable[..., Any] = _measure
    counter = StepCounter()
    gc_counter = GcCounter()
    measured: _Measured = trio.run(measure, plain, profiled, counter, gc_counter)
    cpu_ms, stats = measured.cpu_ms, measured.stats
    print(f"  CPU per run: {cpu_ms:.2f} ms unprofiled ({measured.profiled_cpu_ms:.2f} ms under "
          f"cProfile)")  # fmt: skip
    cpu_line, cpu_ratio = cpu_floor_line(
        cpu_ms, measured.cpu_floor_us, measured.round_trips_per_run
    )
    print(f"  {cpu_line}")
    # Function calls per run, Python and C: a count, not a time, so the machine's load does not
    # move it; it follows the work done where CPU time on a loaded machine is noisy.
    calls = stats.total_calls / profiled  # type: ignore[attr-defined]
    print(f"  function calls per run (load-independent): {calls:.0f}")
    by_component = own_time_by_component(stats)
    total = sum(by_component.values()) or 1.0
    figures: dict[str, float] = {
        "profile_cpu_ms_per_run": round(cpu_ms, 2),
        "profile_calls_per_run": round(calls),
        "profile_cpu_floor_us": round(measured.cpu_floor_us, 1),
        "profile_round_trips_per_run": round(measured.round_trips_per_run, 1),
        "profile_cpu_floor_ratio": round(cpu_ratio, 2),
    }
    print("  CPU per run by component (own time; C calls charged to their caller):")
    for name, seconds in sorted(by_component.items(), key=lambda kv: -kv[1]):
        share = seconds / total
        print(f"    {share * 100:5.1f} %  {share * cpu_ms:5.2f} ms  {name}")
        figures[f"profile_ms_{name.split(' ')[0]}"] = round(share * cpu_ms, 2)
    figures.update(print_steps(counter, PROFILE_STEP_RUNS, top=PROFILE_TOP_TASKS))
    figures.update(print_gc(gc_counter, plain, cpu_ms))
    stats.strip_dirs()
    _print_top(stats, "tottime", "own time")
    _print_top(stats, "cumulative", "cumulative time")
    return figures
