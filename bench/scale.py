"""Scale-out (issue 12, item 6): on a 3-node cluster, ``dagnats serve`` engine processes and
``dagnats worker`` processes run the scripted agent, every run started at once.

Every stream and bucket has 3 replicas (the engines provision with ``--replicas 3``). The
client starts ``runs`` runs at once through :class:`~dagnats_trio.api.service.Service` and sees
each finish on one KV watch of the runs bucket (reopened if a node's loss ends it; a run's end
missed meanwhile is read back with ``get_run``). Then, for every run: its status and answer,
its unsafe tool's starts as the tool itself marked them outside the journal
(``bench._scale_worker``), and ``journal check`` of its agent step (as ``GET
/runs/{id}/steps/{step}/journal/check`` runs it). With ``--kill-node`` the node leading the
journal stream is SIGKILLed once every run has started and a third have finished, and restarted
on its store :data:`NODE_DOWN_S` later.

Figures: runs, ok, lost (not finished by the deadline), duplicated unsafe starts, journal-check
failures, throughput (runs finished per second, from the first start to the last end), p50/p99
latency (start call to the end seen on the watch), each as a ratio to the raw publish floor
measured on the same cluster in the same run.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

import attrs
import trio

from dagnats_trio.api.service import Service
from dagnats_trio.engine import decode_snapshot
from dagnats_trio.engine.snapshot import RunSnapshot
from dagnats_trio.journal import check, read_journal_for_audit
from dagnats_trio.protocol import RunHeader, RunStatus, from_json, may_be_finished
from dagnats_trio.protocol.layout import JOURNAL_STREAM, RUNS_BUCKET, run_key
from dagnats_trio.server import CLUSTER_SIZE, NatsCluster, node_name, open_nats_cluster
from dagnats_trio.testing import AGENT_STEP_ID, agent_workflow, expected_answer
from dagnats_trio.transport import Transport, TransportError, open_nats_transport

from ._stack import Stack, percentile

#: The folder the worker processes' marker files go to (one file per process), their suffix,
#: and the task the workflow's agent step runs (``bench._scale_worker``).
MARKER_DIR_ENV: Final = "DAGNATS_SCALE_MARKERS"
MARKER_SUFFIX: Final = ".starts"
SCALE_TASK: Final = "scale-agent"
#: The goal's size: runs at once, engine processes, worker processes.
SCALE_RUNS: Final = 1000
SCALE_RUNS_QUICK: Final = 100
SCALE_ENGINES: Final = 2
SCALE_WORKERS: Final = 4
#: Bound on the whole measurement, from the first start to the last end: a run not finished by
#: then is lost. Generous: 1,000 runs on 2 shared cores take minutes.
SCALE_DEADLINE_S: Final = 1800.0
#: Bound on one process's start (banner, "ready").
PROCESS_START_S: Final = 60.0
#: Bound on one process's stop after SIGINT, then it is killed.
PROCESS_STOP_S: Final = 20.0
#: Starts in flight at once (each a few round trips), and journal checks at once afterwards.
START_PARALLEL: Final = 50
CHECK_PARALLEL: Final = 20
#: Client request timeout: generous, a loaded cluster that lost a node answers late.
CLIENT_REQUEST_TIMEOUT_S: Final = 10.0
#: With --kill-node: the node killed is the journal stream's leader (this one if no leader is
#: known), when (share of runs finished), and how long it stays down.
KILLED_NODE_FALLBACK: Final = 1
#: Bound on one stream-info request that names the journal stream's leader, and on asking.
INFO_REQUEST_TIMEOUT_S: Final = 2.0
LEADER_LOOKUP_S: Final = 15.0
KILL_AT_FINISHED_SHARE: Final = 1 / 3
NODE_DOWN_S: Final = 5.0
#: Pause before the watch is reopened after it failed (a node's loss).
WATCH_REOPEN_S: Final = 0.5
WORKFLOW: Final = "scale-agent"
ROOT: Final = Path(__file__).resolve().parents[1]
_RUN_KEY_PREFIX: Final = "run."


@attrs.frozen
class ScaleResult:
    """What one measurement found; ``lost`` are the runs not finished by the deadline."""

    runs: int
    ok: int
    lost: tuple[str, ...]
    not_ok: tuple[str, ...]
    duplicated: tuple[str, ...]
    unsafe_starts: int
    check_failures: tuple[str, ...]
    wall_s: float
    latencies_ms: tuple[float, ...]
    floor_us: float
    #: The node killed, 1 if it led the journal stream, the runs finished when it was killed
    #: and when it was back; () when no node was killed.
    fault: tuple[int, ...]

    @property
    def node_killed(self) -> bool:
        return bool(self.fault)

    @property
    def fault_at(self) -> tuple[int, ...]:
        """Runs finished when the node was killed and when it was back."""
        return self.fault[2:]

    @property
    def killed_leader(self) -> bool:
        return self.node_killed and self.fault[1] == 1

    @property
    def throughput(self) -> float:
        return len(self.latencies_ms) / self.wall_s if self.wall_s > 0 else 0.0


class _Processes:
    """``dagnats VERB ...`` children, each returned once it printed ``ready``."""

    def __init__(self, nursery: trio.Nursery, env: dict[str, str], logs: Path) -> None:
        self._nursery = nursery
        self._env = env
        self._logs = logs
        self.procs: list[trio.Process] = []

    async def start(self, name: str, verb: str, *args: str) -> None:
        argv = [str(Path(sys.executable).parent / "dagnats"), verb, *args]
        log = (self._logs / f"{name}.stderr").open("wb")
        process = functools.partial(
            trio.run_process,
            argv,
            cwd=ROOT,
            env=self._env,
            stdout=subprocess.PIPE,
            stderr=log,
            check=False,
        )
        proc: trio.Process = await self._nursery.start(process)
        log.close()
        self.procs.append(proc)
        assert proc.stdout is not None
        seen = b""
        with trio.fail_after(PROCESS_START_S):
            while b"ready" not in seen:
                chunk = await proc.stdout.receive_some()
                if not chunk:
                    raise RuntimeError(f"dagnats {verb} exited before it was ready: {seen!r}")
                seen += chunk
        self._nursery.start_soon(_drain, proc)

    async def stop(self) -> None:
        """SIGINT to each (as Ctrl-C), SIGKILL to any still running after the bound."""
        with trio.CancelScope(shield=True):
            for proc in self.procs:
                if proc.returncode is None:
                    proc.send_signal(2)
            with trio.move_on_after(PROCESS_STOP_S):
                for proc in self.procs:
                    await proc.wait()
            for proc in self.procs:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()


async def _drain(proc: trio.Process) -> None:
    """Read a child's stdout to its end, so a full pipe never blocks it."""
    assert proc.stdout is not None
    while await proc.stdout.receive_some():
        pass


class _Finished:
    """Runs seen finished on the watch, with the time each was first seen; ``reached(n)`` is
    set once ``n`` have finished (for the node fault)."""

    def __init__(self, expected: int, mark: int) -> None:
        self.at: dict[str, float] = {}
        self.snaps: dict[str, RunSnapshot] = {}
        self.expected = expected
        self.mark = mark
        self.all_done = trio.Event()
        self.mark_reached = trio.Event()
        if mark <= 0:
            self.mark_reached.set()
        self.reopened = 0
        #: Runs started (run id -> time of its start call), filled by :func:`_start_all`.
        self.started: dict[str, float] = {}

    def saw(self, snap: RunSnapshot) -> None:
        if snap.run_id in self.at:
            return
        self.at[snap.run_id] = time.monotonic()
        self.snaps[snap.run_id] = snap
        if len(self.at) >= self.mark:
            self.mark_reached.set()
        if len(self.at) >= self.expected:
            self.all_done.set()

    async def watch(self, tp: Transport, *, task_status: trio.TaskStatus[None]) -> None:
        started = False
        while True:
            try:
                async with tp.kv_watch(RUNS_BUCKET, _RUN_KEY_PREFIX) as changes:
                    if not started:
                        started = True
                        task_status.started()
                    else:
                        # The watch tells changes from its opening on: a run that finished
                        # while it was down is read (else the measurement waited for its
                        # deadline, 2 minutes in the test, for a run already finished).
                        await self._read_unfinished(tp)
                    async for entry in changes:
                        # A save that cannot be a finished run's is not decoded (bytes only).
                        if entry.value is None or not may_be_finished(entry.value):
                            continue
                        header: RunHeader = from_json(entry.value, RunHeader)
                        if header.status.finished and header.run_id not in self.at:
                            snap = decode_snapshot(entry.value)
                            if snap.status.finished:
                                self.saw(snap)
            except TransportError:
                if not started:
                    raise
            self.reopened += 1
            await trio.sleep(WATCH_REOPEN_S)

    async def _read_unfinished(self, tp: Transport) -> None:
        """Read the snapshot of each run started and not seen finished; note the finished."""
        for run_id in [r for r in self.started if r not in self.at]:
            entry = await tp.kv_get(RUNS_BUCKET, run_key(run_id))
            if entry is not None and entry.value is not None:
                snap = decode_snapshot(entry.value)
                if snap.status.finished:
                    self.saw(snap)


async def _start_all(service: Service, runs: int, started: dict[str, float]) -> None:
    """Start ``runs`` runs (at most :data:`START_PARALLEL` start calls at once), each put in
    ``started`` (run id -> time of its start call)."""
    limiter = trio.CapacityLimiter(START_PARALLEL)

    async def one(n: int) -> None:
        async with limiter:
            t0 = time.monotonic()
            key = f"scale-{os.getpid()}-{n}"
            while True:  # a start that failed on a lost node is retried with its key
                try:
                    run_id = await service.start_run(WORKFLOW, {"run": n}, idempotency_key=key)
                    break
                except TransportError:
                    await trio.sleep(WATCH_REOPEN_S)
            started[run_id] = t0

    async with trio.open_nursery() as nursery:
        for n in range(runs):
            nursery.start_soon(one, n)


async def _journal_leader(tp: Transport) -> tuple[int, bool]:
    """The index of the node leading the journal stream, and whether one was named (else
    :data:`KILLED_NODE_FALLBACK`, after :data:`LEADER_LOOKUP_S` of asking): the node whose
    loss stalls every run's next write."""
    names = [node_name(i) for i in range(CLUSTER_SIZE)]
    with trio.move_on_after(LEADER_LOOKUP_S):
        while True:
            try:
                answer = await tp.request(
                    f"$JS.API.STREAM.INFO.{JOURNAL_STREAM}", b"", timeout_s=INFO_REQUEST_TIMEOUT_S
                )
                leader = json.loads(answer).get("cluster", {}).get("leader")
            except (TransportError, ValueError, AttributeError):
                leader = None
            if leader in names:
                return names.index(leader), True
            await trio.sleep(WATCH_REOPEN_S)
    return KILLED_NODE_FALLBACK, False


async def _node_fault(
    cluster: NatsCluster,
    tp: Transport,
    finished: _Finished,
    all_started: trio.Event,
    fault: list[int],
) -> None:
    """Once every run is started and ``finished.mark`` have finished: SIGKILL the journal
    stream's leader, restart it on its store :data:`NODE_DOWN_S` later; ``fault`` gets the node,
    whether it led, and the runs finished at the kill and at the restart."""
    await all_started.wait()
    await finished.mark_reached.wait()
    index, led = await _journal_leader(tp)
    fault.extend((index, int(led), len(finished.at)))
    role = "the journal stream's leader" if led else "no leader known"
    print(f"    killing node n{index} ({role}) at {fault[-1]} runs finished", flush=True)
    await cluster.kill_node(index)
    await trio.sleep(NODE_DOWN_S)  # the fault's length, not a wait for anything
    await cluster.start_node(index)
    fault.append(len(finished.at))
    print(f"    node n{index} restarted at {fault[-1]} runs finished", flush=True)


def unsafe_starts(folder: Path) -> collections.Counter[str]:
    """Unsafe tool starts per ``RUN_ID TOOL``, as the tools marked them."""
    starts: collections.Counter[str] = collections.Counter()
    for path in folder.glob(f"*{MARKER_SUFFIX}"):
        starts.update(line for line in path.read_text().splitlines() if line)
    return starts


async def _check_journal(tp: Transport, service: Service, run_id: str) -> str | None:
    """``journal check`` of the run's agent step, as the API's check runs it: None if it
    passes, else what it found."""
    while True:
        try:
            snap = await service.get_run(run_id)
            records, unreadable, batches = await read_journal_for_audit(tp, run_id, AGENT_STEP_ID)
            break
        except TransportError:
            await trio.sleep(WATCH_REOPEN_S)
    step = snap.steps[AGENT_STEP_ID]
    report = check(
        records,
        engine_iterations=step.iterations if step.status.finished else None,
        unreadable=unreadable,
        batches=batches,
    )
    if not records:
        return "no journal"
    return None if report.ok else report.summary()


async def _audit(
    tp: Transport, started: dict[str, float], finished: _Finished, markers: Path
) -> ScaleResult:
    """Status, answer, unsafe starts and journal check of every run started."""
    answer = expected_answer()
    lost = tuple(sorted(set(started) - set(finished.at)))
    not_ok = tuple(
        sorted(
            run_id
            for run_id, snap in finished.snaps.items()
            if snap.status is not RunStatus.COMPLETED or snap.outputs().get(AGENT_STEP_ID) != answer
        )
    )
    starts = unsafe_starts(markers)
    duplicated = tuple(sorted(key for key, n in starts.items() if n > 1))
    service = Service(tp)
    failures: list[str] = []
    limiter = trio.CapacityLimiter(CHECK_PARALLEL)

    async def one(run_id: str) -> None:
        async with limiter:
            problem = await _check_journal(tp, service, run_id)
        if problem is not None:
            failures.append(f"{run_id}: {problem}")

    async with trio.open_nursery() as nursery:
        for run_id in finished.at:
            nursery.start_soon(one, run_id)
    latencies = tuple(
        (finished.at[run_id] - t0) * 1000 for run_id, t0 in started.items() if run_id in finished.at
    )
    return ScaleResult(
        runs=len(started),
        ok=len(finished.at) - len(not_ok),
        lost=lost,
        not_ok=not_ok,
        duplicated=duplicated,
        unsafe_starts=sum(starts.values()),
        check_failures=tuple(sorted(failures)),
        wall_s=0.0,
        latencies_ms=latencies,
        floor_us=0.0,
        fault=(),
    )


async def measure(
    *,
    runs: int = SCALE_RUNS,
    engines: int = SCALE_ENGINES,
    workers: int = SCALE_WORKERS,
    kill_node: bool = False,
    kill_after_finished: int | None = None,
    deadline_s: float = SCALE_DEADLINE_S,
) -> ScaleResult:
    """One measurement on a fresh cluster; see the module docstring. With ``kill_node`` the
    node is killed once every run is started and ``kill_after_finished`` have finished (by
    default :data:`KILL_AT_FINISHED_SHARE` of them)."""
    if kill_after_finished is None:
        kill_after_finished = int(runs * KILL_AT_FINISHED_SHARE)
    with tempfile.TemporaryDirectory(prefix="dagnats-scale-") as tmp:
        folder = Path(tmp)
        markers = folder / "markers"
        markers.mkdir()
        env = {**os.environ, MARKER_DIR_ENV: str(markers), "DAGNATS_LEGACY_STEP_EVENTS": "false"}
        env.pop("DAGNATS_API_TOKEN", None)
        async with open_nats_cluster() as cluster, trio.open_nursery() as nursery:
            nats = ",".join(cluster.urls)
            procs = _Processes(nursery, env, folder)
            try:
                for i in range(engines):
                    await procs.start(
                        f"engine{i}", "serve", "--nats", nats, "--replicas", "3",
                        "--listen", "127.0.0.1:0",
                    )  # fmt: skip
                for i in range(workers):
                    await procs.start(f"worker{i}", "worker", "bench._scale_worker:handlers",
                                      "--nats", nats)  # fmt: skip
                async with open_nats_transport(
                    cluster.urls, name="bench-scale", request_timeout_s=CLIENT_REQUEST_TIMEOUT_S
                ) as tp:
                    floor_us = await Stack(tp, tp, tp).publish_floor_us()
                    service = Service(tp)
                    await service.register_workflow(agent_workflow(WORKFLOW, task=SCALE_TASK))
                    finished = _Finished(runs, kill_after_finished)
                    all_started = trio.Event()
                    fault: list[int] = []
                    await nursery.start(finished.watch, tp)
                    started = finished.started
                    first = time.monotonic()
                    with trio.move_on_after(deadline_s):
                        async with trio.open_nursery() as inner:
                            if kill_node:
                                inner.start_soon(
                                    _node_fault, cluster, tp, finished, all_started, fault
                                )
                            await _start_all(service, runs, started)
                            all_started.set()
                            await finished.all_done.wait()
                    for run_id in set(started) - set(finished.at):
                        # A run that ended while the watch was being reopened.
                        snap = await service.get_run(run_id)
                        if snap.status.finished:
                            finished.saw(snap)
                    last = max(finished.at.values(), default=first)
                    result = await _audit(tp, started, finished, markers)
            finally:
                await procs.stop()
                nursery.cancel_scope.cancel()
    return attrs.evolve(result, wall_s=last - first, floor_us=floor_us, fault=tuple(fault))


def report(result: ScaleResult, *, engines: int, workers: int) -> dict[str, float]:
    """Print the figures; return the headline ones."""
    lat = list(result.latencies_ms) or [0.0]
    p50, p99 = percentile(lat, 50), percentile(lat, 99)
    floor_ms = result.floor_us / 1000
    fault = (
        f"n{result.fault[0]} ({'journal leader' if result.killed_leader else 'no leader known'})"
        f" killed at {result.fault_at[0]} runs finished, back at {result.fault_at[-1]}"
        if result.node_killed
        else "no fault"
    )
    print(f"    runs {result.runs}, ok {result.ok}, lost {len(result.lost)}, not ok "
          f"{len(result.not_ok)}, duplicated unsafe starts {len(result.duplicated)} "
          f"(of {result.unsafe_starts} starts), journal-check failures "
          f"{len(result.check_failures)}")  # fmt: skip
    print(f"    {result.wall_s:.1f} s wall: {result.throughput:.1f} runs/s; latency p50 "
          f"{p50:.0f} ms ({p50 / floor_ms:.0f}x floor), p99 {p99:.0f} ms "
          f"({p99 / floor_ms:.0f}x floor); floor {result.floor_us:.0f} us "
          f"(raw publish, same cluster); {engines} engines, {workers} workers, {fault}; "
          f"load {_load()}")  # fmt: skip
    for what, ids in (
        ("lost", result.lost),
        ("not ok", result.not_ok),
        ("duplicated", result.duplicated),
        ("journal check", result.check_failures),
    ):
        for line in ids[:5]:
            print(f"    {what}: {line}")
    tag = "scale_kill" if result.node_killed else "scale"
    return {
        f"{tag}_runs": result.runs,
        f"{tag}_ok": result.ok,
        f"{tag}_lost": len(result.lost),
        f"{tag}_duplicated": len(result.duplicated),
        f"{tag}_check_failures": len(result.check_failures),
        f"{tag}_runs_per_s": round(result.throughput, 1),
        f"{tag}_p50_ms": round(p50, 1),
        f"{tag}_p99_ms": round(p99, 1),
        f"{tag}_p50_ratio": round(p50 / floor_ms, 1),
    }


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(*, quick: bool = False, kill_node: bool = False, runs: int = 0) -> dict[str, float]:
    n = runs or (SCALE_RUNS_QUICK if quick else SCALE_RUNS)
    fault = ", one node killed and restarted mid-run" if kill_node else ""
    print(f"== scale: {n} scripted-agent runs at once on a 3-node cluster (3 replicas), "
          f"{SCALE_ENGINES} engine processes (dagnats serve), {SCALE_WORKERS} worker processes "
          f"(dagnats worker){fault}; load before {_load()}")  # fmt: skip
    result = trio.run(
        functools.partial(
            measure, runs=n, engines=SCALE_ENGINES, workers=SCALE_WORKERS, kill_node=kill_node
        )
    )
    return report(result, engines=SCALE_ENGINES, workers=SCALE_WORKERS)


if __name__ == "__main__":
    run()
