"""Running ``dagnats dev`` as a child process, the way a user does, and reading its banner."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

#: Bound of the start of ``dagnats dev`` (embedded server, provisioning, engine, API).
DEV_START_TIMEOUT_S = 30.0
#: Bound of its stop after SIGINT.
DEV_STOP_TIMEOUT_S = 20.0
HERE = Path(__file__).parent


def dagnats_command() -> list[str]:
    """The console script of this virtualenv (what ``uv run dagnats`` runs)."""
    return [str(Path(sys.executable).parent / "dagnats")]


@attrs.define
class DevProcess:
    proc: subprocess.Popen[str]
    banner: dict[str, str]
    lines: list[str]
    #: stdout after the banner, a line at a time (``None`` once it ends).
    later: queue.Queue[str | None] = attrs.field(factory=queue.Queue)

    def next_line(self, timeout_s: float) -> str | None:
        """The next stdout line after the banner (blocks up to ``timeout_s``)."""
        return self.later.get(timeout=timeout_s)

    @property
    def api_url(self) -> str:
        return self.banner["api"]

    @property
    def nats_url(self) -> str:
        return self.banner["nats"]

    @property
    def nats_pid(self) -> int:
        return int(self.banner["nats-server pid"])

    def stop(self) -> int:
        """SIGINT, as Ctrl-C sends; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(DEV_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


def _pump(stream: object, lines: queue.Queue[str | None]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.put(line.rstrip("\n"))
    lines.put(None)


def start_dev(
    args: Sequence[str],
    *,
    cwd: Path = HERE,
    env: Mapping[str, str] | None = None,
    own_group: bool = False,
) -> DevProcess:
    """``env``: variables set for the child on top of this process's environment;
    ``own_group``: the child leads a session and process group of its own (as a shell's job
    does), so a signal can be sent to its whole group."""
    return start_dagnats("dev", args, cwd=cwd, env=env, own_group=own_group)


def start_dagnats(
    verb: str,
    args: Sequence[str],
    *,
    cwd: Path = HERE,
    env: Mapping[str, str] | None = None,
    own_group: bool = False,
    stderr: Path | None = None,
) -> DevProcess:
    """``dagnats VERB ARGS`` (a long-running one: dev, serve, worker), once its banner says
    ready; its stderr goes to the file ``stderr`` if given (else nowhere)."""
    child_env = {**os.environ, "DAGNATS_LEGACY_STEP_EVENTS": "false", **(env or {})}
    child_env.pop("DAGNATS_API_TOKEN", None)
    with contextlib.ExitStack() as files:
        err = subprocess.DEVNULL if stderr is None else files.enter_context(stderr.open("wb"))
        proc = subprocess.Popen(
            [*dagnats_command(), verb, *args],
            cwd=cwd,
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=own_group,
        )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    seen: list[str] = []
    banner: dict[str, str] = {}
    try:
        while True:
            line = lines.get(timeout=DEV_START_TIMEOUT_S)
            if line is None:
                raise RuntimeError(
                    f"dagnats {verb} exited before it was ready:\n" + "\n".join(seen)
                )
            seen.append(line)
            name, sep, value = line.strip().partition(":")
            if line.startswith("  ") and sep:
                banner[name] = value.strip()
            if line.strip().startswith("ready"):
                return DevProcess(proc, banner, seen, lines)
    except BaseException:
        proc.kill()
        proc.wait()
        raise


def port_open(url: str) -> bool:
    host_port = url.split("://", 1)[-1].rstrip("/")
    host, _, port = host_port.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def process_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"
