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
