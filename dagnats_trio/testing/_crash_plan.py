"""What :func:`~._crash.crash_test` plans and reports: the seeded schedule of kills and stalls
over the crash seams, and the verdict of one seed."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Final, final

import attrs

from dagnats_trio._seams import Seam

from ._seam_faults import Fault, FaultKind

#: Every seam a holder or an engine reaches, in the order they are reached.
CRASH_SEAMS: Final = (
    Seam.BEFORE_CLAIM,
    Seam.AFTER_CLAIM,
    Seam.INSIDE_BATCH,
    Seam.AFTER_TOOL_INTENT,
    Seam.INSIDE_TOOL,
    Seam.AFTER_TOOL_RESULT,
    Seam.AFTER_COMMIT,
    Seam.AFTER_LIFECYCLE_EVENT,
    Seam.ENGINE_AFTER_DISPATCH_SAVED,
)
#: Faults a run gets after the coverage runs (drawn uniformly from this tuple).
CRASH_FAULT_COUNTS: Final = (0, 1, 1, 2)
#: A stall lasts this many AckWaits of the stalled party (below 1: no successor takes over).
CRASH_STALL_ACK_WAITS_MIN: Final = 0.5
CRASH_STALL_ACK_WAITS_MAX: Final = 3.0
#: Digits kept of drawn floats, so the schedule prints (and hashes) the same everywhere.
CRASH_FLOAT_DIGITS: Final = 3


@final
@attrs.frozen
class CrashPlan:
    index: int
    run_id: str
    #: Index into the inputs: this run is compared with that input's crash-free run.
    input_index: int
    faults: tuple[Fault, ...]


def draw_crash_schedule(
    seed: int, runs: int, iterations: int, inputs: int = 1
) -> tuple[CrashPlan, ...]:
    """The schedule of :func:`crash_test`: the same arguments always give the same plans. The
    first ``2 * len(CRASH_SEAMS)`` runs get one kill, then one stall, at each seam in turn."""
    if runs < 1 or iterations < 1 or inputs < 1:
        raise ValueError("runs, iterations and inputs must each be at least 1")
    rng = random.Random(seed)
    coverage = [(kind, seam) for kind in (FaultKind.KILL, FaultKind.STALL) for seam in CRASH_SEAMS]
    plans = []
    for index in range(runs):
        drawn: list[tuple[FaultKind, Seam]] = []
        if index < len(coverage):
            drawn.append(coverage[index])
        for _ in range(rng.choice(CRASH_FAULT_COUNTS)):
            drawn.append((rng.choice((FaultKind.KILL, FaultKind.STALL)), rng.choice(CRASH_SEAMS)))
        faults = []
        for kind, seam in drawn:
            iteration = rng.randrange(iterations)
            if kind is FaultKind.STALL:
                factor = round(
                    rng.uniform(CRASH_STALL_ACK_WAITS_MIN, CRASH_STALL_ACK_WAITS_MAX),
                    CRASH_FLOAT_DIGITS,
                )
                faults.append(Fault(kind, seam, iteration, stall_ack_waits=factor))
            else:
                faults.append(Fault(kind, seam, iteration))
        run_id = f"crash{seed % 1_000_000:06d}-{index:05d}"
        plans.append(CrashPlan(index, run_id, index % inputs, tuple(faults)))
    return tuple(plans)


@final
@attrs.frozen
class CrashRun:
    """One run's end as the checks saw it."""

    index: int
    run_id: str
    status: str
    faults: tuple[str, ...]
    problems: tuple[str, ...]


@final
@attrs.frozen
class CrashReport:
    """The verdict of one seed. ``violations`` name the run, the seed and what went wrong."""

    seed: int
    runs: tuple[CrashRun, ...]
    fired: Mapping[str, int]
    unfired: int
    violations: tuple[str, ...]
    trace_hash: str
    trace: tuple[str, ...] = attrs.field(repr=False, eq=False)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        fired = ", ".join(f"{k} {n}" for k, n in sorted(self.fired.items()) if n)
        verdict = "ok" if self.ok else f"{len(self.violations)} violation(s)"
        return (
            f"seed {self.seed}: {len(self.runs)} runs, faults fired: {fired or 'none'}, "
            f"unfired {self.unfired}: {verdict}; trace={self.trace_hash[:16]}"
        )
