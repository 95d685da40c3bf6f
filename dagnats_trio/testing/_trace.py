"""The trace of a soak: an ordered log whose hash says whether two soaks did the same thing.

Only deterministic things go in: the schedule, each fault as it fired (Trio time since the soak
began, run, seam, iteration, attempt, worker name), and each run's outcome. No wall clock, no
memory addresses, no random ids from outside the seed.
"""

from __future__ import annotations

import hashlib
from typing import final


@final
class Trace:
    def __init__(self) -> None:
        self._lines: list[str] = []

    def add(self, *parts: object) -> None:
        self._lines.append(" ".join(str(p) for p in parts))

    @property
    def lines(self) -> tuple[str, ...]:
        return tuple(self._lines)

    def digest(self) -> str:
        h = hashlib.sha256()
        for line in self._lines:
            h.update(line.encode())
            h.update(b"\n")
        return h.hexdigest()
