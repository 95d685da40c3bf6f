"""Watching processes from a test: who a process's children are, and when one exits.

Linux only, like the parent-death signal these helpers check: children are read from
``/proc/<pid>/task/<tid>/children`` and exits are awaited on a pidfd (an event with a bound,
not a polling loop)."""

from __future__ import annotations

import os
import select
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def children_of(pid: int) -> set[int]:
    """The children of every thread of ``pid`` (Linux keeps one list per thread)."""
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out.update(int(p) for p in (task / "children").read_text().split())
        except OSError:
            continue
    return out


@contextmanager
def exit_watch(pid: int) -> Iterator[Callable[[float], bool]]:
    """``exited(bound_s)`` is True once ``pid`` has exited (zombies included), False if it is
    still running after ``bound_s``. Opened before the process is told to go, so a reused pid
    cannot be mistaken for it."""
    pidfd = os.pidfd_open(pid)

    def exited(bound_s: float) -> bool:
        readable, _, _ = select.select([pidfd], [], [], bound_s)
        return bool(readable)

    try:
        yield exited
    finally:
        os.close(pidfd)


def server_dir_of(pid: int) -> Path:
    """A running nats-server's temporary directory (config, ports file, log, a throwaway store):
    the folder of its ``-c`` config file."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return Path(argv[argv.index(b"-c") + 1].decode()).parent


def command_name(pid: int) -> str:
    """``/proc/<pid>/comm`` ("" once the process is gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
