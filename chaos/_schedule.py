"""The fault schedule: drawn up front from ``random.Random(seed)``, so one seed is one schedule.

Every fault is armed at a trigger, a crash seam of one run at one iteration: the first time a
holder (or an engine) of that run reaches that seam there, the fault fires. Kills and stalls act
on whoever reached the seam; the transport faults (duplicate, drop, lost publish ack, step-down)
are switched on at that moment and hit whatever comes next. Tying every fault to a point in the
run, rather than to a clock, puts it inside the run whatever the speed of the backend, and makes
the real-server modes run the same shape of schedule as the simulation.

This module is pure: no Trio, no I/O.
"""

from __future__ import annotations

import random

import attrs

from dagnats_trio._seams import Seam
from dagnats_trio.testing import NODE_KINDS, Fault, FaultKind, Target

#: Iterations of the scripted agent: search, send_message (unsafe), lookup, answer.
AGENT_ITERATIONS = 4
#: The iteration whose tool is unsafe.
UNSAFE_ITERATION = 1
#: Most faults one run is given.
MAX_FAULTS_PER_RUN = 3
#: Runs at the start of a schedule that each get one fault of every kind in turn, so that even a
#: short soak injects every kind (the rest is random).
COVERAGE_ROUNDS = 2
#: A stall lasts this many AckWaits of the stalled party (below 1: no successor takes over).
STALL_ACK_WAITS_MIN = 0.5
STALL_ACK_WAITS_MAX = 3.0
#: A simulated stream-leader step-down keeps JetStream unavailable this long (Trio seconds).
STEP_DOWN_WINDOW_MIN_S = 0.05
STEP_DOWN_WINDOW_MAX_S = 2.0
#: Node faults (``--cluster``): how long a killed node stays down before its restart, how long a
#: paused one stays stopped (past nats-server's Raft election timeout, 4-9 s, in most draws: the
#: others elect a new leader and the paused one wakes a zombie), how long a partition lasts.
NODE_DOWN_MIN_S = 0.2
NODE_DOWN_MAX_S = 3.0
NODE_PAUSE_MIN_S = 4.0
NODE_PAUSE_MAX_S = 10.0
PARTITION_MIN_S = 2.0
PARTITION_MAX_S = 8.0
#: Digits kept of drawn floats, so the schedule prints (and hashes) the same everywhere.
FLOAT_DIGITS = 3


#: The kinds every backend can inject (the simulation's schedule), and those of a cluster: the
#: node faults first, so that the first runs of a short cluster soak get one of each.
BASE_KINDS: tuple[FaultKind, ...] = tuple(k for k in FaultKind if k not in NODE_KINDS)
CLUSTER_KINDS: tuple[FaultKind, ...] = NODE_KINDS + BASE_KINDS
#: Relative weights of the kinds drawn after the coverage rounds.
KIND_WEIGHTS: dict[FaultKind, int] = {
    FaultKind.KILL: 4,
    FaultKind.STALL: 3,
    FaultKind.DUPLICATE: 2,
    FaultKind.DROP: 2,
    FaultKind.LOST_ACK: 2,
    FaultKind.STEP_DOWN: 2,
    FaultKind.NODE_KILL: 1,
    FaultKind.NODE_PAUSE: 1,
    FaultKind.PARTITION: 1,
}
#: How long each node fault lasts, drawn uniformly (seconds).
NODE_WINDOWS_S: dict[FaultKind, tuple[float, float]] = {
    FaultKind.NODE_KILL: (NODE_DOWN_MIN_S, NODE_DOWN_MAX_S),
    FaultKind.NODE_PAUSE: (NODE_PAUSE_MIN_S, NODE_PAUSE_MAX_S),
    FaultKind.PARTITION: (PARTITION_MIN_S, PARTITION_MAX_S),
}
#: How many faults a run gets after the coverage rounds (drawn uniformly from this tuple).
FAULT_COUNTS: tuple[int, ...] = (0, 1, 1, 2, 2, 3)
#: Iterations weighted towards the unsafe one and its neighbours.
ITERATION_WEIGHTS: tuple[int, ...] = (2, 3, 2, 1)

#: Seams a worker reaches in a tool iteration (0-2) and in the answer iteration (3).
TOOL_SEAMS: tuple[Seam, ...] = (
    Seam.BEFORE_CLAIM,
    Seam.AFTER_CLAIM,
    Seam.AFTER_TOOL_INTENT,
    Seam.INSIDE_TOOL,
    Seam.AFTER_TOOL_RESULT,
    Seam.AFTER_COMMIT,
    Seam.AFTER_LIFECYCLE_EVENT,
)
ANSWER_SEAMS: tuple[Seam, ...] = (
    Seam.BEFORE_CLAIM,
    Seam.AFTER_CLAIM,
    Seam.AFTER_COMMIT,
    Seam.AFTER_LIFECYCLE_EVENT,
)


#: Targets per transport fault kind.
TARGETS: dict[FaultKind, tuple[Target, ...]] = {
    FaultKind.DUPLICATE: (Target.TASKS, Target.HISTORY),
    FaultKind.DROP: (Target.TASKS, Target.HISTORY),
    FaultKind.LOST_ACK: (Target.JOURNAL, Target.HISTORY, Target.TASKS),
    FaultKind.STEP_DOWN: (Target.JOURNAL, Target.HISTORY, Target.TASKS, Target.RUNS),
    # A node fault picks its node as the leader or a follower of this target's stream.
    FaultKind.NODE_KILL: (Target.JOURNAL, Target.HISTORY, Target.TASKS, Target.RUNS),
    FaultKind.NODE_PAUSE: (Target.JOURNAL, Target.HISTORY, Target.TASKS, Target.RUNS),
    FaultKind.PARTITION: (Target.JOURNAL, Target.HISTORY, Target.TASKS, Target.RUNS),
}


@attrs.frozen
class RunPlan:
    index: int
    run_id: str
    faults: tuple[Fault, ...]


def run_id_for(seed: int, index: int) -> str:
    """A run id fixed by the schedule, so a fault can be keyed to its run before it starts."""
    return f"chaos{seed % 1_000_000:06d}-{index:05d}"


def draw_schedule(
    seed: int, runs: int, kinds: tuple[FaultKind, ...] = BASE_KINDS
) -> tuple[RunPlan, ...]:
    """The whole schedule of a soak; the same ``(seed, runs, kinds)`` always gives the same
    plans. ``kinds`` are the kinds the backend can inject (:data:`CLUSTER_KINDS` on a cluster)."""
    if runs < 1:
        raise ValueError(f"a soak needs at least one run, got {runs}")
    unknown = [k for k in kinds if k not in KIND_WEIGHTS]
    if not kinds or unknown:
        raise ValueError(f"no weights for fault kinds {unknown or kinds}")
    weights = {k: KIND_WEIGHTS[k] for k in kinds}
    rng = random.Random(seed)
    plans = []
    for index in range(runs):
        chosen: list[FaultKind] = []
        if index < COVERAGE_ROUNDS * len(kinds):
            chosen.append(kinds[index % len(kinds)])
        count = rng.choice(FAULT_COUNTS)
        while len(chosen) < min(max(count, len(chosen)), MAX_FAULTS_PER_RUN):
            chosen.append(_weighted(rng, weights))
        faults = tuple(_draw_fault(rng, kind) for kind in chosen)
        plans.append(RunPlan(index, run_id_for(seed, index), faults))
    return tuple(plans)


def _weighted(rng: random.Random, weights: dict[FaultKind, int]) -> FaultKind:
    kinds = list(weights)
    return rng.choices(kinds, weights=[weights[k] for k in kinds])[0]


def _draw_fault(rng: random.Random, kind: FaultKind) -> Fault:
    iteration = rng.choices(range(AGENT_ITERATIONS), weights=ITERATION_WEIGHTS)[0]
    worker_seams = TOOL_SEAMS if iteration < AGENT_ITERATIONS - 1 else ANSWER_SEAMS
    if kind in (FaultKind.KILL, FaultKind.STALL):
        # The engine's seam (between saving a dispatch and publishing it) takes one draw in
        # eight; the rest go to the worker's seams.
        if rng.random() < 1 / 8:
            seam = Seam.ENGINE_AFTER_DISPATCH_SAVED
        else:
            seam = rng.choice(worker_seams)
        if kind is FaultKind.KILL:
            return Fault(kind, seam, iteration)
        factor = round(rng.uniform(STALL_ACK_WAITS_MIN, STALL_ACK_WAITS_MAX), FLOAT_DIGITS)
        return Fault(kind, seam, iteration, stall_ack_waits=factor)
    seam = rng.choice(worker_seams)
    target = rng.choice(TARGETS[kind])
    if kind in NODE_KINDS:
        low, high = NODE_WINDOWS_S[kind]
        on_leader = rng.random() < 1 / 2
        window = round(rng.uniform(low, high), FLOAT_DIGITS)
        return Fault(kind, seam, iteration, target=target, window_s=window, on_leader=on_leader)
    window = 0.0
    if kind is FaultKind.STEP_DOWN:
        window = round(rng.uniform(STEP_DOWN_WINDOW_MIN_S, STEP_DOWN_WINDOW_MAX_S), FLOAT_DIGITS)
    return Fault(kind, seam, iteration, target=target, window_s=window)
