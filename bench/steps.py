"""Scheduler steps per run, per task: where Trio's share of the scripted agent's CPU goes.

A count, not a time (the machine's load does not move it): every step of a task is one
resumption by Trio's scheduler (``before_task_step``), every pass of the run loop one wait for
I/O (``before_io_wait``, with a zero timeout when tasks are runnable). Counted with a public
:class:`trio.abc.Instrument`, installed only around the measured runs.
"""

from __future__ import annotations

from collections import Counter
from typing import final

import trio


@final
class StepCounter(trio.abc.Instrument):
    """Steps per task name and scheduler passes, while installed."""

    def __init__(self) -> None:
        self.steps: Counter[str] = Counter()
        self.passes = 0
        #: Socket writes of the same runs (system calls: each costs more CPU than a step), set
        #: by whoever can count them.
        self.socket_writes = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task.name] += 1

    def before_io_wait(self, timeout: float) -> None:
        self.passes += 1


def short_task_name(name: str) -> str:
    """``dagnats_trio.nats._reader.read_events`` -> ``nats._reader.read_events``: the package
    prefix every task shares dropped."""
    return name.removeprefix("dagnats_trio.")


def print_steps(counter: StepCounter, runs: int, *, top: int) -> dict[str, float]:
    """Prints steps and passes per run, the busiest tasks first; returns the headline figures."""
    total = sum(counter.steps.values())
    print(f"  scheduler passes per run: {counter.passes / runs:.1f}; "
          f"task steps per run: {total / runs:.1f}; "
          f"socket writes per run: {counter.socket_writes / runs:.1f}")  # fmt: skip
    print(f"  task steps per run by task (top {top}):")
    for name, steps in counter.steps.most_common(top):
        print(f"    {steps / runs:6.1f}  {short_task_name(name)}")
    return {
        "profile_passes_per_run": round(counter.passes / runs, 1),
        "profile_task_steps_per_run": round(total / runs, 1),
        "profile_socket_writes_per_run": round(counter.socket_writes / runs, 1),
    }
