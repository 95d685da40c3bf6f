"""The handlers a ``dagnats worker`` process runs in the scale-out benchmark (``bench.scale``).

The scripted agent (:class:`~dagnats_trio.testing.ScriptedAgent`, paired writes) whose unsafe
tool, at each start, appends one line ``RUN_ID TOOL`` to a file of this process in the folder
``$DAGNATS_SCALE_MARKERS``: starts counted outside the journal, by the tool itself, so the
benchmark sees an unsafe tool started twice whichever process started it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from dagnats_trio.journal import Replay
from dagnats_trio.testing import DEFAULT_SCRIPT, AgentCounters, ScriptedAgent
from dagnats_trio.worker import Handler

from .scale import MARKER_DIR_ENV, MARKER_SUFFIX, SCALE_TASK

#: Tools of the script declared unsafe: each of their starts is marked.
UNSAFE_TOOLS: Final = frozenset(
    t.tool for t in DEFAULT_SCRIPT if t.tool is not None and t.replay is Replay.UNSAFE
)


class _MarkedStarts(dict[tuple[str, str], int]):
    """The agent's ``tool_starts`` table: each count of an unsafe tool's start also appends a
    line to the marker file (one ``write`` on an ``O_APPEND`` descriptor: whole, in the kernel
    before the tool goes on, so a process killed after it still leaves the line)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def __setitem__(self, key: tuple[str, str], value: int) -> None:
        run_id, tool = key
        if tool in UNSAFE_TOOLS:
            os.write(self._fd, f"{run_id} {tool}\n".encode())
        super().__setitem__(key, value)


def _handlers() -> dict[str, Handler]:
    folder = os.environ.get(MARKER_DIR_ENV)
    if folder is None:
        raise RuntimeError(f"{MARKER_DIR_ENV} names no folder for the unsafe tool's markers")
    starts = _MarkedStarts(Path(folder) / f"{os.getpid()}{MARKER_SUFFIX}")
    agent = ScriptedAgent(task=SCALE_TASK, counters=AgentCounters(tool_starts=starts))
    return agent.handlers


handlers: dict[str, Handler] = _handlers()
