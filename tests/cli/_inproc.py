"""The ``dagnats`` command line run in this process, as typer's ``CliRunner`` runs it, with the
click command built from the app once per session instead of once per call.

``CliRunner.invoke`` rebuilds the whole command tree from the Typer app on every call (about half
of a verb's cost in process); a generated-command-line test runs hundreds of them. The command is
the same object each time, so building it once changes nothing a test sees: the isolation (streams,
environment), the exit code and the exception are ``CliRunner``'s own.

Refusals of ``dev``, ``serve`` and ``worker`` (a bad option said in one line, exit 2) are proven
here for every bad value, in process, and by one real process per kind of refusal: a process
costs a second or more of start-up on a loaded machine, and the refusal is the same code.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import typer
from typer.testing import CliRunner, Result

from dagnats_trio.cli import app

from ._dev import HERE, dagnats_command

#: Said, and the exit code, when a command meant to be refused went on to start its host.
NOT_REFUSED = "the command was not refused: it went on to start its host"
NOT_REFUSED_EXIT = 99
#: Bound on a refused command run as a process (it exits before connecting).
REFUSED_TIMEOUT_S = 30


@functools.cache
def _command() -> Any:
    return typer.main.get_command(app)


def invoke(
    args: Sequence[str], env: Mapping[str, str | None] | None = None, **extra: Any
) -> Result:
    """``CliRunner().invoke(app, args, env=env, **extra)``, on the command built once."""
    runner = CliRunner()
    exception: BaseException | None = None
    exit_code = 0
    exc_info: Any = None
    with runner.isolation(env=env) as outstreams:
        try:
            _command().main(args=list(args), prog_name="dagnats", **extra)
        except SystemExit as exc:
            code = exc.code if exc.code is not None else 0
            if code != 0:
                exception = exc
                exc_info = sys.exc_info()
            if not isinstance(code, int):
                sys.stdout.write(f"{code}\n")
                code = 1
            exit_code = code
        except Exception as exc:
            exception = exc
            exc_info = sys.exc_info()
            exit_code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            stdout, stderr, output = (s.getvalue() for s in outstreams)
    return Result(
        runner=runner,
        stdout_bytes=stdout,
        stderr_bytes=stderr,
        output_bytes=output,
        return_value=None,
        exit_code=exit_code,
        exception=exception,
        exc_info=exc_info,
    )


@attrs.frozen
class Exited:
    """How a command ended, in process or as a process: the refusal tests assert on this."""

    code: int
    stdout: str
    stderr: str


@attrs.frozen
class Hosted:
    """What a process command handed to ``run_host`` in process: its config and banner rows."""

    config: Any
    banner: dict[str, str]


def _not_refused(*_args: object, **_kwargs: object) -> None:
    sys.stderr.write(f"{NOT_REFUSED}\n")
    raise SystemExit(NOT_REFUSED_EXIT)


@contextmanager
def _no_host(run_host: Callable[..., None]) -> Iterator[None]:
    """``run_host`` replaced; ``tests/cli`` importable for a ``_crashing:handlers`` argument (the
    subprocesses run there); both restored after."""
    from dagnats_trio.cli import _hosting

    saved_path, saved_run_host = list(sys.path), _hosting.run_host
    _hosting.run_host = run_host
    sys.path.insert(0, str(HERE))
    try:
        yield
    finally:
        _hosting.run_host = saved_run_host
        sys.path[:] = saved_path


def _clean_env(env: Mapping[str, str] | None) -> dict[str, str | None]:
    """No ``DAGNATS_*`` variable but the ones given (as the subprocess tests' clean environment)."""
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("DAGNATS_")}
    return {**clean, "COLUMNS": "200", **(env or {})}


def refused_in_process(args: Sequence[str], env: Mapping[str, str] | None = None) -> Exited:
    """``dev``, ``serve`` or ``worker`` run in this process with nothing able to start: a command
    its options do not refuse ends with ``NOT_REFUSED_EXIT`` (and says ``NOT_REFUSED``) instead of
    starting a nats-server or connecting."""
    with _no_host(_not_refused):
        res = invoke(args, env=_clean_env(env))
    return Exited(res.exit_code, res.stdout, res.stderr)


def hosted_in_process(args: Sequence[str], env: Mapping[str, str] | None = None) -> Hosted:
    """The config and banner a process command would start its host with, in this process
    (nothing started): for what a setting becomes, where a real process proves the plumbing
    from the config on for one value."""
    seen: list[Hosted] = []

    def record(config: Any, _name: str, rows: Sequence[tuple[str, str]]) -> None:
        seen.append(Hosted(config, dict(rows)))

    with _no_host(record):
        res = invoke(args, env=_clean_env(env))
    assert res.exit_code == 0 and len(seen) == 1, (res.exit_code, res.stdout, res.stderr)
    return seen[0]


def refused_by_process(args: Sequence[str], env: Mapping[str, str] | None = None) -> Exited:
    """The console script as a user runs it, in a clean environment (the same refusal, proven
    once per kind as a real process: exit code and stderr as a shell sees them)."""
    (out,) = refused_by_processes([(args, env)])
    return out


def refused_by_processes(
    runs: Sequence[tuple[Sequence[str], Mapping[str, str] | None]],
    *,
    timeout_s: float = REFUSED_TIMEOUT_S,
) -> list[Exited]:
    """:func:`refused_by_process` for each ``(args, env)``, all started at once and waited for
    together (one bound for all): each is a process of its own, on its own arguments, so their
    start-ups (most of a refusal's time) overlap instead of adding up."""
    deadline = time.monotonic() + timeout_s
    procs = [
        subprocess.Popen(
            [*dagnats_command(), *args],
            cwd=HERE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                "PATH": "/usr/bin:/bin",
                "HOME": str(Path.home()),
                "COLUMNS": "200",
                **(env or {}),
            },
        )
        for args, env in runs
    ]
    try:
        outs: list[Exited] = []
        for proc in procs:
            # A refusal says one line: no pipe fills while another process is read first.
            stdout, stderr = proc.communicate(timeout=max(deadline - time.monotonic(), 0.0))
            outs.append(Exited(proc.returncode, stdout, stderr))
        return outs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
