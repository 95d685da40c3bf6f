"""Temporary directories of embedded servers, and the ones a SIGKILLed owner left behind.

A process killed with SIGKILL runs no cleanup: its nats-server children die with it (their
parent-death signal), but their temporary directories (config, log, a throwaway store) stay.
Each directory's name carries its owner's pid, and making a new one first removes those of
this user whose owner is gone, so a leftover lasts only until the next embedded server starts.
A pid reused by another process keeps its directory (the safe mistake).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Final

#: Prefixes of the directories this package makes (a node's work dir, a cluster's stores).
NODE_DIR_PREFIX: Final = "dagnats-nats-"
CLUSTER_DIR_PREFIX: Final = "dagnats-cluster-"
_PREFIXES: Final = (NODE_DIR_PREFIX, CLUSTER_DIR_PREFIX)


def owned_temp_dir(prefix: str) -> Path:
    """A new temporary directory named ``<prefix><pid>-<random>``, after removing orphans."""
    remove_orphaned_temp_dirs()
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))


def remove_orphaned_temp_dirs() -> list[Path]:
    """Remove this user's server directories whose owning process is gone; returns them."""
    removed: list[Path] = []
    uid = os.getuid()
    for prefix in _PREFIXES:
        for path in Path(tempfile.gettempdir()).glob(f"{prefix}*-*"):
            owner = _owner_pid(path.name[len(prefix) :])
            if owner is None or _alive(owner):
                continue
            try:
                if path.lstat().st_uid != uid or not path.is_dir():
                    continue
            except FileNotFoundError:
                continue  # another process removed it first
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _owner_pid(rest: str) -> int | None:
    """The pid in ``<pid>-<random>`` (None for any other name, e.g. an older unowned one)."""
    text, sep, _ = rest.partition("-")
    if not sep or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


__all__ = [
    "CLUSTER_DIR_PREFIX",
    "NODE_DIR_PREFIX",
    "owned_temp_dir",
    "remove_orphaned_temp_dirs",
]
