"""Issue 12 goal 3 (CPU per run): the calls the engine, the journal and the transport's
JetStream layer make per history event, per journal call and per fenced append, counted on the
bench's stack (scripted agent runs, a real nats-server). Counts, not times: the machine's load
barely moves them.

A profile hook counts every call (Python and built-in) made while one of the measured functions
is on the stack, itself included. A coroutine's frame leaves the stack when it waits and is
entered again when it resumes, so each frame between a caller and the connection is counted
once more per resume: the cost of the frames an ack passes through on its way back.
"""

from __future__ import annotations

import cProfile
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import Any, Final

import pytest
import trio

from bench._stack import open_stack
from bench.agent import HEADLINE
from dagnats_trio._env import RuntimeEnv
from dagnats_trio.engine import core
from dagnats_trio.engine._shell import Engine
from dagnats_trio.journal import Journal
from dagnats_trio.journal._fencing import FencedWriter
from dagnats_trio.testing import AGENT_TASK, ScriptedAgent, agent_workflow, expected_answer
from dagnats_trio.worker._worker import Worker

WORKFLOW: Final = "inclusive-calls-agent"
WARMUP_RUNS: Final = 3
RUNS: Final = 8

#: Calls per history event the engine handles (``Engine._handle``: load or derive the
#: snapshot, decide, save it, publish the effects, ack), everything below it included (codec,
#: transport, NATS client). 369.9 measured at 8c927c1 (session 7's start); 322.9 since a
#: decision copies a step's state and the run's snapshot with one construction each
#: (``engine._replace``, not ``attrs.evolve``) and a publish has no frame of its own between
#: its caller and its request. The bound leaves room for a fetch split differently on a
#: loaded machine.
MAX_CALLS_PER_EVENT: Final = 335
#: Calls under ``core.decide`` per event (the pure decision): 96.8 at 8c927c1; 49.4 since.
MAX_DECIDE_CALLS_PER_EVENT: Final = 55
#: Calls per fenced append (``FencedWriter.append_batch``, the publish and its ack included):
#: 128.6 at 8c927c1; 113.9 since ``_write_locked`` and ``publish`` hand on their callee's
#: coroutine (no frame of their own, each passed through again by the ack), a transient retry
#: costs only its deadline until it fails, a holder checks it may write without a property
#: call, and the appends take an ``AppendLock`` (no owner task registered per acquire); 109.3
#: with the codec's C encoder (30c2e3f) and a batch's lengths read once.
MAX_CALLS_PER_APPEND: Final = 118
#: Calls under the handler's journal calls (``Journal.model`` and ``Journal.tool``) per run, the
#: model and tool functions and the appends included: 2,714 at 8c927c1; 2,550 since (the
#: above, ``append`` handing on ``append_batch``'s coroutine, a tool call keyed by one
#: construction); 2,494 with the codec's C encoder and ``publish_lifecycle`` handing on the
#: retry's coroutine.
MAX_JOURNAL_CALL_CALLS_PER_RUN: Final = 2_620
#: Calls per new id (every dispatch's nonce and every claim's id; the count includes the
#: ``set.add`` that keeps it): 8 while an id was ``secrets.token_hex(8)`` (token_hex,
#: token_bytes, randbytes, urandom, hexlify, decode); 4 since it is ``os.urandom(8).hex()``.
MAX_CALLS_PER_NEW_ID: Final = 4
IDS: Final = 1_000
#: The worker's module: its frames (the pull loop, each delivery's, what settles it) are
#: entered once per call and again each time the handler below them wakes.
WORKER_MODULE: Final = "dagnats_trio/worker/_worker.py"
#: Entries of the worker's frames per delivery: 19.0 at 8c927c1, when the handler ran in a
#: frame of its own below the delivery's (``_run_handler``), passed through on every wake;
#: 10.5 since the handler runs in the delivery task's own frame.
MAX_WORKER_FRAME_ENTRIES_PER_DELIVERY: Final = 12


class InclusiveCalls:
    """A profile hook: per measured function, the calls made while it is on the stack (its own
    entries and resumes included), and how many times it was invoked."""

    def __init__(
        self, targets: dict[str, Callable[..., Any]], modules: tuple[str, ...] = ()
    ) -> None:
        self._names: dict[CodeType, str] = {fn.__code__: name for name, fn in targets.items()}
        #: Frame entries (calls and resumes) of the functions of each module in ``modules``.
        self.entries: Counter[str] = Counter()
        self._modules = modules
        self._depth: Counter[str] = Counter()
        self._active = 0
        self.calls: Counter[str] = Counter()
        self._frames: dict[str, list[FrameType]] = {name: [] for name in targets}

    def invocations(self, name: str) -> int:
        """Distinct frames of ``name`` seen (a coroutine keeps its frame across resumes); one more
        than the runs counted make when the last warm-up run's frame (a delivery settling, a
        call returning after its commit) resumes once its run is seen finished."""
        return len({id(f) for f in self._frames[name]})

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            if self._modules:
                filename = frame.f_code.co_filename.replace("\\", "/")
                for module in self._modules:
                    if filename.endswith(module):
                        self.entries[module] += 1
            name = self._names.get(frame.f_code)
            if name is not None:
                self._depth[name] += 1
                self._active += 1
                if frame not in self._frames[name]:
                    self._frames[name].append(frame)
            if self._active:
                for active, depth in self._depth.items():
                    if depth:
                        self.calls[active] += 1
        elif event == "c_call":
            if self._active:
                for active, depth in self._depth.items():
                    if depth:
                        self.calls[active] += 1
        elif event == "return":
            name = self._names.get(frame.f_code)
            if name is not None and self._depth[name]:
                self._depth[name] -= 1
                self._active -= 1


@contextmanager
def _hooked(hook: InclusiveCalls) -> Iterator[None]:
    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(None)


async def _measure() -> InclusiveCalls:
    agent = ScriptedAgent(paired=HEADLINE.paired)
    hook = InclusiveCalls(
        {
            "event": Engine._handle,
            "decide": core.decide,
            "append": FencedWriter.append_batch,
            "model": Journal.model,
            "tool": Journal.tool,
            "delivery": Worker._deliver,
        },
        modules=(WORKER_MODULE,),
    )
    async with open_stack(
        sync_always=False,
        handlers={AGENT_TASK: agent.turn},
        workflows=[agent_workflow(WORKFLOW)],
    ) as stack:
        for _ in range(WARMUP_RUNS):
            await stack.run(WORKFLOW, {"task": "deploy"})
        with _hooked(hook):
            answers = [(await stack.run(WORKFLOW, {"task": "deploy"})) for _ in range(RUNS)]
    assert all(snap.outputs().get("agent") == expected_answer() for snap in answers)
    return hook


@pytest.fixture(scope="module")
def measured() -> InclusiveCalls:
    """One set of profiled runs for every test here (the runs are the slow part)."""
    hook: InclusiveCalls = trio.run(_measure)
    return hook


def _per(hook: InclusiveCalls, name: str) -> float:
    n = hook.invocations(name)
    assert n > 0, f"{name} was never called"
    return hook.calls[name] / n


def test_an_event_costs_the_engine_few_calls(measured: InclusiveCalls) -> None:
    per_event, per_decide = _per(measured, "event"), _per(measured, "decide")
    print(
        f"calls per history event: {per_event:.1f} ({measured.invocations('event') / RUNS:.1f} "
        f"events per run), of which decide: {per_decide:.1f}"
    )
    assert per_decide < per_event <= MAX_CALLS_PER_EVENT
    assert per_decide <= MAX_DECIDE_CALLS_PER_EVENT


def test_a_fenced_append_costs_few_calls(measured: InclusiveCalls) -> None:
    per_append = _per(measured, "append")
    print(
        f"calls per fenced append: {per_append:.1f} "
        f"({measured.invocations('append') / RUNS:.1f} appends per run)"
    )
    assert 0 < per_append <= MAX_CALLS_PER_APPEND


def test_a_runs_journal_calls_cost_few_calls(measured: InclusiveCalls) -> None:
    per_run = (measured.calls["model"] + measured.calls["tool"]) / RUNS
    print(
        f"calls under Journal.model and Journal.tool per run: {per_run:.0f} "
        f"({measured.invocations('model') / RUNS:.1f} model, "
        f"{measured.invocations('tool') / RUNS:.1f} tool calls per run)"
    )
    assert 4 * RUNS <= measured.invocations("model") <= 4 * RUNS + 1
    assert 3 * RUNS <= measured.invocations("tool") <= 3 * RUNS + 1
    assert 0 < per_run <= MAX_JOURNAL_CALL_CALLS_PER_RUN


def test_a_new_id_costs_few_calls() -> None:
    new_id = RuntimeEnv().new_id
    ids: set[str] = set()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(IDS):
        ids.add(new_id())
    profiler.disable()
    profiler.create_stats()
    stats: dict[Any, Any] = profiler.stats  # type: ignore[attr-defined]
    per_id = (sum(v[1] for v in stats.values()) - 1) / IDS  # less the ``disable`` call
    print(f"calls per new id: {per_id:.1f}")
    assert len(ids) == IDS
    assert all(re.fullmatch("[0-9a-f]{16}", i) for i in ids)
    assert 0 < per_id <= MAX_CALLS_PER_NEW_ID


def test_a_delivery_passes_through_few_worker_frames(measured: InclusiveCalls) -> None:
    deliveries = measured.invocations("delivery")
    per_delivery = measured.entries[WORKER_MODULE] / deliveries
    print(
        f"worker frame entries per delivery: {per_delivery:.1f} "
        f"({deliveries / RUNS:.1f} deliveries per run)"
    )
    assert 4 * RUNS <= deliveries <= 4 * RUNS + 1
    assert 0 < per_delivery <= MAX_WORKER_FRAME_ENTRIES_PER_DELIVERY
