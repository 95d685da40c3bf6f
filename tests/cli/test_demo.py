"""``dagnats demo`` end to end, as the README tells a newcomer to run it."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
from _procs import children_of, command_name, exit_watch, server_dir_of

from dagnats_trio.server import SyncNatsServer

from ._dev import _pump, dagnats_command, port_open

#: The demo promises to finish in under a minute.
DEMO_TIMEOUT_S = 60.0
#: Bound of the stop after Ctrl-C.
DEMO_STOP_TIMEOUT_S = 20.0
#: How long a nats-server may outlive its SIGKILLed demo (the kernel signals at once).
PARENT_DEATH_BOUND_S = 10.0


def test_demo_runs_end_to_end_and_its_journal_check_passes() -> None:
    out = subprocess.run(
        [*dagnats_command(), "demo"],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        env={"COLUMNS": "160", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )
    text = out.stdout
    assert out.returncode == 0, text + out.stderr
    assert "Traceback" not in text + out.stderr
    # The crash, the recovery, and what it did not repeat.
    assert "worker-1 was killed inside send_message" in text
    assert "worker-2 recovered the turn" in text
    assert "send_message started 1 time(s), messages sent: 1" in text
    assert "model: 5 requests for 6 calls (1 reused after the crash)" in text
    assert re.search(r"│\s+\d+ │\s+1 │ model\s+│\s+0 │ \[reused\]", text), text
    assert re.search(
        r"│ tool\.result\s+│\s+1 │ \[interrupted\] its holder died mid-call; unsafe", text
    )
    assert "[recovered] a new holder recovered attempt 1" in text
    # The inputs a person placed, and how they ended.
    assert "[input] steer steer-1" in text and "[input] follow_up follow-1" in text
    assert "steer-1: done (iteration 2), follow-1: done (iteration 4)" in text
    assert "run completed" in text
    # journal check passed, over the API.
    assert re.search(r"agent: journal ok: \d+ records, 5 commits, 5 ended", text), text
    # Nothing left running, nothing left on disk.
    url = re.search(r"embedded nats-server\s+(nats://\S+)\s+\(store (\S+)\)", text)
    assert url is not None, text
    assert not port_open(url.group(1))
    assert not Path(url.group(2)).exists()
    api = re.search(r"engine \+ REST API\s+(http://\S+)", text)
    assert api is not None and not port_open(api.group(1))
    # It ends with the console's address on its run (stopped with it: --keep keeps it).
    run_id = re.search(r"started run (\w+)", text)
    assert run_id is not None, text
    last = text.strip().splitlines()[-1]
    assert last.startswith(f"console  {api.group(1)}/ui/#/runs/{run_id.group(1)}"), last
    assert "--keep" in last


def test_demo_keep_leaves_the_console_open_on_its_run_until_ctrl_c() -> None:
    proc = subprocess.Popen(
        [*dagnats_command(), "demo", "--keep"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"COLUMNS": "160", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + DEMO_TIMEOUT_S
        while not any("kept open (--keep)" in line for line in seen):
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.1))
            assert line is not None, "\n".join(seen)
            seen.append(line)
        found = re.search(r"console  (http://\S+)/ui/#/runs/(\w+)", "\n".join(seen))
        assert found is not None, "\n".join(seen)
        base, run_id = found.groups()
        page = httpx.get(f"{base}/ui/", timeout=10.0)
        assert page.status_code == 200 and "console.js" in page.text
        run = httpx.get(f"{base}/runs/{run_id}", timeout=10.0)
        assert run.status_code == 200 and run.json()["status"] == "completed"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(DEMO_STOP_TIMEOUT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rest = []
    while (line := lines.get(timeout=DEMO_STOP_TIMEOUT_S)) is not None:
        rest.append(line)
    assert any(line.startswith("stopped: nats-server") for line in rest), rest
    assert not port_open(base)


def test_a_sigkilled_demo_takes_its_nats_server_and_temp_dir_with_it() -> None:
    """The demo's embedded server dies with it even when the demo runs no cleanup at all, its
    port is free, and its temporary directory goes at the next server start (issue 9 item 8)."""
    proc = subprocess.Popen(
        [*dagnats_command(), "demo", "--keep"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={"COLUMNS": "160", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    try:
        deadline = time.monotonic() + DEMO_TIMEOUT_S
        found = None
        while found is None:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.1))
            assert line is not None, "the demo ended before its server started"
            found = re.search(r"embedded nats-server\s+(nats://\S+)", line)
        url = found.group(1)
        (server,) = (p for p in children_of(proc.pid) if command_name(p) == "nats-server")
        work_dir = server_dir_of(server)
        with exit_watch(server) as exited:
            proc.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            assert exited(PARENT_DEATH_BOUND_S), "nats-server outlived a SIGKILLed demo"
            gone_s = time.monotonic() - killed_at
        assert proc.wait(DEMO_STOP_TIMEOUT_S) == -signal.SIGKILL
        print(f"\nthe demo's nats-server was gone {gone_s * 1000:.0f} ms after its SIGKILL")
        assert not port_open(url.replace("nats://", "http://"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    nxt = SyncNatsServer()
    nxt.start()
    nxt.stop()
    assert not work_dir.exists(), "the SIGKILLed demo's temporary directory stayed"
