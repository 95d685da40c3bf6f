"""``dagnats dev`` as processes (issue 9 items 7 and 8): one dev per data directory, an asked-for
``--nats-port`` never moved, and no nats-server left behind by a closed terminal (SIGHUP to the
process group) or a SIGKILLed dev."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from pathlib import Path

import httpx
from _procs import exit_watch, server_dir_of

from dagnats_trio.server import LOCK_FILE_NAME

from ._dev import (
    DEV_STOP_TIMEOUT_S,
    DevProcess,
    port_open,
    start_dev,
)
from ._inproc import refused_by_processes

#: Bound of a run of the echo worker.
RUN_DONE_TIMEOUT_S = 15.0
#: Bound of a refused second start (it must end before opening anything).
REFUSED_START_TIMEOUT_S = 30.0
#: How long a nats-server may outlive its SIGKILLed dev (the kernel signals at once).
PARENT_DEATH_BOUND_S = 10.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _echo_run(http: httpx.Client, value: int) -> str:
    run_id: str = http.post("/runs", json={"workflow": "own-echo", "input": value}).json()["run_id"]
    deadline = time.monotonic() + RUN_DONE_TIMEOUT_S
    while (run := http.get(f"/runs/{run_id}").json())["status"] == "running":
        assert time.monotonic() < deadline, run
        time.sleep(0.05)
    assert run["status"] == "completed" and run["output"] == {"echo": value}, run
    return run_id


def _dev_args(args: list[str]) -> list[str]:
    return ["dev", "--listen", "127.0.0.1:0", *args]


def test_a_second_dev_on_one_data_dir_is_refused_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = _free_port()
    first = start_dev(
        [
            *("--data-dir", str(data), "--listen", "127.0.0.1:0"),
            *("--nats-port", str(port), "--worker", "_workers:handlers"),
        ]
    )
    try:
        assert first.nats_url == f"nats://127.0.0.1:{port}"
        with httpx.Client(base_url=first.api_url, timeout=5.0) as http:
            wf = {"name": "own-echo", "steps": [{"id": "e", "task": "cli_echo"}]}
            assert http.post("/workflows", content=json.dumps(wf)).status_code == 201
            before = _echo_run(http, 1)

            # The case: the same data dir, another explicit port; and the same
            # explicit port on another data dir: refused, never moved to another one. (The two
            # refusals run at once: neither opens anything the other could meet.)
            other = tmp_path / "other"
            second, moved = refused_by_processes(
                [
                    (_dev_args(["--data-dir", str(data), "--nats-port", str(_free_port())]), None),
                    (_dev_args(["--data-dir", str(other), "--nats-port", str(port)]), None),
                ],
                timeout_s=REFUSED_START_TIMEOUT_S,
            )
            assert second.code == 1, second.stderr
            (line,) = second.stderr.strip().splitlines()
            assert f"the data directory {data} is in use by another process" in line
            assert f"(pid {first.proc.pid})" in line and "Traceback" not in line
            assert (data / "jetstream" / LOCK_FILE_NAME).read_text().strip() == str(first.proc.pid)
            assert moved.code == 1, moved.stderr
            (line,) = moved.stderr.strip().splitlines()
            assert f"--nats-port {port} is already in use" in line
            assert not (other / "jetstream" / "jetstream").exists()  # no server ever ran there

            # The first dev lost nothing and goes on.
            after = _echo_run(http, 2)
            runs = {r["run_id"]: r["status"] for r in http.get("/runs").json()["runs"]}
            assert runs == {before: "completed", after: "completed"}
    finally:
        assert first.stop() == 0


def test_sighup_to_the_process_group_stops_dev_and_its_server(tmp_path: Path) -> None:
    """What closing the terminal does: SIGHUP to the whole foreground group."""
    dev = start_dev(
        ["--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0"], own_group=True
    )
    stopped = False
    try:
        work_dir = server_dir_of(dev.nats_pid)
        assert work_dir.is_dir()
        with exit_watch(dev.nats_pid) as exited:
            os.killpg(dev.proc.pid, signal.SIGHUP)
            assert dev.proc.wait(DEV_STOP_TIMEOUT_S) == 0
            stopped = True
            assert exited(0), "nats-server outlived dagnats dev"
        assert not port_open(dev.nats_url)
        assert not port_open(dev.api_url)
        assert not work_dir.exists()
    finally:
        if not stopped:
            _kill_group(dev)


def test_sigkill_of_dev_takes_its_server_down_and_frees_the_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    dev = start_dev(["--data-dir", str(data), "--listen", "127.0.0.1:0"], own_group=True)
    work_dir = server_dir_of(dev.nats_pid)
    try:
        with exit_watch(dev.nats_pid) as exited:
            dev.proc.send_signal(signal.SIGKILL)  # dev only, not its group
            killed_at = time.monotonic()
            assert exited(PARENT_DEATH_BOUND_S), "nats-server outlived a SIGKILLed dev"
            gone_s = time.monotonic() - killed_at
        print(f"\nnats-server gone {gone_s * 1000:.0f} ms after dagnats dev was SIGKILLed")
        assert dev.proc.wait(DEV_STOP_TIMEOUT_S) == -signal.SIGKILL
        assert not port_open(dev.nats_url)
    finally:
        _kill_group(dev)
    # The kernel dropped the lock with the last holder: the next dev starts on the same data.
    again = start_dev(["--data-dir", str(data), "--listen", "127.0.0.1:0"])
    assert not work_dir.exists(), "the SIGKILLed dev's temporary directory stayed"
    assert again.stop() == 0


def _kill_group(dev: DevProcess) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(dev.proc.pid, signal.SIGKILL)
    dev.proc.wait()
