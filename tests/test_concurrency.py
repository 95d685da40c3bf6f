"""``run_all``: calls at once whose failure is raised as itself, not in an ExceptionGroup (the
chaos soak retries ``TemporarilyUnavailable`` from a start whose index writes run at once)."""

from __future__ import annotations

import pytest
import trio

from dagnats_trio._concurrency import run_all
from dagnats_trio.transport import TemporarilyUnavailable


async def test_the_first_failure_is_raised_unwrapped_and_the_rest_cancelled() -> None:
    finished: list[int] = []

    async def ok(n: int) -> None:
        await trio.sleep(0 if n == 0 else 3600)
        finished.append(n)

    async def fails() -> None:
        raise TemporarilyUnavailable("leader election")

    with trio.fail_after(5), pytest.raises(TemporarilyUnavailable):
        await run_all([lambda: ok(0), fails, lambda: ok(1)], in_flight_max=3)
    assert 1 not in finished  # cancelled, not awaited for an hour


async def test_every_call_runs_within_the_bound() -> None:
    in_flight = peak = 0
    done = 0

    async def call() -> None:
        nonlocal in_flight, peak, done
        in_flight += 1
        peak = max(peak, in_flight)
        await trio.sleep(0.001)
        in_flight -= 1
        done += 1

    with trio.fail_after(5):
        await run_all([call] * 20, in_flight_max=4)
    assert done == 20 and peak == 4


class Spawns(trio.abc.Instrument):
    def __init__(self) -> None:
        self.spawned = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned += 1


@pytest.mark.parametrize("calls", [1, 2, 5])
async def test_the_last_call_runs_in_the_callers_task(calls: int) -> None:
    """Issue 12 goal 3: a pair of index writes costs one child task, not two (each task is a
    spawn and scheduler steps on a run's start)."""
    done: list[int] = []

    async def call(n: int) -> None:
        await trio.lowlevel.checkpoint()
        done.append(n)

    counter = Spawns()
    trio.lowlevel.add_instrument(counter)
    try:
        with trio.fail_after(5):
            await run_all([lambda n=n: call(n) for n in range(calls)], in_flight_max=calls)
    finally:
        trio.lowlevel.remove_instrument(counter)
    assert sorted(done) == list(range(calls))
    assert counter.spawned == calls - 1


async def test_no_calls_still_checkpoints() -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        await run_all([], in_flight_max=1)
        pytest.fail("run_all of nothing did not checkpoint")
    assert scope.cancelled_caught
