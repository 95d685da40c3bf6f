"""What the journal audit reports: each violation (its rule, the record's sequence, a message),
the stored records that did not decode, and the report over one step's journal. The rules are
in :mod:`.check`.
"""

from __future__ import annotations

from typing import final

import attrs


@final
@attrs.frozen
class Violation:
    rule: str
    seq: int | None
    message: str

    def __str__(self) -> str:
        where = f"seq {self.seq}: " if self.seq is not None else ""
        return f"[{self.rule}] {where}{self.message}"


#: The rule of a stored record that does not decode.
UNDECODABLE_RULE = "undecodable"


@final
@attrs.frozen
class Unreadable:
    """A stored record that did not decode: its sequence and what was wrong with it."""

    seq: int
    problem: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.problem}"


@final
@attrs.frozen
class CheckReport:
    violations: tuple[Violation, ...]
    records: int
    commits: int
    iterations: int

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        head = "journal ok" if self.ok else f"journal has {len(self.violations)} violation(s)"
        return f"{head}: {self.records} records, {self.commits} commits, {self.iterations} ended"

    def render(self) -> str:
        return "\n".join([self.summary(), *(f"  {v}" for v in self.violations)])
