"""The 90 s outage scenario of tests/cli/test_outage_processes.py, as separate processes, run by
the ``outages`` fixture (tests/conftest.py) beside the other outage scenarios; the test asserts
on what it returns.

``dagnats worker`` (the native client) runs the agent, ``dagnats serve --client nats-py`` and
``dagnats dev --nats URL`` (native, no workers) each run an engine and an API on the same
server, a nats-server of the scenario's own. It is stopped while the agent's unsafe tool is in
flight; the tool completes while NATS is away; the server stays down for :data:`OUTAGE_S` and is
restarted on its store and port.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import trio
from _outage import LOOK_EVERY_S, OUTAGE_S, RECOVERY_BOUND_S, START_BOUND_S, health_answer

from dagnats_trio.journal import read_journal
from dagnats_trio.protocol import JournalRecord
from dagnats_trio.server import NatsServer, open_nats_server
from dagnats_trio.transport import open_nats_transport, provision

from ._dev import DevProcess, start_dagnats
from ._outage_workers import FIFO_ENV, TOOL_STARTED

#: Bound on reading what a stopped process printed last.
STOP_BOUND_S: Final = 20.0
WORKFLOW: Final = "outage-processes"
PROCESSES: Final = ("worker", "serve", "dev")


@attrs.frozen
class ProcessesOutage:
    """What the scenario saw, and where each process's stderr went."""

    outage_s: float
    recovered_s: float
    run: dict[str, Any]
    records: list[tuple[int, JournalRecord]]
    down: list[dict[str, str]]
    refused: list[httpx.Response]
    up: list[dict[str, str]]
    alive_at_end: dict[str, bool]
    rcs: dict[str, int]
    tool_starts: list[str]
    logs: dict[str, Path]


def _open_to_write(fifo: Path) -> int:
    return os.open(fifo, os.O_WRONLY)  # blocks until the tool opens it to read


def _stop(proc: DevProcess) -> int:
    try:
        return proc.stop()
    except BaseException:
        return -1


async def ride_out_as_processes(tmp_path: Path) -> ProcessesOutage:
    """One run through the three processes across a :data:`OUTAGE_S` outage; their stderr goes
    to files in ``tmp_path``."""
    async with open_nats_server() as server:
        return await _ride_out(server, tmp_path)


async def _ride_out(server: NatsServer, tmp_path: Path) -> ProcessesOutage:
    url = server.url
    async with open_nats_transport(url, name="outage-setup") as t:
        await provision(t)
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    env = {FIFO_ENV: str(fifo)}
    logs = {name: tmp_path / f"{name}.stderr" for name in PROCESSES}
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
    while (line := await trio.to_thread.run_sync(worker.next_line, STOP_BOUND_S)) is not None:
        if line.startswith(TOOL_STARTED):
            starts.append(line)
    return ProcessesOutage(
        outage_s, recovered_s, run, records, down, refused, up, alive_at_end, rcs, starts, logs
    )
