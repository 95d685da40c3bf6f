"""A user module that raises on import: one line of error and the module's own traceback, not
the CLI's frames (typer, click, importlib)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ._dev import dagnats_command

#: Bound of a dagnats command that fails before starting anything.
FAIL_FAST_TIMEOUT_S = 60.0


def test_a_module_that_raises_on_import_gives_its_own_traceback(tmp_path: Path) -> None:
    (tmp_path / "badagent.py").write_text(
        "def load_config():\n    raise RuntimeError('config missing')\n\n\n"
        "load_config()\nhandlers = {}\n"
    )
    done = subprocess.run(
        [*dagnats_command(), "dev", "--worker", "badagent:handlers"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=FAIL_FAST_TIMEOUT_S,
    )
    err = done.stderr.strip().splitlines()
    print(done.stderr)
    assert done.returncode == 2
    assert err[-1] == (
        "error: importing 'badagent' for 'badagent:handlers' failed: RuntimeError: config missing"
    )
    assert 'badagent.py", line 2, in load_config' in done.stderr
    assert 'badagent.py", line 5, in <module>' in done.stderr
    for noise in ("typer", "click", "importlib", "dagnats_trio"):
        assert noise not in done.stderr, noise
    assert len(err) <= 8


def test_a_missing_module_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [*dagnats_command(), "dev", "--worker", "nosuchagent:handlers"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=FAIL_FAST_TIMEOUT_S,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: cannot import 'nosuchagent' for 'nosuchagent:handlers': "
        "No module named 'nosuchagent'"
    ]
