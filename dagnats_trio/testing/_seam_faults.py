"""Faults at the crash seams, shared by the chaos soak (``just chaos``) and :func:`crash_test`.

A :class:`Fault` is armed at a trigger, a crash seam of one run at one iteration: the first time
a holder (or an engine) of that run reaches that seam there, it fires. :class:`SeamFaults` is the
seam hook that fires them: a kill raises (the holder dies there), a stall sleeps a number of the
stalled party's AckWaits (a successor takes over, the zombie wakes and must be fenced); the
transport kinds are handed to an ``arm`` callback (the chaos soak's injector). Every firing is a
trace line, so a seeded schedule on the autojump clock, run under
:func:`~dagnats_trio.testing.run_deterministic`, gives one trace hash.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import final

import attrs
import trio

from dagnats_trio._seams import Seam, SeamContext

from ._trace import Trace


class FaultKind(enum.Enum):
    KILL = "kill"
    STALL = "stall"
    DUPLICATE = "duplicate"
    DROP = "drop"
    LOST_ACK = "lost_ack"
    STEP_DOWN = "step_down"
    # Cluster faults (``--cluster`` only): a whole nats-server node, chosen as the leader or a
    # follower of the fault's target stream.
    NODE_KILL = "node_kill"  # SIGKILL, down for window_s, restarted on its store
    NODE_PAUSE = "node_pause"  # SIGSTOP for window_s (past an election timeout), then SIGCONT
    PARTITION = "partition"  # cut off from the other two nodes for window_s, then healed


#: The kinds that act on a whole node of a cluster.
NODE_KINDS = (FaultKind.NODE_KILL, FaultKind.NODE_PAUSE, FaultKind.PARTITION)


class Target(enum.Enum):
    """What a transport fault aims at."""

    TASKS = "tasks"  # the workers' consumer / the task subject of the run
    HISTORY = "history"  # the engines' consumer / the history subject of the run
    JOURNAL = "journal"  # the journal subject of the run
    RUNS = "runs"  # the KV bucket of run snapshots (a step-down target)


@final
@attrs.frozen
class Fault:
    """One scheduled fault. ``stall_ack_waits`` is for stalls, ``window_s`` for step-downs and
    node faults (how long the node stays down, paused or cut off); ``on_leader`` says whether a
    node fault hits the leader of ``target``'s stream or a follower."""

    kind: FaultKind
    seam: Seam
    iteration: int
    target: Target | None = None
    stall_ack_waits: float = 0.0
    window_s: float = 0.0
    on_leader: bool = False

    def describe(self) -> str:
        where = f"{self.seam.value}@{self.iteration}"
        if self.kind is FaultKind.STALL:
            return f"stall {where} x{self.stall_ack_waits}"
        if self.kind is FaultKind.KILL:
            return f"kill {where}"
        assert self.target is not None
        if self.kind in NODE_KINDS:
            role = "leader" if self.on_leader else "follower"
            return f"{self.kind.value} {role} of {self.target.value} {self.window_s}s at {where}"
        extra = f" {self.window_s}s" if self.kind is FaultKind.STEP_DOWN else ""
        return f"{self.kind.value} {self.target.value}{extra} at {where}"


@final
class CrashKill(Exception):
    """Raised by the seam hook: the holder that reached the seam dies there."""


#: Arms a transport fault for a run; returns what it did, for the trace.
ArmFn = Callable[[Fault, str], Awaitable[str]]


@final
class SeamFaults:
    """The seam hook and its bookkeeping: which faults are still to fire, and the stalls."""

    def __init__(
        self,
        pending: Mapping[str, Sequence[Fault]],
        index: Mapping[str, int],
        trace: Trace,
        *,
        worker_ack_wait_s: float,
        engine_ack_wait_s: float,
        arm: ArmFn | None = None,
    ) -> None:
        self._pending = {run_id: list(faults) for run_id, faults in pending.items()}
        self._index = dict(index)
        self._trace = trace
        self._worker_ack_wait_s = worker_ack_wait_s
        self._engine_ack_wait_s = engine_ack_wait_s
        self._arm = arm
        self.fired = {k: 0 for k in FaultKind}
        self.t0 = trio.current_time()
        self.stalls = 0
        self._stalls_changed = trio.Event()

    def unfired(self) -> int:
        return sum(len(left) for left in self._pending.values())

    async def hook(self, ctx: SeamContext) -> None:
        pending = self._pending.get(ctx.run_id)
        if not pending:
            return
        for i, fault in enumerate(pending):
            if fault.seam is ctx.seam and fault.iteration == ctx.iteration:
                del pending[i]
                break
        else:
            return
        self.fired[fault.kind] += 1
        engine = ctx.seam is Seam.ENGINE_AFTER_DISPATCH_SAVED
        who = "engine" if engine else ctx.worker_id
        head = (
            f"fault t={trio.current_time() - self.t0:.6f} run={self._index[ctx.run_id]} "
            f"attempt={ctx.attempt} by={who}: {fault.describe()}"
        )
        if fault.kind is FaultKind.KILL:
            self._trace.add(head)
            raise CrashKill(f"chaos: {fault.describe()}")
        if fault.kind is FaultKind.STALL:
            ack_wait = self._engine_ack_wait_s if engine else self._worker_ack_wait_s
            self._trace.add(head)
            self.stalls += 1
            try:
                await trio.sleep(fault.stall_ack_waits * ack_wait)
            finally:
                self.stalls -= 1
                self._stalls_changed.set()
                self._stalls_changed = trio.Event()
            return
        if self._arm is None:
            raise ValueError(f"no injector for a {fault.kind.value} fault")
        note = await self._arm(fault, ctx.run_id)
        self._trace.add(head, "->", note)

    async def wait_no_stalls(self) -> None:
        while self.stalls:
            await self._stalls_changed.wait()
