"""The fenced code blocks of README.md and docs/*.md, and running one as a user would."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]
#: Bound of a documented program's start (embedded nats-server, engine, API).
PROGRAM_START_TIMEOUT_S = 60.0
#: Bound of its stop after SIGINT, and of a program that runs to its end.
PROGRAM_STOP_TIMEOUT_S = 30.0

_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


@attrs.frozen
class Block:
    file: str  # relative to the repository
    index: int  # among the file's blocks
    lang: str
    text: str

    @property
    def key(self) -> tuple[str, str]:
        """(file, first line): how the tables of the tests name a block."""
        return self.file, self.text.strip().splitlines()[0]


def blocks(*langs: str) -> list[Block]:
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        rel = str(path.relative_to(ROOT))
        for i, m in enumerate(_FENCE.finditer(path.read_text(encoding="utf-8"))):
            if m.group(1) in langs:
                out.append(Block(rel, i, m.group(1), m.group(2)))
    return out


def block(file: str, first_line: str) -> Block:
    for b in blocks("python", "sh"):
        if b.file == file and b.key[1].startswith(first_line):
            return b
    raise LookupError(f"{file} has no block starting {first_line!r}")


def _pump(stream: object, lines: queue.Queue[str | None], sink: list[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        sink.append(line)
        lines.put(line.rstrip("\n"))
    lines.put(None)


@attrs.define
class Program:
    """A documented program running as a child, its stdout and stderr merged."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[str | None]
    output: list[str]

    def wait_for(self, marker: str, timeout_s: float = PROGRAM_START_TIMEOUT_S) -> None:
        while True:
            line = self.lines.get(timeout=timeout_s)
            if line is None:
                raise AssertionError(f"exited before {marker!r}:\n{self.text}")
            if marker in line:
                return

    def interrupt(self) -> int:
        """SIGINT to its process group, as Ctrl-C in a terminal sends; the exit code."""
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.finish()

    def finish(self) -> int:
        try:
            rc = self.proc.wait(PROGRAM_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise
        return rc

    @property
    def text(self) -> str:
        return "".join(self.output)


def start_program(path: Path, *, cwd: Path, env: Mapping[str, str] | None = None) -> Program:
    proc = subprocess.Popen(
        [sys.executable, str(path)],
        cwd=cwd,
        env={**os.environ, **(env or {}), "PYTHONPATH": f"{cwd}{os.pathsep}{ROOT}"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    output: list[str] = []
    threading.Thread(target=_pump, args=(proc.stdout, lines, output), daemon=True).start()
    return Program(proc, lines, output)
