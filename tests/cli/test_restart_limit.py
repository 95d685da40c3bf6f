"""``--restart-limit`` / ``DAGNATS_RESTART_LIMIT`` on ``dagnats worker`` and ``dagnats dev``
(issue 9 item 12): refused in one line when bad, and carried to the workers when good."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import httpx
import pytest
from _procs import exit_watch

from dagnats_trio._host import HostConfig, HostSetupError, parse_restart_limit

from ._dev import DEV_STOP_TIMEOUT_S, start_dagnats, start_dev
from ._inproc import Exited, hosted_in_process, refused_by_processes, refused_in_process

#: Bound of a crashing worker's life: start, a task (after the AckWait), its own SIGKILL.
WORKER_DEATH_TIMEOUT_S = 40.0
#: Bound of the wait for the run to fail once the limit is hit.
RUN_FAILED_TIMEOUT_S = 30.0
#: The crashing workers' AckWait: a dead one's task comes back this soon.
ACK_WAIT_S = "1"
BAD_VALUES = ("0", "1001", "-5", "abc", "1_0", "2.5", "")


@pytest.mark.parametrize("value", BAD_VALUES)
def test_parse_restart_limit_refuses_bad_values(value: str) -> None:
    with pytest.raises(HostSetupError, match="restart_limit must be"):
        parse_restart_limit(value)


def test_parse_restart_limit_and_host_config_take_1_to_1000() -> None:
    assert parse_restart_limit("1") == 1
    assert parse_restart_limit(" 1000 ") == 1000
    assert HostConfig(worker_restart_limit=7).worker_restart_limit == 7
    for bad in (0, 1001):
        with pytest.raises(
            HostSetupError, match=f"restart_limit must be from 1 to 1000, got {bad}"
        ):
            HostConfig(worker_restart_limit=bad)


def _refused_in_one_line(out: Exited, tmp_path: Path) -> None:
    assert out.code == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "restart_limit must be" in lines[0] and "1000" in lines[0], lines
    assert "Traceback" not in out.stderr + out.stdout
    assert not (tmp_path / "jetstream").exists()  # refused before anything was opened


@pytest.mark.parametrize("value", ["0", "1001", "abc"])
def test_worker_and_dev_refuse_a_bad_restart_limit_in_one_line(value: str, tmp_path: Path) -> None:
    worker = ["worker", "--nats", "nats://127.0.0.1:1", "--restart-limit", value]
    runs = [
        refused_in_process(["dev", "--data-dir", str(tmp_path), "--restart-limit", value]),
        refused_in_process(["dev", "--data-dir", str(tmp_path)], {"DAGNATS_RESTART_LIMIT": value}),
        refused_in_process([*worker, "_crashing:handlers"]),
    ]
    for out in runs:
        _refused_in_one_line(out, tmp_path)


def test_the_console_script_refuses_a_bad_restart_limit_in_one_line(tmp_path: Path) -> None:
    """The refusal above as a user's shell sees it: the flag to dev, the variable to a worker."""
    dev = ["dev", "--data-dir", str(tmp_path), "--restart-limit", "0"]
    worker = ["worker", "--nats", "nats://127.0.0.1:1", "_crashing:handlers"]
    runs = refused_by_processes([(dev, None), (worker, {"DAGNATS_RESTART_LIMIT": "1001"})])
    for out in runs:
        _refused_in_one_line(out, tmp_path)


def _step(http: httpx.Client, run_id: str, step_id: str) -> dict[str, object]:
    run = http.get(f"/runs/{run_id}").json()
    step: dict[str, object] = next(s for s in run["steps"] if s["step_id"] == step_id)
    return {**step, "run_status": run["status"]}


def test_the_limit_reaches_the_worker_a_step_fails_after_that_many_claims(tmp_path: Path) -> None:
    """Two workers with ``--restart-limit 2`` die right after their claim; the third claim
    commits the failure with reason restart_limit (the default 5 would let it run)."""
    dev = start_dev(["--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0"])
    worker_args = ["--nats", dev.nats_url, "--ack-wait", ACK_WAIT_S, "_crashing:handlers"]
    try:
        with httpx.Client(base_url=dev.api_url, timeout=5.0) as http:
            # One attempt: the restart_limit failure is retriable, and a retry would claim again.
            step = {"id": "s", "task": "cli_crash", "retry": {"max_attempts": 1}}
            wf = {"name": "cli-restart-limit", "steps": [step]}
            assert http.post("/workflows", content=json.dumps(wf)).status_code == 201
            run_id = http.post("/runs", json={"workflow": wf["name"]}).json()["run_id"]
            for _ in range(2):
                crashing = start_dagnats("worker", ["--restart-limit", "2", *worker_args])
                assert crashing.banner["restart limit"] == "2"
                assert crashing.proc.wait(WORKER_DEATH_TIMEOUT_S) == -9  # died after its claim
            third = start_dagnats("worker", worker_args, env={"DAGNATS_RESTART_LIMIT": "2"})
            try:
                assert third.banner["restart limit"] == "2"
                deadline = time.monotonic() + RUN_FAILED_TIMEOUT_S
                while (seen := _step(http, run_id, "s"))["run_status"] == "running":
                    assert time.monotonic() < deadline, seen
                    time.sleep(0.1)
                assert third.proc.poll() is None  # the third holder did not run the handler
            finally:
                assert third.stop() == 0
            assert seen["run_status"] == "failed", seen
            assert seen["status"] == "failed" and seen["reason"] == "restart_limit", seen
            page = http.get(f"/runs/{run_id}/steps/s/journal").json()
            types = [r["type"] for r in page["records"]]
            print(f"\njournal of the step with --restart-limit 2: {types}")
            assert types == ["claim", "claim", "claim", "commit"], page
            assert page["records"][-1]["record"]["reason"] == "restart_limit"
    finally:
        assert dev.stop() == 0


def test_dev_takes_the_restart_limit_from_its_environment(tmp_path: Path) -> None:
    """What dev starts its host with (in process: a real dev and worker show the limit they were
    given on their banner above, from the flag and from the variable)."""
    args = ["dev", "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0"]
    hosted = hosted_in_process(args, env={"DAGNATS_RESTART_LIMIT": "7"})
    assert hosted.banner["restart limit"] == "7"
    assert hosted.config.worker_restart_limit == 7
    default = hosted_in_process(args)
    assert default.banner["restart limit"] == "5" and default.config.worker_restart_limit == 5


def test_dev_gives_the_limit_to_its_bridge_too(tmp_path: Path) -> None:
    """An HTTP worker's claim whose holder died counts as a restart: the dev serving the bridge
    is SIGKILLed after the claim; with ``--restart-limit 1`` the next lease's claim answers 410
    restart_limit (the default 5 would give it the journal)."""
    args = [
        *("--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0"),
        *("--restart-limit", "1", "--ack-wait", ACK_WAIT_S),
    ]
    poll = "/bridge/tasks/cli_bridged/poll?wait=20s"
    dev = start_dev(args, own_group=True)
    try:
        assert dev.banner["restart limit"] == "1"
        with httpx.Client(base_url=dev.api_url, timeout=30.0) as http:
            step = {"id": "b", "task": "cli_bridged", "retry": {"max_attempts": 1}}
            wf = {"name": "cli-bridge-restart-limit", "steps": [step]}
            assert http.post("/workflows", content=json.dumps(wf)).status_code == 201
            run_id = http.post("/runs", json={"workflow": wf["name"]}).json()["run_id"]
            first = http.post(poll)
            assert first.status_code == 200, first.text
            read = http.post(f"/bridge/leases/{first.json()['token']}/journal/read")
            assert read.status_code == 200, read.text  # claimed
        with exit_watch(dev.nats_pid) as server_exited:
            dev.proc.send_signal(signal.SIGKILL)  # the bridge's process dies with the lease
            assert dev.proc.wait(DEV_STOP_TIMEOUT_S) == -signal.SIGKILL
            assert server_exited(DEV_STOP_TIMEOUT_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(dev.proc.pid, signal.SIGKILL)
        dev.proc.wait()
    dev = start_dev(args)
    try:
        with httpx.Client(base_url=dev.api_url, timeout=30.0) as http:
            second = http.post(poll)  # redelivered: the first lease's holder is gone
            assert second.status_code == 200, second.text
            assert second.json()["run_id"] == run_id
            refused = http.post(f"/bridge/leases/{second.json()['token']}/journal/read")
            assert refused.status_code == 410, refused.text
            assert refused.json()["error"]["code"] == "restart_limit"
            deadline = time.monotonic() + RUN_FAILED_TIMEOUT_S
            while (seen := _step(http, run_id, "b"))["run_status"] == "running":
                assert time.monotonic() < deadline, seen
                time.sleep(0.1)
            assert seen["status"] == "failed" and seen["reason"] == "restart_limit", seen
    finally:
        assert dev.stop() == 0
