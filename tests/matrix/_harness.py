"""The crash-point matrix harness: a small cluster, per-run crash hooks, and the verdict.

A cluster is two engines sharing the history consumer (as a cluster does) and two workers on the
same task consumer, each on its own connection. One :class:`CaseBook` holds every case of a test,
keyed by run id, so many cases run at once in one cluster and each crashes only its own run.

Kill: the hook raises at the targeted seam the first time it is reached; the worker's delivery
dies unacked and the task comes back after AckWait to whichever worker fetches it. For the engine
seam the hook cancels that engine's whole cancel scope, as a process kill would (a raise would only
nak the event, which is a handler error, not a crash); a supervisor restarts the engine slot.

Stall: the hook blocks (the heartbeat pauses meanwhile) until a successor delivery of the same
iteration has claimed, or has finished (a late redelivery after a commit is stale or republishes
and claims nothing); then the zombie goes on and must be fenced. After the lifecycle event the
run needs nothing more of the holder and may end before the AckWait passes; the run's end then
removes its tasks (the task stream keeps them until then), the stalled one too, so no successor
comes: such a stall is released once the task stream holds none of the run's tasks.

A stalled engine blocks its whole history loop, so the supervisor starts another engine beside
it (the stalled one is not dead); past the engines' AckWait that engine gets the event, finds the
dispatch saved and publishes the task; a worker claims it, and only then does the zombie engine
resume and publish the same dispatch, which the stream's duplicate window must swallow.

The verdict (:func:`problems`) returns readable problems instead of asserting, so a test can
also show that the same checks catch a deliberately broken agent.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final, cast

import attrs
import trio

from dagnats_trio._env import RuntimeEnv
from dagnats_trio._seams import Seam, SeamContext, install_hook
from dagnats_trio.api.service import RunWaitTimeout, Service
from dagnats_trio.engine import Engine, RunSnapshot
from dagnats_trio.journal import check, read_journal_for_audit
from dagnats_trio.protocol import JournalRecord, JsonValue, RunStatus, ToolResultRecord
from dagnats_trio.protocol.layout import TASK_STREAM, task_subject
from dagnats_trio.testing import (
    AGENT_STEP_ID,
    AgentCounters,
    ScriptedAgent,
    agent_workflow,
    expected_answer,
)
from dagnats_trio.testing._agent import DEFAULT_SCRIPT
from dagnats_trio.transport import Transport, provision
from dagnats_trio.worker import Handler, TaskContext, Worker

#: A fresh connection to the server under test (``open_nats_transport(url)``, ``server.connect``).
Connect = Callable[[], AbstractAsyncContextManager[Transport]]

#: AckWait of the workers' task consumer and of the engines' consumers: short, so a dead or
#: stalled holder's task (and a dead engine's event) comes back quickly.
WORKER_ACK_WAIT_S: Final = 1.0
ENGINE_ACK_WAIT_S: Final = 1.0
ENGINE_FETCH_WAIT_S: Final = 0.2
ENGINES: Final = 2
WORKERS: Final = 2
#: Bound on one case, from start to the end of its zombie.
CASE_TIMEOUT_S: Final = 60.0
#: Bound on a whole row of cases, cluster start and stop included.
ROW_TIMEOUT_S: Final = 2 * CASE_TIMEOUT_S
#: Bound on a stall: a successor must have claimed (or finished) by then.
STALL_MAX_S: Final = 30.0
#: Pause between two reads of the task stream while a stall waits for the run's end.
RUN_END_POLL_S: Final = 0.05
WORKFLOW: Final = "matrix-agent"

#: The truth about the tools, whatever a (possibly broken) script declares: the harness checks
#: against this, so a wrong declaration shows up as a second start.
UNSAFE_TOOLS: Final = frozenset({"send_message"})
#: The tool each iteration of the script runs (iteration 3 answers).
TOOL_AT: Final = tuple(t.tool for t in DEFAULT_SCRIPT if t.tool is not None)
#: The iterations the matrix crashes on: the first, the unsafe one and the one after it.
ITERATIONS: Final = (0, 1, 2)
WORKER_SEAMS: Final = (
    Seam.BEFORE_CLAIM,
    Seam.AFTER_CLAIM,
    Seam.INSIDE_BATCH,
    Seam.AFTER_TOOL_INTENT,
    Seam.INSIDE_TOOL,
    Seam.AFTER_TOOL_RESULT,
    Seam.AFTER_COMMIT,
    Seam.AFTER_LIFECYCLE_EVENT,
)
ENGINE_SEAMS: Final = (Seam.ENGINE_AFTER_DISPATCH_SAVED,)
#: Every crash point of the spec ("How it is verified"), in the order a run reaches them.
SEAMS: Final = (*WORKER_SEAMS, *ENGINE_SEAMS)
#: Seams where the intent of the iteration's tool is recorded and its result is not.
INTENT_OPEN_SEAMS: Final = frozenset({Seam.AFTER_TOOL_INTENT, Seam.INSIDE_TOOL})
#: Seams reached after the tool function ran: its start and effect are counted before the crash.
EFFECT_DONE_SEAMS: Final = frozenset({Seam.INSIDE_TOOL})
#: Seams after which the stalled holder has committed: it is not fenced, its event is a duplicate.
#: The scripted agent stores each tool result with its continue commit (one atomic batch), so
#: the result's seam is reached once both are stored.
COMMITTED_SEAMS: Final = frozenset(
    {Seam.AFTER_TOOL_RESULT, Seam.AFTER_COMMIT, Seam.AFTER_LIFECYCLE_EVENT}
)
#: Seams where the model has answered and its response is not stored yet (it goes out in one
#: batch with the tool intent): the successor asks the model again.
MODEL_LOST_SEAMS: Final = frozenset({Seam.INSIDE_BATCH})


#: Seams after which the run needs nothing more of the holder (its lifecycle event is stored): a
#: stall there may be released by the run's end instead of a successor (module docstring).
RUN_END_RELEASES: Final = frozenset({Seam.AFTER_LIFECYCLE_EVENT})


class Mode(enum.Enum):
    KILL = "kill"
    STALL = "stall"


@attrs.frozen
class Case:
    seam: Seam
    mode: Mode
    iteration: int

    @property
    def name(self) -> str:
        return f"{self.seam.value}/{self.mode.value}/iteration {self.iteration}"


def cases_for(seam: Seam, mode: Mode) -> list[Case]:
    """One row of the matrix: a seam, killed or stalled, on each of the crashed iterations."""
    return [Case(seam, mode, i) for i in ITERATIONS]


#: The whole matrix: 9 seams x (kill, stall) x 3 iterations = 54 cases per transport (the
#: spec's 48, and a crash inside an atomic batch).
ALL_CASES: Final = tuple(c for seam in SEAMS for mode in Mode for c in cases_for(seam, mode))


class SeamKill(Exception):
    """Raised by a hook: the holder dies at this seam."""


@attrs.define(eq=False)
class CaseRun:
    """What happened to one case's run, as the hooks saw it."""

    case: Case
    run_id: str
    fired: int = 0
    zombie: trio.lowlevel.Task | None = None
    successor_moved: trio.Event = attrs.field(factory=trio.Event)
    released_by_successor: bool = False
    #: A stall after the lifecycle event that the run's end released (see the module docstring).
    released_by_run_end: bool = False
    zombie_done: trio.Event = attrs.field(factory=trio.Event)
    zombie_outcome: str | None = None
    #: Sequences the task stream gave to this run's task publishes of the crashed iteration by
    #: engines other than the zombie (the takeover's), and the one the zombie's publish got.
    takeover_seqs: list[int] = attrs.field(factory=list)
    zombie_seq: int | None = None


@attrs.define(eq=False)
class CaseBook:
    """Every case of one test, by run id; the hooks and the handler wrapper report here."""

    task: str
    runs: dict[str, CaseRun] = attrs.field(factory=dict)
    engine_takeovers: int = 0

    def add(self, case: Case) -> CaseRun:
        cr = CaseRun(case, f"m{uuid.uuid4().hex[:16]}")
        self.runs[cr.run_id] = cr
        return cr

    def _target(self, ctx: SeamContext) -> CaseRun | None:
        cr = self.runs.get(ctx.run_id)
        if cr is None or ctx.iteration != cr.case.iteration:
            return None
        return cr

    async def worker_hook(self, ctx: SeamContext) -> None:
        cr = self._target(ctx)
        if cr is None:
            return
        me = trio.lowlevel.current_task()
        if cr.zombie is not None and me is not cr.zombie and ctx.seam is Seam.AFTER_CLAIM:
            cr.successor_moved.set()
        if ctx.seam is not cr.case.seam or cr.fired:
            return
        cr.fired += 1
        if cr.case.mode is Mode.KILL:
            raise SeamKill(f"{cr.case.name} on worker {ctx.worker_id}")
        cr.zombie = me
        with trio.move_on_after(STALL_MAX_S):
            await cr.successor_moved.wait()
            cr.released_by_successor = not cr.released_by_run_end

    async def engine_hook(
        self, ctx: SeamContext, kill: Callable[[], None], take_over: Callable[[], None]
    ) -> None:
        cr = self._target(ctx)
        if cr is None or ctx.seam is not cr.case.seam or cr.fired:
            return
        cr.fired += 1
        if cr.case.mode is Mode.KILL:
            kill()
            await trio.lowlevel.checkpoint()  # raises Cancelled: the engine is gone
            raise AssertionError("a killed engine went on")  # pragma: no cover
        cr.zombie = trio.lowlevel.current_task()
        self.engine_takeovers += 1
        take_over()
        with trio.move_on_after(STALL_MAX_S):
            await cr.successor_moved.wait()
            cr.released_by_successor = True
        # The zombie engine now publishes the dispatch it saved: see ``published``.

    def published(self, subject: str, seq: int) -> None:
        """An engine's publish was stored at (or deduplicated to) ``seq``."""
        me = trio.lowlevel.current_task()
        for cr in self.runs.values():
            if cr.case.seam not in ENGINE_SEAMS or subject != task_subject(self.task, cr.run_id):
                continue
            if me is not cr.zombie:
                cr.takeover_seqs.append(seq)
            elif not cr.zombie_done.is_set():
                cr.zombie_seq = seq
                cr.zombie_outcome = "published"
                cr.zombie_done.set()

    def handlers(self, agent: ScriptedAgent) -> dict[str, Handler]:
        """The agent's handler, wrapped to see which delivery ended how."""

        async def turn(tc: TaskContext) -> None:
            outcome = "returned"
            try:
                await agent.turn(tc)
            except BaseException as exc:
                outcome = type(exc).__name__
                raise
            finally:
                self._ended(tc, outcome)

        return {agent.task: turn}

    def _ended(self, tc: TaskContext, outcome: str) -> None:
        cr = self.runs.get(tc.run_id)
        if cr is None or cr.zombie is None or tc.iteration != cr.case.iteration:
            return
        if trio.lowlevel.current_task() is cr.zombie:
            cr.zombie_outcome = outcome
            cr.zombie_done.set()
        else:
            cr.successor_moved.set()


@attrs.define(eq=False)
class Cluster:
    transport: Transport
    agent: ScriptedAgent
    engine_kills: int = 0


@attrs.define(eq=False)
class _WatchedTransport:
    """An engine's connection, with its publishes reported to the book (how the harness sees a
    resumed zombie engine publish, and what the stream made of it)."""

    inner: Transport
    book: CaseBook

    async def publish(self, subject: str, data: bytes, **kwargs: Any) -> int:
        seq = await self.inner.publish(subject, data, **kwargs)
        self.book.published(subject, seq)
        return seq

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def _engine_slot(
    connect: Connect,
    book: CaseBook,
    cluster: Cluster,
    nursery: trio.Nursery,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """One engine process: killed by the engine hook, restarted by this supervisor. When its
    engine stalls, the supervisor starts another slot beside it, as a cluster's peers take over."""
    first = True
    while True:
        async with connect() as transport:
            with trio.CancelScope() as scope:

                def take_over() -> None:
                    nursery.start_soon(_engine_slot, connect, book, cluster, nursery)

                async def hook(ctx: SeamContext, scope: trio.CancelScope = scope) -> None:
                    await book.engine_hook(ctx, scope.cancel, take_over)

                engine = Engine(
                    cast(Transport, _WatchedTransport(transport, book)),
                    ack_wait_s=ENGINE_ACK_WAIT_S,
                    timer_ack_wait_s=ENGINE_ACK_WAIT_S,
                    fetch_wait_s=ENGINE_FETCH_WAIT_S,
                    legacy_step_events=False,
                )
                with install_hook(hook):
                    async with trio.open_nursery() as nursery:
                        await nursery.start(engine.run)
                        if first:
                            first = False
                            task_status.started()
                        await trio.sleep_forever()
            cluster.engine_kills += 1


async def _worker(
    connect: Connect,
    book: CaseBook,
    agent: ScriptedAgent,
    worker_id: str,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with connect() as transport:
        worker = Worker(
            transport, book.handlers(agent), ack_wait_s=WORKER_ACK_WAIT_S, worker_id=worker_id
        )
        with install_hook(book.worker_hook):
            async with trio.open_nursery() as nursery:
                await nursery.start(worker.run)
                task_status.started()


@asynccontextmanager
async def open_cluster(
    connect: Connect, book: CaseBook, agent: ScriptedAgent
) -> AsyncIterator[Cluster]:
    """Provision, register the agent workflow, start the engines and workers; stop them on exit."""
    async with connect() as transport:
        await provision(transport)
        await Service(transport).register_workflow(agent_workflow(WORKFLOW, task=agent.task))
        cluster = Cluster(transport, agent)
        async with trio.open_nursery() as nursery:
            for _ in range(ENGINES):
                await nursery.start(_engine_slot, connect, book, cluster, nursery)
            for i in range(WORKERS):
                await nursery.start(_worker, connect, book, agent, f"worker-{i}")
            yield cluster
            nursery.cancel_scope.cancel()


@attrs.frozen
class Outcome:
    """What a case left behind, read after its run finished (and its zombie ended)."""

    run: CaseRun
    snapshot: RunSnapshot | None
    records: list[tuple[int, JournalRecord]]
    error: str | None = None
    #: The batch mark of each record stored in an atomic batch, by sequence (for the audit).
    batches: dict[int, str] = attrs.field(factory=dict)


async def run_case(cluster: Cluster, book: CaseBook, case: Case) -> Outcome:
    cr = book.add(case)
    service = Service(cluster.transport, RuntimeEnv(new_id=lambda: cr.run_id))
    snap: RunSnapshot | None = None
    error: str | None = None
    try:
        with trio.fail_after(CASE_TIMEOUT_S):
            await service.start_run(WORKFLOW, {"ask": "deploy"})
            snap = await service.wait_for_run(cr.run_id, CASE_TIMEOUT_S)
            if cr.zombie is not None:
                if case.seam in RUN_END_RELEASES and not cr.successor_moved.is_set():
                    await _release_by_run_end(cluster.transport, book.task, cr)
                await cr.zombie_done.wait()
    except (trio.TooSlowError, RunWaitTimeout) as exc:
        error = f"timed out: {exc!r}"
    records, unreadable, batches = await read_journal_for_audit(
        cluster.transport, cr.run_id, AGENT_STEP_ID
    )
    if unreadable:
        error = f"{error or ''} unreadable records: {unreadable}".strip()
    return Outcome(cr, snap, records, error, batches)


async def _release_by_run_end(transport: Transport, task: str, cr: CaseRun) -> None:
    """Once the run's end removed its tasks, release a stall that no successor released."""
    with trio.move_on_after(STALL_MAX_S):
        while await transport.get_last_msg(TASK_STREAM, task_subject(task, cr.run_id)):
            if cr.successor_moved.is_set():
                return
            await trio.sleep(RUN_END_POLL_S)
        if not cr.successor_moved.is_set():
            cr.released_by_run_end = True
            cr.successor_moved.set()


async def run_cases(connect: Connect, cases: list[Case], agent: ScriptedAgent) -> list[Outcome]:
    """Run every case at once in one cluster; outcomes in the order of ``cases``."""
    book = CaseBook(agent.task)
    outcomes: list[Outcome | None] = [None] * len(cases)

    async def one(i: int, cluster: Cluster) -> None:
        outcomes[i] = await run_case(cluster, book, cases[i])

    with trio.fail_after(ROW_TIMEOUT_S):
        async with open_cluster(connect, book, agent) as cluster, trio.open_nursery() as nursery:
            for i in range(len(cases)):
                nursery.start_soon(one, i, cluster)
    done = [o for o in outcomes if o is not None]
    assert len(done) == len(cases)
    return done


def _result_of(records: list[tuple[int, JournalRecord]], iteration: int) -> ToolResultRecord | None:
    found = [r for _, r in records if isinstance(r, ToolResultRecord) and r.iteration == iteration]
    return found[-1] if found else None


def problems(outcome: Outcome, counters: AgentCounters) -> list[str]:
    """Everything wrong with one case's outcome (empty when it is right)."""
    cr, snap, case = outcome.run, outcome.snapshot, outcome.run.case
    run = cr.run_id
    out: list[str] = []
    if outcome.error is not None:
        out.append(outcome.error)
    if cr.fired != 1:
        out.append(f"the crash fired {cr.fired} times, not once (seam never reached?)")
    answer: JsonValue = expected_answer()
    if snap is None:
        out.append("the run did not finish")
    else:
        if snap.status is not RunStatus.COMPLETED:
            out.append(f"run ended {snap.status.value}: {snap.error}")
        if snap.output != answer and snap.outputs().get(AGENT_STEP_ID) != answer:
            out.append(f"run output {snap.output!r} is not the crash-free answer {answer!r}")
        iterations = snap.step(AGENT_STEP_ID).iterations
        if iterations != len(DEFAULT_SCRIPT):
            out.append(f"the engine counts {iterations} iterations, not {len(DEFAULT_SCRIPT)}")
        report = check(outcome.records, iterations, batches=outcome.batches)
        if not report.ok:
            out.append(report.render())
    if counters.answers.get(run) != answer:
        out.append(f"the agent answered {counters.answers.get(run)!r}")
    # Redelivery within one attempt reuses recorded responses, and a fenced holder asks nothing:
    # one model request per iteration, whatever crashed (so AFTER_COMMIT repeats no turn); a
    # crash inside the batch that would have stored the response loses it, so it is asked again
    # once (and a zombie's batch is fenced whole: nothing of it is stored).
    asked = counters.model_requests.get(run, 0)
    want_asked = len(DEFAULT_SCRIPT) + (1 if case.seam in MODEL_LOST_SEAMS else 0)
    if asked != want_asked:
        out.append(f"{asked} model requests, not {want_asked} (one per iteration, and one "
                   "again for a response lost inside its batch)")  # fmt: skip
    for iteration, tool in enumerate(TOOL_AT):
        out.extend(_tool_problems(outcome, counters, iteration, tool))
    if case.mode is Mode.STALL:
        if cr.released_by_run_end and case.seam not in RUN_END_RELEASES:
            out.append("the run ended while a stall before its lifecycle event held the task")
        if not (cr.released_by_successor or cr.released_by_run_end):
            out.append("the stall ended before a successor claimed or finished the task")
        if case.seam in ENGINE_SEAMS:
            want = "published"
            if cr.zombie_seq is None or cr.zombie_seq not in cr.takeover_seqs:
                out.append(
                    f"the zombie engine's task publish got sequence {cr.zombie_seq}, not one of "
                    f"the takeover's {cr.takeover_seqs} (not deduplicated)"
                )
        else:
            want = "returned" if case.seam in COMMITTED_SEAMS else "Fenced"
        if cr.zombie_outcome != want:
            out.append(f"the zombie ended with {cr.zombie_outcome!r}, not {want!r}")
    return out


def _tool_problems(
    outcome: Outcome, counters: AgentCounters, iteration: int, tool: str
) -> list[str]:
    case, run = outcome.run.case, outcome.run.run_id
    unsafe = tool in UNSAFE_TOOLS
    starts, effects = counters.starts(run, tool), counters.effects(run, tool)
    out: list[str] = []
    if unsafe and (starts > 1 or effects > 1):
        out.append(f"unsafe {tool} started {starts} times, took effect {effects} times")
    open_intent = iteration == case.iteration and case.seam in INTENT_OPEN_SEAMS
    if not open_intent:
        # Nothing was in flight, or the result was recorded (AFTER_TOOL_RESULT reuses it).
        allowed: tuple[int, ...] = (1,)
    elif case.seam in EFFECT_DONE_SEAMS:
        # The holder ran the tool, then died or stalled before recording its result: the
        # successor runs a safe intent again and records an unsafe one interrupted, killed or
        # stalled alike (the zombie's own result is then fenced).
        allowed = (1,) if unsafe else (2,)
    elif case.mode is Mode.KILL:
        # The dead holder never started it: a safe intent is run again, an unsafe one never.
        allowed = (0,) if unsafe else (1,)
    else:
        # The zombie may still run it after its successor moved on (the spec allows that); the
        # successor runs it again only if it is safe.
        allowed = (0, 1) if unsafe else (1, 2)
    if starts not in allowed:
        out.append(f"{tool} (iteration {iteration}) started {starts} times, expected {allowed}")
    if open_intent and case.seam in EFFECT_DONE_SEAMS and effects != starts:
        out.append(f"{tool} (iteration {iteration}) took effect {effects} times of {starts} starts")
    result = _result_of(outcome.records, iteration)
    want_interrupted = open_intent and unsafe
    if result is None:
        out.append(f"no tool result recorded for iteration {iteration}")
    elif result.interrupted != want_interrupted:
        out.append(
            f"{tool} result of iteration {iteration} interrupted={result.interrupted}, "
            f"expected {want_interrupted}"
        )
    return out


def render(outcomes: list[Outcome], counters: AgentCounters) -> str:
    """A readable list of every failing case (empty when all pass)."""
    lines: list[str] = []
    for o in outcomes:
        found = problems(o, counters)
        if found:
            lines.append(f"{o.run.case.name} (run {o.run.run_id}):")
            lines.extend(f"    {p}" for p in found)
    return "\n".join(lines)
