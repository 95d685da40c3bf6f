"""Crash-test your own handlers: the chaos soak's kills and stalls, on your workflow.

:func:`crash_test` runs the user's handlers and workflow on the simulated transport with the
autojump clock: first one crash-free run per input (the answers of record), then ``runs`` runs
under a schedule of kills and stalls drawn from ``seed`` at every crash seam (the first runs get
one fault at each seam in turn, killed and stalled; the rest are random). Each run is checked
when it ends and once more after every stalled holder woke:

- the run ends as its crash-free run did (status and output);
- ``journal check`` passes on every journal step, with the engine's iteration count;
- no unsafe tool call started twice: a call declared ``Replay.UNSAFE``, or any call of a tool
  named in ``unsafe_tools`` (starts are observed where the journal starts the function, outside
  the records, keyed by step, iteration and call position).

The seed fixes the schedule and the ids, and the run is one Hypothesis example, which makes
Trio's scheduling order follow (:mod:`._scheduling`): the same seed gives the same trace hash.
The fault hook, the trace and the deterministic scheduling are the chaos soak's own
(:class:`SeamFaults`, :class:`Trace`, :func:`run_deterministic`). The schedule and the report
are :mod:`._crash_plan`; the harness calls that retry through faults, :mod:`._harness`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, Final

import attrs
import trio
import trio.testing

from dagnats_trio._env import RuntimeEnv, deterministic_env
from dagnats_trio._seams import ToolStart, install_hook, observe_tool_starts
from dagnats_trio.api import Service
from dagnats_trio.api.service import RunWaitTimeout
from dagnats_trio.engine import Engine, RunSnapshot
from dagnats_trio.journal import check, read_journal
from dagnats_trio.protocol import JsonValue
from dagnats_trio.transport import (
    SimServer,
    Transport,
    provision,
)
from dagnats_trio.worker import Handler, Worker

from ._crash_plan import (
    CRASH_STALL_ACK_WAITS_MAX,
    CrashPlan,
    CrashReport,
    CrashRun,
    draw_crash_schedule,
)
from ._harness import retrying, wait_finished
from ._scheduling import run_deterministic
from ._seam_faults import FaultKind, SeamFaults
from ._trace import Trace

#: Opens one more connection to the server the crash test runs on.
Connect = Callable[[], AbstractAsyncContextManager[Transport]]

#: Short AckWaits: a stall past them hands the task (or event) to a successor.
CRASH_WORKER_ACK_WAIT_S: Final = 2.0
CRASH_ENGINE_ACK_WAIT_S: Final = 2.0
CRASH_ENGINES: Final = 2
CRASH_WORKERS: Final = 2
CRASH_PARALLEL_RUNS: Final = 4
#: Bound on one run, from start to its checks (Trio seconds: free on the autojump clock).
CRASH_RUN_DEADLINE_S: Final = 600.0
#: After the last run: how long a stalled holder may still sleep past its stall, at most.
DRAIN_MARGIN_S: Final = 1.0


@attrs.frozen
class _Expected:
    status: str
    output: JsonValue
    error: str | None


class _CrashTest:
    def __init__(
        self,
        handlers: Mapping[str, Handler],
        workflow: Mapping[str, Any],
        inputs: Sequence[JsonValue],
        plans: tuple[CrashPlan, ...],
        seed: int,
        unsafe_tools: frozenset[str],
    ) -> None:
        self.unsafe_tools = unsafe_tools
        self.handlers = dict(handlers)
        self.workflow = dict(workflow)
        self.name = str(workflow.get("name", ""))
        self.inputs = list(inputs)
        self.plans = plans
        self.seed = seed
        self.env = deterministic_env(seed)
        self.trace = Trace()
        self.expected: list[_Expected] = []
        self.starts: dict[tuple[str, str, int, int], list[str]] = {}
        self.outcomes: dict[int, CrashRun] = {}
        self.violations: list[str] = []

    def _tool_started(self, start: ToolStart) -> None:
        if start.unsafe or start.name in self.unsafe_tools:
            key = (start.run_id, start.step_id, start.iteration, start.call)
            self.starts.setdefault(key, []).append(start.name)

    async def run(self, connect: Connect) -> CrashReport:
        faults = SeamFaults(
            {p.run_id: p.faults for p in self.plans},
            {p.run_id: p.index for p in self.plans},
            self.trace,
            worker_ack_wait_s=CRASH_WORKER_ACK_WAIT_S,
            engine_ack_wait_s=CRASH_ENGINE_ACK_WAIT_S,
        )
        self.trace.add("crash-test", self.name, f"seed={self.seed}", f"runs={len(self.plans)}")
        for plan in self.plans:
            self.trace.add("plan", plan.index, plan.run_id, *(f.describe() for f in plan.faults))
        async with AsyncExitStack() as stack:
            control = await stack.enter_async_context(connect())
            await provision(control)
            await Service(control, self.env).register_workflow(self.workflow)
            conns = [
                await stack.enter_async_context(connect())
                for _ in range(CRASH_ENGINES + CRASH_WORKERS)
            ]
            with install_hook(faults.hook), observe_tool_starts(self._tool_started):
                async with trio.open_nursery() as nursery:
                    for conn in conns[:CRASH_ENGINES]:
                        engine = Engine(
                            conn,
                            env=self.env,
                            legacy_step_events=False,
                            ack_wait_s=CRASH_ENGINE_ACK_WAIT_S,
                            timer_ack_wait_s=CRASH_ENGINE_ACK_WAIT_S,
                        )
                        await nursery.start(engine.run)
                    for k, conn in enumerate(conns[CRASH_ENGINES:]):
                        worker = Worker(
                            conn,
                            self.handlers,
                            env=self.env,
                            ack_wait_s=CRASH_WORKER_ACK_WAIT_S,
                            worker_id=f"w{k}",
                        )
                        await nursery.start(worker.run)
                    await self._crash_free(control)
                    await self._drive(control, faults)
                    await self._drain(faults)
                    await self._final_checks(control)
                    nursery.cancel_scope.cancel()
        for kind in (FaultKind.KILL, FaultKind.STALL):
            self.trace.add("fired", kind.value, faults.fired[kind])
        self.trace.add("unfired", faults.unfired())
        for v in self.violations:
            self.trace.add("violation", v)
        return CrashReport(
            seed=self.seed,
            runs=tuple(self.outcomes[i] for i in sorted(self.outcomes)),
            fired={k.value: n for k, n in faults.fired.items() if n},
            unfired=faults.unfired(),
            violations=tuple(self.violations),
            trace_hash=self.trace.digest(),
            trace=self.trace.lines,
        )

    def _service(self, control: Transport, run_id: str) -> Service:
        # The service takes its run id from the schedule, so faults are keyed before it runs.
        return Service(control, RuntimeEnv(wall_ms=self.env.wall_ms, new_id=lambda: run_id))

    async def _crash_free(self, control: Transport) -> None:
        for k, value in enumerate(self.inputs):
            run_id = f"crashfree{self.seed % 1_000_000:06d}-{k:03d}"
            service = self._service(control, run_id)
            await retrying(functools.partial(service.start_run, self.name, value))
            deadline = trio.current_time() + CRASH_RUN_DEADLINE_S
            snap = await wait_finished(service, run_id, deadline)
            expected = _Expected(snap.status.value, snap.output, snap.error)
            self.expected.append(expected)
            problems = await self._audit(control, snap)
            self.trace.add("crash-free", k, expected.status, *problems)
            for p in problems:
                self.violations.append(f"crash-free run {run_id} (seed {self.seed}): {p}")

    async def _drive(self, control: Transport, faults: SeamFaults) -> None:
        slots = trio.Semaphore(CRASH_PARALLEL_RUNS)
        async with trio.open_nursery() as runs:
            for plan in self.plans:
                await slots.acquire()
                runs.start_soon(self._one_run, control, plan, slots, faults)

    async def _one_run(
        self, control: Transport, plan: CrashPlan, slots: trio.Semaphore, faults: SeamFaults
    ) -> None:
        try:
            service = self._service(control, plan.run_id)
            value = self.inputs[plan.input_index]
            deadline = trio.current_time() + CRASH_RUN_DEADLINE_S
            snap: RunSnapshot | None = None
            with trio.move_on_at(deadline):
                await retrying(lambda: service.start_run(self.name, value))
                try:
                    snap = await wait_finished(service, plan.run_id, deadline)
                except RunWaitTimeout:
                    snap = None
            if snap is None:
                snap = await retrying(functools.partial(service.get_run, plan.run_id))
                outcome = await self._check(control, plan, snap, finished=False)
            else:
                outcome = await self._check(control, plan, snap)
            self.trace.add(f"end t={trio.current_time() - faults.t0:.6f}", self._line(outcome))
            self.outcomes[plan.index] = outcome
            for p in outcome.problems:
                self._report(plan, p, "at its end")
        finally:
            slots.release()

    def _line(self, run: CrashRun) -> str:
        verdict = "ok" if not run.problems else "VIOLATION " + " | ".join(run.problems)
        return f"run {run.index} {run.run_id} {run.status} {verdict}"

    def _report(self, plan: CrashPlan, problem: str, when: str) -> None:
        faults = ", ".join(f.describe() for f in plan.faults) or "no faults"
        self.violations.append(
            f"run {plan.index} ({plan.run_id}, seed {self.seed}, {faults}) {when}: {problem}"
        )

    async def _audit(self, control: Transport, snap: RunSnapshot) -> list[str]:
        """``journal check`` on every journal step, and the unsafe starts of the run."""
        problems: list[str] = []
        for step_id in sorted(snap.steps):
            step = snap.steps[step_id]
            records = await retrying(functools.partial(read_journal, control, snap.run_id, step_id))
            if not records:
                continue
            report = check(records, engine_iterations=step.iterations)
            problems.extend(f"journal check of {step_id}: {v}" for v in report.violations)
        for (run_id, step_id, iteration, call), names in sorted(self.starts.items()):
            if run_id == snap.run_id and len(names) > 1:
                problems.append(
                    f"unsafe tool {names[0]!r} started {len(names)} times "
                    f"(step {step_id}, iteration {iteration}, call {call})"
                )
        return problems

    async def _check(
        self, control: Transport, plan: CrashPlan, snap: RunSnapshot, finished: bool = True
    ) -> CrashRun:
        problems: list[str] = []
        expected = self.expected[plan.input_index]
        if not finished:
            problems.append(
                f"did not finish within {CRASH_RUN_DEADLINE_S} s (status {snap.status.value})"
            )
        elif snap.status.value != expected.status:
            problems.append(
                f"ended {snap.status.value} ({snap.error}); the crash-free run ended "
                f"{expected.status}"
            )
        elif snap.output != expected.output:
            problems.append(
                f"answer {snap.output!r} differs from the crash-free run's {expected.output!r}"
            )
        problems.extend(await self._audit(control, snap))
        status = snap.status.value if finished else "unfinished"
        faults = tuple(f.describe() for f in plan.faults)
        return CrashRun(plan.index, plan.run_id, status, faults, tuple(problems))

    async def _drain(self, faults: SeamFaults) -> None:
        """Let every stalled holder wake, find itself fenced and stop."""
        longest = CRASH_STALL_ACK_WAITS_MAX * max(CRASH_WORKER_ACK_WAIT_S, CRASH_ENGINE_ACK_WAIT_S)
        with trio.move_on_after(longest + DRAIN_MARGIN_S):
            await faults.wait_no_stalls()
        await trio.sleep(CRASH_WORKER_ACK_WAIT_S)
        self.trace.add(f"drained t={trio.current_time() - faults.t0:.6f} stalls={faults.stalls}")

    async def _final_checks(self, control: Transport) -> None:
        """Check every finished run again: a zombie that woke late must have changed nothing."""
        for index in sorted(self.outcomes):
            before = self.outcomes[index]
            if before.status == "unfinished":
                continue
            plan = self.plans[index]
            service = self._service(control, plan.run_id)
            snap = await retrying(functools.partial(service.get_run, plan.run_id))
            after = await self._check(control, plan, snap)
            self.outcomes[index] = after
            for p in after.problems:
                if p not in before.problems:
                    self._report(plan, p, "after the drain")
            self.trace.add("final", self._line(after))


async def crash_test_async(
    handlers: Mapping[str, Handler],
    workflow: Mapping[str, Any],
    *,
    seed: int,
    inputs: Sequence[JsonValue] = (None,),
    runs: int = 16,
    iterations: int = 4,
    unsafe_tools: Iterable[str] = (),
    connect: Connect | None = None,
) -> CrashReport:
    """:func:`crash_test` inside a Trio run of your own (a pytest-trio test with the
    ``autojump_clock`` fixture). The verdict is the same; the trace hash repeats only when the
    whole Trio run is seeded the same way, which :func:`crash_test` does for you.

    ``connect`` opens a connection to a server of your own instead of a fresh simulated one
    (e.g. ``functools.partial(open_nats_transport, url)`` on a nats-server that holds nothing
    else): the same schedule and checks on the wall clock, without the repeatable trace.
    """
    if not inputs:
        raise ValueError("inputs must name at least one task input")
    plans = draw_crash_schedule(seed, runs, iterations, len(inputs))
    truth = frozenset(unsafe_tools)
    test = _CrashTest(handlers, workflow, inputs, plans, seed, truth)
    return await test.run(connect if connect is not None else SimServer().connect)


def crash_test(
    handlers: Mapping[str, Handler],
    workflow: Mapping[str, Any],
    *,
    seed: int,
    inputs: Sequence[JsonValue] = (None,),
    runs: int = 16,
    iterations: int = 4,
    unsafe_tools: Iterable[str] = (),
) -> CrashReport:
    """Crash-test ``handlers`` (task type -> handler) on ``workflow`` (a definition, as
    registered) under the kills and stalls drawn from ``seed``; see the module docstring.

    ``inputs`` are the run inputs (run ``k`` uses ``inputs[k % len(inputs)]``); ``iterations``
    is how many iterations of a step the faults are spread over; ``unsafe_tools`` names tools
    that must never start twice whatever a call declares (calls declared ``Replay.UNSAFE`` are
    always counted). Runs its own ``trio.run`` on the autojump clock under
    :func:`run_deterministic` (which needs Hypothesis installed), so call it
    from a plain (not async) test. The same seed gives the same ``trace_hash``.
    """
    main = functools.partial(
        crash_test_async,
        handlers,
        workflow,
        seed=seed,
        inputs=inputs,
        runs=runs,
        iterations=iterations,
        unsafe_tools=tuple(unsafe_tools),
    )
    return run_deterministic(main)
