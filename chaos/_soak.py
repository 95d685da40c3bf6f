"""The soak: many scripted-agent runs at once on engines and workers that share one store, under
the schedule of :mod:`._schedule`, each run checked when it ends and once more at the very end.

It is one ``async`` function, :func:`soak`, over a :class:`Backend` (the simulation, or real
nats-servers); it never calls ``trio.run``. Determinism is the caller's part: on the simulation,
``run_sim_soak`` runs it with an env from ``deterministic_env(seed)`` through
``dagnats_trio.testing.run_deterministic`` (the autojump clock, Trio's scheduler made
deterministic by Hypothesis), and one seed gives one trace.

After every run: the answer equals ``expected_answer()``, ``journal check`` passes with the
engine's iteration count, and the unsafe tool started at most once. After the last run, once every
stalled holder has woken and been fenced, the journal and the counters are checked again: a zombie
that woke late must not have written or started anything.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Protocol, TypeVar

import attrs
import trio

from dagnats_trio._env import RuntimeEnv
from dagnats_trio._seams import install_hook
from dagnats_trio.api import Service
from dagnats_trio.api.service import WAIT_FOR_RUN_MAX_S, RunWaitTimeout
from dagnats_trio.engine import Engine, RunSnapshot
from dagnats_trio.journal import check, read_journal
from dagnats_trio.protocol import RunStatus
from dagnats_trio.testing import (
    AGENT_STEP_ID,
    NODE_KINDS,
    AgentCounters,
    CrashKill,
    FaultKind,
    ScriptedAgent,
    SeamFaults,
    Trace,
    Turn,
    agent_workflow,
    expected_answer,
)
from dagnats_trio.transport import (
    TemporarilyUnavailable,
    Transport,
    TransportTimeout,
    provision,
)
from dagnats_trio.worker import Worker

from ._faults import INJECTED_KINDS, Injector
from ._schedule import STALL_ACK_WAITS_MAX, RunPlan, draw_schedule

log = logging.getLogger("chaos")

WORKFLOW_NAME = "chaos-agent"
UNSAFE_TOOL = "send_message"
#: The scripted agent's tools, in script order (the trace reports their starts).
SCRIPT_TOOLS = ("search", UNSAFE_TOOL, "lookup")
#: Runs in flight at once.
PARALLEL_RUNS = 8
#: Engines sharing the history consumer, and workers sharing the task consumer.
ENGINES = 2
WORKERS = 3
#: Short AckWaits: a stall past them hands the task (or event) to a successor.
WORKER_ACK_WAIT_S = 2.0
ENGINE_ACK_WAIT_S = 2.0
#: Bound on one run, from start to its checks (Trio seconds: free on the autojump clock).
RUN_DEADLINE_S = 600.0
#: Pause between attempts of a harness call that met a step-down or a lost ack.
HARNESS_RETRY_S = 0.1
#: Bound on one harness call, retries included (longer than any step-down window).
HARNESS_CALL_MAX_S = 60.0
#: After the last run: how long a stalled holder may still sleep, at most.
DRAIN_MARGIN_S = 1.0
#: After the last run: how long faults still being performed (node faults queue one behind the
#: other, each up to its window plus the cluster's recovery) may take to end.
SETTLE_MAX_S = 300.0

T = TypeVar("T")


#: The chaos soak's name for the kill the seam hook raises.
ChaosKill = CrashKill


class Backend(Protocol):
    """Where the soak runs: ``connect()`` opens one more connection to the shared store."""

    @property
    def name(self) -> str: ...

    @property
    def injector(self) -> Injector: ...

    @property
    def replicas(self) -> int: ...

    @property
    def kinds(self) -> tuple[FaultKind, ...]:
        """The fault kinds this backend can inject (the schedule draws from them)."""
        ...

    def connect(self) -> AbstractAsyncContextManager[Transport]: ...


@attrs.frozen
class SoakConfig:
    seed: int
    runs: int = 50
    parallel_runs: int = PARALLEL_RUNS
    engines: int = ENGINES
    workers: int = WORKERS
    worker_ack_wait_s: float = WORKER_ACK_WAIT_S
    engine_ack_wait_s: float = ENGINE_ACK_WAIT_S
    run_deadline_s: float = RUN_DEADLINE_S
    #: Stop starting runs once this much Trio time has passed (None: start them all).
    budget_s: float | None = None
    #: The agent's script (None: the default safe, unsafe, safe, answer). Tests use it to break
    #: a guard on purpose, e.g. declare the unsafe tool safe, and see the soak catch it.
    script: tuple[Turn, ...] | None = None
    #: A schedule to run instead of the one drawn from the seed (tests pin exact faults).
    schedule: tuple[RunPlan, ...] | None = None


@attrs.frozen
class RunOutcome:
    index: int
    run_id: str
    status: str
    iterations: int
    tool_starts: tuple[tuple[str, int], ...]
    model_requests: int
    records: int
    problems: tuple[str, ...]
    #: From its start to its end check (not traced: on real servers it is noise).
    elapsed_s: float = attrs.field(default=0.0, eq=False)

    def line(self) -> str:
        starts = ",".join(f"{name}:{n}" for name, n in self.tool_starts)
        verdict = "ok" if not self.problems else "VIOLATION " + " | ".join(self.problems)
        return (
            f"run {self.index} {self.run_id} {self.status} iterations={self.iterations} "
            f"starts={starts} model={self.model_requests} records={self.records} {verdict}"
        )


@attrs.frozen
class SoakResult:
    seed: int
    mode: str
    planned: int
    outcomes: tuple[RunOutcome, ...]
    #: Faults that fired at their seam, by kind (transport faults: armed at that moment).
    fired: dict[str, int]
    #: Transport faults that took effect (an armed duplicate that no delivery used is not here).
    consumed: dict[str, int]
    unfired: int
    violations: tuple[str, ...]
    trace_hash: str
    elapsed_s: float
    #: The lines hashed into ``trace_hash``, in order.
    trace: tuple[str, ...] = attrs.field(repr=False, eq=False)
    #: The kinds the schedule drew from (``fired``/``consumed`` hold every kind).
    kinds: tuple[str, ...] = ()
    #: Longest time one harness call of a run (start, wait, read) kept meeting an unavailable
    #: store or a timeout before it answered: the worst a run waited for a quorum.
    worst_wait_s: float = 0.0
    #: The injector's own lines (what the node faults did).
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def slowest_run_s(self) -> float:
        return max((o.elapsed_s for o in self.outcomes), default=0.0)

    @property
    def injected(self) -> dict[str, int]:
        """Faults that really happened, by kind: kills and stalls as fired, the transport faults
        as consumed."""
        out = {}
        kinds = self.kinds or tuple(k.value for k in FaultKind)
        for name in kinds:
            source = self.consumed if FaultKind(name) in INJECTED_KINDS else self.fired
            out[name] = source.get(name, 0)
        return out


@attrs.define
class _Waits:
    """The longest stretch a harness call spent retrying."""

    worst_s: float = 0.0

    def ended(self, since: float | None) -> None:
        if since is not None:
            self.worst_s = max(self.worst_s, trio.current_time() - since)


async def _retrying(fn: Callable[[], Awaitable[T]], waits: _Waits) -> T:
    """A harness call through a step-down or a lost ack: retried until it answers, for at most
    ``HARNESS_CALL_MAX_S`` (every call retried here is idempotent)."""
    since: float | None = None
    with trio.fail_after(HARNESS_CALL_MAX_S):
        while True:
            try:
                result = await fn()
            except (TemporarilyUnavailable, TransportTimeout) as exc:
                log.debug("harness call: %s; retrying", exc)
                since = trio.current_time() if since is None else since
                await trio.sleep(HARNESS_RETRY_S)
            else:
                waits.ended(since)
                return result


async def _wait_finished(
    service: Service, run_id: str, deadline: float, waits: _Waits
) -> RunSnapshot:
    since: float | None = None
    while True:
        remaining = deadline - trio.current_time()
        if remaining <= 0:
            waits.ended(since)
            raise RunWaitTimeout(run_id, 0)
        try:
            snap = await service.wait_for_run(run_id, min(remaining, WAIT_FOR_RUN_MAX_S))
        except (TemporarilyUnavailable, TransportTimeout) as exc:
            log.debug("waiting for %s: %s; retrying", run_id, exc)
            since = trio.current_time() if since is None else since
            await trio.sleep(HARNESS_RETRY_S)
        else:
            waits.ended(since)
            return snap


class _Soak:
    def __init__(self, config: SoakConfig, backend: Backend, env: RuntimeEnv) -> None:
        self.config = config
        self.backend = backend
        self.env = env
        self.trace = Trace()
        self.plans = (
            config.schedule
            if config.schedule is not None
            else draw_schedule(config.seed, config.runs, backend.kinds)
        )
        self.waits = _Waits()
        self.by_index = {p.index: p for p in self.plans}
        if len(self.by_index) != len(self.plans) or len({p.run_id for p in self.plans}) != len(
            self.plans
        ):
            raise ValueError("every run of a schedule needs its own index and run id")
        self.counters = AgentCounters()
        self.expected = (
            expected_answer(config.script) if config.script is not None else expected_answer()
        )
        self.outcomes: dict[int, RunOutcome] = {}
        self.violations: list[str] = []
        self.control: Transport | None = None

    async def run(self) -> SoakResult:
        cfg = self.config
        self.trace.add("soak", self.backend.name, f"seed={cfg.seed}", f"runs={len(self.plans)}")
        for plan in self.plans:
            self.trace.add("plan", plan.index, plan.run_id, *(f.describe() for f in plan.faults))
        faults = SeamFaults(
            {p.run_id: p.faults for p in self.plans},
            {p.run_id: p.index for p in self.plans},
            self.trace,
            worker_ack_wait_s=cfg.worker_ack_wait_s,
            engine_ack_wait_s=cfg.engine_ack_wait_s,
            arm=self.backend.injector.arm,
        )
        agent = (
            ScriptedAgent(cfg.script, counters=self.counters)
            if cfg.script is not None
            else ScriptedAgent(counters=self.counters)
        )
        async with AsyncExitStack() as stack:
            control = await stack.enter_async_context(self.backend.connect())
            self.control = control
            await provision(control, replicas=self.backend.replicas)
            await Service(control, self.env).register_workflow(agent_workflow(WORKFLOW_NAME))
            # Every connection is opened here, outside the nursery: a real one holds cancel
            # scopes of its own, which must nest around the nursery, not inside it.
            conns = [
                await stack.enter_async_context(self.backend.connect())
                for _ in range(cfg.engines + cfg.workers)
            ]
            with install_hook(faults.hook):
                async with trio.open_nursery() as nursery:
                    for conn in conns[: cfg.engines]:
                        engine = Engine(
                            conn,
                            env=self.env,
                            legacy_step_events=False,
                            ack_wait_s=cfg.engine_ack_wait_s,
                            timer_ack_wait_s=cfg.engine_ack_wait_s,
                        )
                        await nursery.start(engine.run)
                    for k, conn in enumerate(conns[cfg.engines :]):
                        worker = Worker(
                            conn,
                            agent.handlers,
                            env=self.env,
                            ack_wait_s=cfg.worker_ack_wait_s,
                            worker_id=f"w{k}",
                        )
                        await nursery.start(worker.run)
                    await self._drive(faults)
                    await self._drain(faults)
                    await self._final_checks()
                    nursery.cancel_scope.cancel()
        elapsed = trio.current_time() - faults.t0
        outcomes = tuple(self.outcomes[i] for i in sorted(self.outcomes))
        kinds = self.backend.kinds
        for kind in kinds:
            self.trace.add("fired", kind.value, faults.fired[kind])
        consumed = self.backend.injector.consumed()
        for kind in INJECTED_KINDS:
            if kind in kinds:
                self.trace.add("consumed", kind.value, consumed.get(kind, 0))
        self.trace.add("unfired", faults.unfired())
        for v in self.violations:
            self.trace.add("violation", v)
        return SoakResult(
            seed=cfg.seed,
            mode=self.backend.name,
            planned=len(self.plans),
            outcomes=outcomes,
            fired={k.value: n for k, n in faults.fired.items()},
            consumed={k.value: n for k, n in consumed.items()},
            unfired=faults.unfired(),
            violations=tuple(self.violations),
            trace_hash=self.trace.digest(),
            elapsed_s=elapsed,
            trace=self.trace.lines,
            kinds=tuple(k.value for k in kinds),
            worst_wait_s=self.waits.worst_s,
            notes=self.backend.injector.notes(),
        )

    async def _drive(self, faults: SeamFaults) -> None:
        cfg = self.config
        slots = trio.Semaphore(cfg.parallel_runs)
        # Node faults take seconds each and run one at a time: with them in the schedule, a run
        # starts only when none waits (on the simulation nothing waits, and the order of events
        # is left as it was).
        throttled = any(k in NODE_KINDS for k in self.backend.kinds)
        async with trio.open_nursery() as runs:
            for plan in self.plans:
                await slots.acquire()
                if throttled:
                    await self.backend.injector.room()
                if cfg.budget_s is not None and trio.current_time() - faults.t0 > cfg.budget_s:
                    slots.release()
                    self.trace.add("budget spent: runs from", plan.index, "not started")
                    break
                runs.start_soon(self._one_run, plan, slots, faults)

    async def _one_run(self, plan: RunPlan, slots: trio.Semaphore, faults: SeamFaults) -> None:
        try:
            await self._run_and_check(plan, faults)
        finally:
            slots.release()

    async def _run_and_check(self, plan: RunPlan, faults: SeamFaults) -> None:
        assert self.control is not None
        run_id = plan.run_id
        # The service takes its run id from the schedule, so the faults are keyed before it runs.
        env = RuntimeEnv(wall_ms=self.env.wall_ms, new_id=lambda: run_id)
        service = Service(self.control, env)
        deadline = trio.current_time() + self.config.run_deadline_s
        self.trace.add(f"start t={trio.current_time() - faults.t0:.6f} run={plan.index}")
        snap: RunSnapshot | None = None
        with trio.move_on_at(deadline):
            await _retrying(
                lambda: service.start_run(WORKFLOW_NAME, {"run": plan.index}), self.waits
            )
            try:
                snap = await _wait_finished(service, run_id, deadline, self.waits)
            except RunWaitTimeout:
                snap = None
        if snap is None:
            # Still audit what there is: the journal and the counters of a hung run say where.
            snap = await _retrying(functools.partial(service.get_run, run_id), self.waits)
            outcome = await self._check(plan, snap, finished=False)
        else:
            outcome = await self._check(plan, snap)
        self.trace.add(f"end t={trio.current_time() - faults.t0:.6f}", outcome.line())
        elapsed = trio.current_time() - (deadline - self.config.run_deadline_s)
        self._record(attrs.evolve(outcome, elapsed_s=elapsed), "at its end")

    async def _check(self, plan: RunPlan, snap: RunSnapshot, finished: bool = True) -> RunOutcome:
        assert self.control is not None
        control = self.control
        run_id = plan.run_id
        problems: list[str] = []
        step = snap.steps.get(AGENT_STEP_ID)
        iterations = step.iterations if step is not None else 0
        if not finished:
            dispatch = step.dispatch if step is not None else None
            problems.append(
                f"did not finish within {self.config.run_deadline_s} s (status "
                f"{snap.status.value}, {iterations} iterations ended, dispatch {dispatch})"
            )
        elif snap.status is not RunStatus.COMPLETED:
            problems.append(f"run ended {snap.status.value}: {snap.error}")
        elif snap.output != self.expected:
            problems.append(f"answer {snap.output!r} != expected {self.expected!r}")
        records = await _retrying(lambda: read_journal(control, run_id, AGENT_STEP_ID), self.waits)
        report = check(records, engine_iterations=iterations)
        problems.extend(f"journal check: {v}" for v in report.violations)
        unsafe = self.counters.starts(run_id, UNSAFE_TOOL)
        if unsafe > 1:
            problems.append(f"unsafe tool {UNSAFE_TOOL} started {unsafe} times")
        starts = tuple((t, self.counters.starts(run_id, t)) for t in SCRIPT_TOOLS)
        return RunOutcome(
            plan.index,
            run_id,
            snap.status.value if finished else "unfinished",
            iterations,
            starts,
            self.counters.model_requests.get(run_id, 0),
            len(records),
            tuple(problems),
        )

    def _record(self, outcome: RunOutcome, when: str) -> None:
        self.outcomes[outcome.index] = outcome
        for p in outcome.problems:
            self._report(outcome, p, when)

    def _report(self, outcome: RunOutcome, problem: str, when: str) -> None:
        self.violations.append(
            f"run {outcome.index} ({outcome.run_id}, seed {self.config.seed}) {when}: {problem}"
        )

    async def _drain(self, faults: SeamFaults) -> None:
        """Let every stalled holder wake, find itself fenced and stop."""
        cfg = self.config
        longest = STALL_ACK_WAITS_MAX * max(cfg.worker_ack_wait_s, cfg.engine_ack_wait_s)
        with trio.move_on_after(longest + DRAIN_MARGIN_S):
            await faults.wait_no_stalls()
        with trio.move_on_after(SETTLE_MAX_S) as settle:
            await self.backend.injector.settle()
        if settle.cancelled_caught:
            self.violations.append(
                f"faults still being performed {SETTLE_MAX_S} s after the last run "
                f"(seed {cfg.seed})"
            )
        await trio.sleep(cfg.worker_ack_wait_s)
        self.trace.add(f"drained t={trio.current_time() - faults.t0:.6f} stalls={faults.stalls}")

    async def _final_checks(self) -> None:
        assert self.control is not None
        service = Service(self.control, self.env)
        with trio.move_on_after(self.config.run_deadline_s) as scope:
            for index in sorted(self.outcomes):
                before = self.outcomes[index]
                if before.status == "unfinished":
                    continue
                plan = self.by_index[index]
                snap = await _retrying(functools.partial(service.get_run, plan.run_id), self.waits)
                after = attrs.evolve(await self._check(plan, snap), elapsed_s=before.elapsed_s)
                # The outcome kept is the final one; a problem is reported once.
                self.outcomes[index] = after
                for p in after.problems:
                    if p not in before.problems:
                        self._report(after, p, "after the drain")
                self.trace.add("final", after.line())
        if scope.cancelled_caught:
            self.violations.append(f"final checks did not finish (seed {self.config.seed})")


async def soak(config: SoakConfig, backend: Backend, env: RuntimeEnv) -> SoakResult:
    """Run the soak on ``backend``; see the module docstring."""
    return await _Soak(config, backend, env).run()
