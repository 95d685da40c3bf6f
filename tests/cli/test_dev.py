"""``dagnats dev`` as a user runs it: starts, answers, runs a worker module, stops on Ctrl-C."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx

from ._dev import port_open, process_alive, start_dev
from ._inproc import hosted_in_process, refused_by_process, refused_in_process

#: Bound of the wait for a run of the echo worker to complete.
RUN_DONE_TIMEOUT_S = 15.0


def test_dev_serves_runs_and_stops_cleanly_on_sigint(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    dev = start_dev(
        ["--data-dir", str(data_dir), "--listen", "127.0.0.1:0", "--worker", "_workers:handlers"]
    )
    try:
        assert dev.banner["tasks"] == "cli_corrupt, cli_echo, cli_journaled, cli_paired"
        assert dev.banner["sync"].startswith("always")
        assert process_alive(dev.nats_pid)
        with httpx.Client(base_url=dev.api_url, timeout=5.0) as http:
            assert http.get("/healthz").json() == {"status": "ok", "nats": "up"}
            wf = {"name": "dev-echo", "steps": [{"id": "e", "task": "cli_echo"}]}
            assert http.post("/workflows", content=json.dumps(wf)).status_code == 201
            run_id = http.post("/runs", json={"workflow": "dev-echo", "input": 5}).json()["run_id"]
            deadline = time.monotonic() + RUN_DONE_TIMEOUT_S
            while (run := http.get(f"/runs/{run_id}").json())["status"] == "running":
                assert time.monotonic() < deadline, run
                time.sleep(0.05)
            assert run["status"] == "completed" and run["output"] == {"echo": 5}
            # The worker bridge is on by default: nothing queued for this task type -> 204.
            assert http.post("/bridge/tasks/cli_nobody/poll").status_code == 204
    finally:
        code = dev.stop()
    assert code == 0
    assert not process_alive(dev.nats_pid), "the nats-server child outlived dagnats dev"
    assert not port_open(dev.nats_url)
    assert not port_open(dev.api_url)
    # The data is kept under the data dir (a durable store), not in a temporary directory.
    assert (data_dir / "jetstream" / "jetstream").is_dir()


def test_dev_rejects_a_bad_worker_module_without_a_traceback(tmp_path: Path) -> None:
    """In process (test_user_module runs the same refusal as a process)."""
    out = refused_in_process(["dev", "--data-dir", str(tmp_path), "--worker", "no_such_mod:h"])
    assert out.code == 2, out
    assert "cannot import 'no_such_mod'" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


def test_dev_without_the_bridge_answers_404_on_its_routes(tmp_path: Path) -> None:
    dev = start_dev(
        ["--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0", "--no-bridge"]
    )
    try:
        with httpx.Client(base_url=dev.api_url, timeout=5.0) as http:
            answer = http.post("/bridge/tasks/cli_echo/poll")
            assert answer.status_code == 404
            assert answer.json()["error"]["code"] == "bridge_disabled"
            assert http.get("/healthz").status_code == 200
    finally:
        assert dev.stop() == 0


def _listen_backlog(api_url: str) -> int:
    """The backlog the kernel gives the API's listening socket (``ss`` shows it as Send-Q)."""
    port = api_url.rsplit(":", 1)[1]
    out = subprocess.run(
        ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, timeout=10, check=True
    )
    (line,) = out.stdout.strip().splitlines()
    return int(line.split()[2])


def test_dev_listens_with_the_backlog_of_its_setting(tmp_path: Path) -> None:
    """A real dev's socket has the backlog of its setting (hypercorn's own default is 100); the
    default's config and banner are read in process (the same path from config to socket)."""
    args = ["--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0"]
    default = hosted_in_process(["dev", *args])
    assert default.banner["api backlog"] == "2048" and default.config.api_backlog == 2048
    dev = start_dev(args, env={"DAGNATS_API_BACKLOG": "777"})
    try:
        assert dev.banner["api backlog"] == "777"
        assert _listen_backlog(dev.api_url) == 777
    finally:
        assert dev.stop() == 0


def test_dev_refuses_a_bad_backlog_in_one_line(tmp_path: Path) -> None:
    """Every bad value in process; one of them as a process too (the shell's view)."""
    runs = [
        (value, refused_in_process(["dev", "--data-dir", str(tmp_path), "--backlog", value]))
        for value in ("0", "65536", "-5")
    ]
    runs.append(("0", refused_by_process(["dev", "--data-dir", str(tmp_path), "--backlog", "0"])))
    for value, out in runs:
        assert out.code == 2, (value, out)
        assert f"API backlog must be from 1 to 65535, got {value}" in out.stderr
        assert "Traceback" not in out.stderr + out.stdout
        assert not (tmp_path / "jetstream").exists()
