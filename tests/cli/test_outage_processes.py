"""Every CLI process rides out a 90 s NATS outage mid-run (issue 16, item 1), as separate
processes: ``dagnats worker`` (the native client) runs the agent, ``dagnats serve --client
nats-py`` and ``dagnats dev --nats URL`` (native, no workers) each run an engine and an API on
the same server.

The real server is stopped while the agent's unsafe tool is in flight; the tool completes while
NATS is away; the server stays down for :data:`OUTAGE_S` and is restarted on its store and
port. Then the run finishes with the tool started once, each process said once that NATS was
unreachable and once that it was back, and both APIs' ``/healthz`` said ``down`` during the
outage and ``up`` after it. (Before the fix a worker gave its connection up after ~30 s and
exited rc 1; the in-process twin is tests/e2e/test_nats_outage.py.)
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

import httpx
import pytest
import trio
from _outage import LOOK_EVERY_S, OUTAGE_S, RECOVERY_BOUND_S, START_BOUND_S, health_answer

from dagnats_trio.journal import check, read_journal
from dagnats_trio.protocol import ToolIntentRecord, ToolResultRecord
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import open_nats_transport, provision

from ._dev import DevProcess, start_dagnats
from ._outage_workers import FIFO_ENV, TOOL_STARTED

#: Bound on reading what a stopped process printed last.
STOP_BOUND_S: Final = 20.0
WORKFLOW: Final = "outage-processes"
UNREACHABLE: Final = "NATS is unreachable"
BACK_AFTER: Final = re.compile(r"NATS is back \(.*?\) after ([0-9.]+) s unreachable")
#: One message about the connection, whole: from its logger's name to its last words.
SAID: Final = re.compile(
    r"\S+: NATS is (?:unreachable \(.*?calls fail meanwhile|back \(.*? s unreachable)"
)


def _open_to_write(fifo: Path) -> int:
    return os.open(fifo, os.O_WRONLY)  # blocks until the tool opens it to read


def _said(stderr: Path) -> list[str]:
    """What the process logged about NATS going and coming back, each message whole (rich
    wraps long lines: whitespace is folded before the messages are cut out)."""
    text = " ".join(stderr.read_text(errors="replace").split())
    return SAID.findall(text)


def _stop(proc: DevProcess) -> int:
    try:
        return proc.stop()
    except BaseException:
        return -1


@pytest.mark.slow
async def test_worker_serve_and_dev_processes_ride_out_a_90s_outage(
    fresh_nats_server: NatsServer, tmp_path: Path
) -> None:
    server = fresh_nats_server
    url = server.url
    async with open_nats_transport(url, name="outage-setup") as t:
        await provision(t)
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    env = {FIFO_ENV: str(fifo)}
    logs = {name: tmp_path / f"{name}.stderr" for name in ("worker", "serve", "dev")}
    procs: dict[str, DevProcess] = {}

    async def start(name: str, verb: str, *args: str) -> DevProcess:
        procs[name] = await trio.to_thread.run_sync(
            lambda: start_dagnats(verb, args, env=env, stderr=logs[name])
        )
        return procs[name]

    writer = -1
    try:
        worker = await start("worker", "worker", "_outage_workers:handlers", "--nats", url)
        serve = await start(
            "serve", "serve", "--nats", url, "--listen", "127.0.0.1:0", "--client", "nats-py"
        )
        dev = await start("dev", "dev", "--nats", url, "--listen", "127.0.0.1:0")
        async with (
            httpx.AsyncClient(base_url=serve.api_url, timeout=START_BOUND_S) as serve_http,
            httpx.AsyncClient(base_url=dev.api_url, timeout=START_BOUND_S) as dev_http,
        ):
            definition = {"name": WORKFLOW, "steps": [{"id": "agent", "task": "outage_agent"}]}
            assert (await serve_http.post("/workflows", json=definition)).status_code == 201
            r = await dev_http.post("/runs", json={"workflow": WORKFLOW})
            assert r.status_code == 201, r.text
            run_id = r.json()["run_id"]
            for http in (serve_http, dev_http):
                assert await health_answer(http, 200, START_BOUND_S) == {
                    "status": "ok",
                    "nats": "up",
                }
            with trio.fail_after(START_BOUND_S):
                writer = await trio.to_thread.run_sync(_open_to_write, fifo, abandon_on_cancel=True)

            await server.stop_process()  # the tool is in flight
            stopped_at = trio.current_time()
            os.write(writer, b"charged")
            os.close(writer)
            writer = -1  # the tool completes while NATS is away
            down = [
                await health_answer(http, 503, START_BOUND_S) for http in (serve_http, dev_http)
            ]
            refused = [await http.get(f"/runs/{run_id}") for http in (serve_http, dev_http)]
            for proc in procs.values():
                assert proc.proc.poll() is None, "a process exited during the outage"
            await trio.sleep(max(0.0, OUTAGE_S - (trio.current_time() - stopped_at)))
            alive_at_end = {name: proc.proc.poll() is None for name, proc in procs.items()}
            await server.start()
            outage_s = trio.current_time() - stopped_at
            assert server.url == url, "the restarted server moved: the clients cannot follow"

            back_at = trio.current_time()
            with trio.fail_after(RECOVERY_BOUND_S):
                while True:
                    r = await serve_http.get(f"/runs/{run_id}")
                    if r.status_code == 200 and r.json()["status"] != "running":
                        break
                    await trio.sleep(LOOK_EVERY_S)
            recovered_s = trio.current_time() - back_at
            run = r.json()
            up = [await health_answer(http, 200, START_BOUND_S) for http in (serve_http, dev_http)]
        async with open_nats_transport(url, name="outage-check") as t:
            records = await read_journal(t, run_id, "agent")
    finally:
        if writer >= 0:
            os.close(writer)
        rcs = {name: await trio.to_thread.run_sync(_stop, proc) for name, proc in procs.items()}

    starts: list[str] = []
    while (line := worker.later.get(timeout=STOP_BOUND_S)) is not None:
        if line.startswith(TOOL_STARTED):
            starts.append(line)
    said = {name: _said(path) for name, path in logs.items()}
    print(
        f"outage {outage_s:.1f} s; run {run['status']} {recovered_s:.1f} s after the restart; "
        f"tool starts {starts}; records {[rec.TYPE for _, rec in records]}; "
        f"healthz down {down}, up {up}; GET run during it {[r.status_code for r in refused]} "
        f"{[r.json()['error']['code'] for r in refused]}; rc {rcs}"
    )
    for name, lines in said.items():
        print(f"{name} said:")
        for line in lines:
            print(f"  {line}")
    assert all(alive_at_end.values()), alive_at_end
    assert run["status"] == "completed", run
    assert len(starts) == 1 and "delivery 1 " in starts[0], starts
    intents = [rec for _, rec in records if isinstance(rec, ToolIntentRecord)]
    results = [rec for _, rec in records if isinstance(rec, ToolResultRecord)]
    assert intents and {i.name for i in intents} == {"charge"}
    assert len([res for res in results if not res.interrupted]) <= 1
    assert len(results) == len(intents)
    assert check(records, engine_iterations=1).ok
    assert down == [{"status": "unavailable", "nats": "down"}] * 2
    # Meanwhile a NATS-backed route answers 503 ``unavailable``: the API serves, and says why.
    assert [(r.status_code, r.json()["error"]["code"]) for r in refused] == [
        (503, "unavailable")
    ] * 2
    assert up == [{"status": "ok", "nats": "up"}] * 2
    for name, lines in said.items():
        unreachable = [line for line in lines if UNREACHABLE in line]
        back = [m for line in lines if (m := BACK_AFTER.search(line))]
        assert len(unreachable) == 1 and len(back) == 1, (name, lines)
        assert float(back[0].group(1)) >= OUTAGE_S - 1, (name, lines)
    assert rcs == {"worker": 0, "serve": 0, "dev": 0}
