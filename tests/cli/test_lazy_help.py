"""``dagnats --help`` (and a verb's ``--help``) load typer and the command declarations only:
no Trio, NATS, HTTP stack, rich or engine until a verb runs (issue 13: the help answers in well
under 0.3 s; the figure is measured in the note, not here).

The real console script runs in a fresh interpreter with ``PYTHONPROFILEIMPORTTIME=1``: Python
itself then names, on stderr, every module the process imports. A positive control runs a verb
and sees the runtime load.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

#: A fresh interpreter on a loaded machine: generous.
COMMAND_TIMEOUT_S = 60.0
#: What no help page may load: the I/O stacks, the rendering library, and the runtime's parts.
HEAVY_MODULES = (
    "trio",
    "trio_asyncio",
    "asyncio",
    "nats",
    "httpx",
    "anyio",
    "starlette",
    "hypercorn",
    "rich",
    "cattrs",
    "dagnats_trio._host",
    "dagnats_trio.api",
    "dagnats_trio.bridge",
    "dagnats_trio.engine",
    "dagnats_trio.inputs",
    "dagnats_trio.journal",
    "dagnats_trio.protocol",
    "dagnats_trio.runtime",
    "dagnats_trio.server",
    "dagnats_trio.transport",
    "dagnats_trio.worker",
    "dagnats_trio.cli._client",
    "dagnats_trio.cli._common",
)

DAGNATS = Path(sys.executable).with_name("dagnats")
_IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$")


def _run(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run the console script; its result and every module it imported."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1", "COLUMNS": "80"}
    done = subprocess.run(
        [str(DAGNATS), *args],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        env=env,
        check=False,
    )
    modules = {m.group(1) for line in done.stderr.splitlines() if (m := _IMPORT_LINE.match(line))}
    return done, modules


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY_MODULES or m in HEAVY_MODULES)


@pytest.mark.parametrize(
    "args",
    [("--help",), ("run", "--help"), ("run", "get", "--help"), ("dev", "--help"), ()],
    ids=["top", "group", "verb", "process", "no-args"],
)
def test_help_loads_no_runtime(args: tuple[str, ...]) -> None:
    done, modules = _run(*args)
    assert done.returncode in (0, 2), done.stderr[-2000:]
    assert "Usage: dagnats" in done.stdout + done.stderr
    assert "dagnats_trio.cli._app" in modules  # the probe saw the CLI load
    assert _heavy(modules) == [], f"dagnats {' '.join(args)} loads the runtime"
    print(f"dagnats {' '.join(args)}: {len(modules)} modules, none of the runtime")


def test_top_help_names_every_command() -> None:
    done, _ = _run("--help")
    assert done.returncode == 0
    for command in ("demo", "dev", "serve", "worker", "workflow", "run", "inputs", "journal"):
        assert re.search(rf"^  {command}\s", done.stdout, re.MULTILINE), command


def test_the_probe_sees_a_verb_load_the_runtime() -> None:
    """Positive control: a verb that runs loads Trio and the HTTP client, and the probe says so
    (port 9 on loopback: nothing listens, so it fails fast with exit 4)."""
    done, modules = _run("run", "get", "r1", "--api", "http://127.0.0.1:9")
    assert done.returncode == 4, done.stderr[-2000:]
    heavy = set(_heavy(modules))
    assert {"trio", "httpx", "dagnats_trio.cli._client"} <= heavy


def test_a_process_command_loads_no_http_client() -> None:
    """``dev``, ``serve`` and ``worker`` never build an API client: what they share with the
    verbs (``_common``) loads its failures, not httpx. A worker refused for a handler module
    that does not exist has loaded its host (the positive control of the probe: the handlers
    are loaded after the host) and nothing of the HTTP client; nor, as a worker serves no HTTP,
    the HTTP server, the REST app or the bridge."""
    done, modules = _run("worker", "m:h", "--nats", "nats://127.0.0.1:1")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "cannot import 'm'" in done.stderr
    assert {"dagnats_trio.cli._hosting", "dagnats_trio.cli._common", "trio"} <= modules
    assert not {"httpx", "dagnats_trio.cli._client"} & modules
    http_server = sorted(
        m
        for m in modules
        if m.split(".")[0] in ("hypercorn", "starlette", "anyio")
        or m.startswith(("dagnats_trio.bridge", "dagnats_trio.api.rest", "dagnats_trio.api.server"))
    )
    assert http_server == [], "a worker loads the HTTP server"


#: What a process command refused for an option it was typed loads none of: the option is parsed
#: by the host's settings module alone, before Trio, NATS and the host's parts are imported.
#: (``_host._compose`` is loaded through the package's lazy ``__getattr__``, which the probe does
#: not print; Trio, the transport and ``cli._hosting`` it does, and they come with it.)
HOST_MODULES = (
    "trio",
    "trio_asyncio",
    "asyncio",
    "nats",
    "httpx",
    "anyio",
    "starlette",
    "hypercorn",
    "dagnats_trio._host._compose",
    "dagnats_trio.api",
    "dagnats_trio.bridge",
    "dagnats_trio.engine",
    "dagnats_trio.inputs",
    "dagnats_trio.journal",
    "dagnats_trio.nats",
    "dagnats_trio.runtime",
    "dagnats_trio.server",
    "dagnats_trio.transport",
    "dagnats_trio.worker",
    "dagnats_trio.cli._common",
    "dagnats_trio.cli._hosting",
)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("worker", "m:h", "--nats", "nats://127.0.0.1:1", "--restart-limit", "0"),
            "restart_limit must be from 1 to 1000, got 0",
        ),
        (
            ("worker", "m:h", "--nats", "nats://127.0.0.1:1", "--client", "bogus"),
            "client must be one of native, nats-py, got 'bogus'",
        ),
        (("serve", "--nats", "nats://127.0.0.1:1", "--listen", "nowhere"), "must look like"),
        (("dev", "--restart-limit", "x"), "restart_limit must be a whole number"),
        (
            ("serve", "--nats", "nats://127.0.0.1:1", "--backlog", "0"),
            "API backlog must be from 1 to 65535, got 0",
        ),
    ],
    ids=[
        "worker-restart-limit",
        "worker-client",
        "serve-listen",
        "dev-restart-limit",
        "serve-backlog",
    ],
)
def test_a_refused_option_loads_no_host(args: tuple[str, ...], message: str) -> None:
    """The refusal is the same line and exit code as after a full import (tests/cli/
    test_restart_limit.py, test_client_option.py pin those); here, what it costs: the probe sees
    the settings module load and nothing of the runtime behind it."""
    done, modules = _run(*args)
    assert done.returncode == 2, done.stderr[-2000:]
    assert message in done.stderr
    assert "dagnats_trio._host._settings" in modules  # the probe saw the parse happen
    loaded = sorted(
        m for m in modules if any(m == h or m.startswith(f"{h}.") for h in HOST_MODULES)
    )
    assert loaded == [], f"dagnats {' '.join(args)} loads the host before refusing"
