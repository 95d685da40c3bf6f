"""The CLI's processes killed (SIGKILL) and stopped (SIGSTOP, then SIGCONT) while agents run an
unsafe tool, on a real nats-server: two ``dagnats serve`` (engine and API; the engines share the
history consumer, as a cluster's do) and two ``dagnats worker`` processes running the agent of
tests/cli/_chaos_workers.py (a safe tool, an unsafe tool, an answer).

First a zombie, on purpose: the worker inside a run's unsafe tool is stopped there, its successor
records the call interrupted and finishes the run, then the stopped worker is resumed and its tool
returns. It must write nothing more into that journal. Then a seeded random schedule of kills
(the process is started again) and stops (of 0.1 to 2.5 s, often past the 0.8 s lease) of any of
the four processes while runs keep being started. Afterwards every run completes, every unsafe
call started at most once (exactly once when its result was recorded), and ``journal check``
passes on every run. ``DAGNATS_SIGNALS_SEED`` replays a schedule (the seed is printed).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio

from dagnats_trio.journal import read_journal
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import open_nats_transport, provision

from ._chaos_workers import LOG_ENV
from ._dev import DevProcess, dagnats_command, start_dagnats, start_dev

WORKFLOW: Final = "signals"
#: The agent's handlers, as ``dagnats worker`` and ``dagnats dev --worker`` name them.
WORKERS: Final = "_chaos_workers:handlers"
DEFINITION: Final = {
    "name": WORKFLOW,
    "steps": [
        {
            "id": "agent",
            "task": "chaos_agent",
            "type": "agent_loop",
            "agent_loop": {"max_iterations": 10},
            # A kill right after each of several claims in a row ends an attempt (restart_limit);
            # the retry resumes from the journal, so the run still completes.
            "retry": {"max_attempts": 20, "initial_delay": 100},
        }
    ],
}
#: Length of the random schedule, and the bounds of its pauses and stops.
CHAOS_S: Final = 15.0
BETWEEN_SIGNALS_S: Final = (0.2, 1.2)
STOPPED_S: Final = (0.1, 2.5)
KILL_ODDS: Final = 0.35
#: Runs started before each signal, so several are in flight when it lands.
RUNS_PER_SIGNAL: Final = 3
#: Bound of every run finishing once the schedule is over (a task redelivered several times
#: waits out a growing AckWait: up to 30 s).
FINISH_BOUND_S: Final = 180.0
#: Bound of one step of the zombie scenario (a takeover, a run's end, the zombie's end).
STEP_BOUND_S: Final = 60.0
#: Bound of one HTTP request (the API may be stopped or restarting: requests are retried).
HTTP_TIMEOUT_S: Final = 3.0
LOOK_EVERY_S: Final = 0.1
CLI_BOUND_S: Final = 60.0
#: The processes: two engines sharing the history consumer (the first one's API is the one the
#: test talks to) and two workers.
NAMES: Final = ("serve", "serve-2", "worker-1", "worker-2")


class Fleet:
    """The processes, started again when killed; ``api`` follows ``serve``'s new port."""

    def __init__(self, url: str, log: Path, logs: Path) -> None:
        self.url = url
        self.env = {LOG_ENV: str(log)}
        self.logs = logs
        self.procs: dict[str, DevProcess] = {}
        self.starts: Counter[str] = Counter()

    @property
    def api(self) -> str:
        return self.procs["serve"].api_url

    async def start(self, name: str) -> None:
        self.starts[name] += 1
        stderr = self.logs / f"{name}.{self.starts[name]}.stderr"
        if name.startswith("serve"):
            args = ["--nats", self.url, "--listen", "127.0.0.1:0"]
        else:
            args = [WORKERS, "--nats", self.url]
        verb = "serve" if name.startswith("serve") else "worker"
        self.procs[name] = await trio.to_thread.run_sync(
            lambda: start_dagnats(verb, args, env=self.env, stderr=stderr)
        )

    def pid(self, name: str) -> int:
        return self.procs[name].proc.pid

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.proc.poll() is None:
                proc.proc.send_signal(signal.SIGCONT)
                proc.stop()


def _log_lines(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


async def _wait_for_line(log: Path, prefix: list[str]) -> list[str]:
    with trio.fail_after(STEP_BOUND_S):
        while True:
            for fields in _log_lines(log):
                if fields[: len(prefix)] == prefix:
                    return fields
            await trio.sleep(LOOK_EVERY_S)


async def _request(fleet: Fleet, method: str, path: str, **kw: Any) -> httpx.Response:
    """One API request, retried while ``serve`` is stopped or starting again."""
    with trio.fail_after(FINISH_BOUND_S):
        while True:
            try:
                async with httpx.AsyncClient(base_url=fleet.api, timeout=HTTP_TIMEOUT_S) as c:
                    r = await c.request(method, path, **kw)
                if r.status_code < 500:
                    return r
            except httpx.HTTPError:
                pass
            await trio.sleep(LOOK_EVERY_S)


async def _start_run(fleet: Fleet, key: str, payload: Any) -> str:
    body = {"workflow": WORKFLOW, "input": payload, "idempotency_key": key}
    r = await _request(fleet, "POST", "/runs", json=body)
    assert r.status_code in (200, 201), r.text
    return str(r.json()["run_id"])


async def _finished(fleet: Fleet, run_id: str) -> dict[str, Any]:
    with trio.fail_after(FINISH_BOUND_S):
        while True:
            r = await _request(fleet, "GET", f"/runs/{run_id}")
            assert r.status_code == 200, r.text
            if r.json()["status"] != "running":
                return dict(r.json())
            await trio.sleep(LOOK_EVERY_S)


def _journal_check_cli(api: str, run_id: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DAGNATS_API_TOKEN"}
    return subprocess.run(
        [*dagnats_command(), "journal", "check", run_id, "--api", api],
        capture_output=True,
        text=True,
        timeout=CLI_BOUND_S,
        env=env,
        check=False,
    )


@pytest.mark.slow
async def test_processes_killed_and_stopped_at_random_never_repeat_an_unsafe_tool(
    fresh_nats_server: NatsServer, tmp_path: Path
) -> None:
    seed = int(os.environ.get("DAGNATS_SIGNALS_SEED", random.randrange(2**32)))
    print(f"\nseed {seed} (DAGNATS_SIGNALS_SEED={seed} replays the schedule)")
    rng = random.Random(seed)
    url = fresh_nats_server.url
    async with open_nats_transport(url, name="signals-setup") as t:
        await provision(t)
    log = tmp_path / "tools.log"
    fleet = Fleet(url, log, tmp_path)
    try:
        for name in NAMES:
            await fleet.start(name)
        r = await _request(fleet, "POST", "/workflows", json=DEFINITION)
        assert r.status_code == 201, r.text

        # --- a zombie inside the unsafe tool ------------------------------------------------
        zombie_run = await _start_run(fleet, "zombie", {"hold": True})
        started = await _wait_for_line(log, ["start", f"{zombie_run}.agent.1.1", "send"])
        zombie = int(started[3])
        os.kill(zombie, signal.SIGSTOP)
        done = await _finished(fleet, zombie_run)
        assert done["status"] == "completed", done
        assert done["output"]["send"] == {"interrupted": True}, done
        async with open_nats_transport(url, name="signals-read") as t:
            before = await read_journal(t, zombie_run, "agent")
        await trio.Path(str(log) + ".release").touch()
        os.kill(zombie, signal.SIGCONT)
        ended = await _wait_for_line(log, ["end", zombie_run, str(zombie)])
        async with open_nats_transport(url, name="signals-read") as t:
            after = await read_journal(t, zombie_run, "agent")
        print(
            f"zombie {zombie}: resumed after its successor finished the run, ended with "
            f"{ended[3]}; records {len(before)} -> {len(after)}"
        )
        assert after == before, "a fenced holder wrote into the journal"

        # --- the random schedule ------------------------------------------------------------
        run_ids = [zombie_run]
        signals: Counter[str] = Counter()
        deadline = trio.current_time() + CHAOS_S
        while trio.current_time() < deadline:
            for _ in range(RUNS_PER_SIGNAL):
                run_ids.append(await _start_run(fleet, f"chaos-{len(run_ids)}", len(run_ids)))
            await trio.sleep(rng.uniform(*BETWEEN_SIGNALS_S))
            name = rng.choice(NAMES)
            proc = fleet.procs[name].proc
            if rng.random() < KILL_ODDS:
                proc.send_signal(signal.SIGKILL)
                await trio.to_thread.run_sync(proc.wait)
                signals[f"kill {name}"] += 1
                await fleet.start(name)
            else:
                proc.send_signal(signal.SIGSTOP)
                await trio.sleep(rng.uniform(*STOPPED_S))
                proc.send_signal(signal.SIGCONT)
                signals[f"stop {name}"] += 1
        finished = [await _finished(fleet, run_id) for run_id in run_ids]
        for name in NAMES:
            assert fleet.procs[name].proc.poll() is None, f"{name} exited on its own"

        # --- what the tools and the journals say --------------------------------------------
        starts = Counter(
            (fields[1], fields[2]) for fields in _log_lines(log) if fields[0] == "start"
        )
        unsafe = {key: n for (key, name), n in starts.items() if name == "send"}
        interrupted = 0
        for run in finished:
            assert run["status"] == "completed", run
            key = f"{run['run_id']}.agent.1.1"
            if run["output"]["send"]["interrupted"]:
                interrupted += 1
                assert unsafe.get(key, 0) <= 1, (key, unsafe.get(key))
            else:
                assert unsafe.get(key, 0) == 1, (key, unsafe.get(key))
        repeated = {key: n for key, n in unsafe.items() if n > 1}
        assert not repeated, f"unsafe tool started more than once: {repeated}"
        verdicts = []
        for run_id in run_ids:
            r = await _request(fleet, "GET", f"/runs/{run_id}/steps/agent/journal/check")
            assert r.status_code == 200, r.text
            verdicts.append(r.json())
        bad = [v for v in verdicts if not v["ok"] or not v["compared_iterations"]]
        assert not bad, bad
        cli = await trio.to_thread.run_sync(_journal_check_cli, fleet.api, zombie_run)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        print(
            f"{len(run_ids)} runs completed ({interrupted} with the unsafe call interrupted); "
            f"signals {dict(sorted(signals.items()))}; process starts {dict(fleet.starts)}; "
            f"unsafe starts {sum(unsafe.values())} for {len(unsafe)} positions; safe starts "
            f"{sum(n for (_, name), n in starts.items() if name == 'search')}; journal check "
            f"ok on {len(verdicts)} runs; cli: {cli.stdout.strip()}"
        )
    finally:
        await trio.to_thread.run_sync(fleet.stop_all)


#: How long ``dev`` stays stopped: past its worker's 0.8 s lease, so the task is redelivered.
DEV_STOPPED_S: Final = 3.0


@pytest.mark.parametrize("how", ["kill", "stop"])
async def test_a_dev_killed_or_stopped_inside_the_unsafe_tool_finishes_the_run(
    how: str, tmp_path: Path
) -> None:
    """``dagnats dev`` (embedded nats-server, engine, API and worker in one process) while its
    worker is inside the unsafe tool. ``kill``: SIGKILLed (the kernel takes the server down with
    it) and a new dev started on the same ``--data-dir``, which finds the run, its journal and
    its task (operations.md: they survive a restart). ``stop``: SIGSTOPped past the lease and
    resumed, so the task comes back to the same worker while the stopped delivery still holds
    the tool, and that zombie is released only after the run finished. Either way the call is
    recorded interrupted rather than started again, and the run completes with ``journal
    check`` ok."""
    log = tmp_path / "tools.log"
    release = trio.Path(str(log) + ".release")
    data = tmp_path / "data"
    args = ["--data-dir", str(data), "--listen", "127.0.0.1:0", "--worker", WORKERS]
    env = {LOG_ENV: str(log)}
    first = await trio.to_thread.run_sync(lambda: start_dev(args, env=env))
    second: DevProcess | None = None
    try:
        fleet = Fleet(first.nats_url, log, tmp_path)
        fleet.procs["serve"] = first
        r = await _request(fleet, "POST", "/workflows", json=DEFINITION)
        assert r.status_code == 201, r.text
        run_id = await _start_run(fleet, "held", {"hold": True})
        started = await _wait_for_line(log, ["start", f"{run_id}.agent.1.1", "send"])
        if how == "kill":
            first.proc.send_signal(signal.SIGKILL)
            assert await trio.to_thread.run_sync(first.proc.wait) == -signal.SIGKILL
            await release.touch()  # nothing holds the tool any more
            second = await trio.to_thread.run_sync(lambda: start_dev(args, env=env))
            fleet.procs["serve"] = second
            done = await _finished(fleet, run_id)
        else:
            first.proc.send_signal(signal.SIGSTOP)
            await trio.sleep(DEV_STOPPED_S)
            first.proc.send_signal(signal.SIGCONT)
            done = await _finished(fleet, run_id)
            before = (await _request(fleet, "GET", f"/runs/{run_id}/steps/agent/journal")).json()
            await release.touch()
            await _wait_for_line(log, ["end", run_id, started[3]])
            after = (await _request(fleet, "GET", f"/runs/{run_id}/steps/agent/journal")).json()
            assert after == before, "the released zombie wrote into the journal"
        r = await _request(fleet, "GET", f"/runs/{run_id}/steps/agent/journal/check")
        verdict = r.json()
    finally:
        for proc in (first, second):
            if proc is not None and proc.proc.poll() is None:
                proc.proc.send_signal(signal.SIGCONT)
                await trio.to_thread.run_sync(proc.stop)
    starts = [f for f in _log_lines(log) if f[0] == "start" and f[2] == "send"]
    ends = [" ".join(f) for f in _log_lines(log) if f[0] == "end"]
    print(f"{how}: run {done['status']} {done['output']}; unsafe starts {len(starts)}; {ends}")
    assert done["status"] == "completed", done
    assert done["output"]["send"] == {"interrupted": True}, done
    assert len(starts) == 1, starts
    assert verdict["ok"] and verdict["compared_iterations"], verdict
