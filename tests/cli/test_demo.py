"""``dagnats demo`` end to end, as the README tells a newcomer to run it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from ._dev import dagnats_command, port_open

#: The demo promises to finish in under a minute.
DEMO_TIMEOUT_S = 60.0


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
