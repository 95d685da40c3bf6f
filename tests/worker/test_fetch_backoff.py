"""The worker's fetch loop rides out an outage with a capped backoff jittered from the env's
seeded random source (issue 16, item 1), on SimTransport under the autojumping MockClock: the
same seed gives the same retry times, another seed other times; the pauses stay within
[half, all] of a doubling base capped at ``FETCH_BACKOFF_MAX_S``; one warning per outage.
(The real-server outage is tests/e2e/test_nats_outage.py.)"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Final

import pytest
import trio
import trio.testing

from dagnats_trio._env import Backoff, backoff_delay_s, deterministic_env
from dagnats_trio.protocol import StepCompleted
from dagnats_trio.transport import TransportError, fetch_puller, open_sim_transport, provision
from dagnats_trio.worker import (
    FETCH_BACKOFF_MAX_S,
    FETCH_BACKOFF_START_S,
    TaskContext,
    Worker,
)

from ._helpers import history, make_task, publish_task, uid

#: A long outage, in Trio time (the clock autojumps).
OUTAGE_S: Final = 300.0
#: Bound on the task finishing after the outage (Trio time).
WAIT_S: Final = OUTAGE_S + 60.0


class FetchLog:
    """Delegates to a transport and notes when each fetch was tried and whether it failed."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.tries: list[tuple[float, bool]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def fetch(self, *args: Any, **kw: Any) -> Any:
        at = trio.current_time()
        try:
            result = await self._inner.fetch(*args, **kw)
        except TransportError:
            self.tries.append((at, False))
            raise
        self.tries.append((at, True))
        return result

    def pull(self, stream: str, durable: str, **kw: Any) -> Any:
        """The worker pulls through a puller: one over this wrapper's own fetch."""
        return fetch_puller(self, stream, durable, **kw)


async def _outage_run(seed: int) -> list[float]:
    """The times of the failed fetches, from the outage's start; the task done after it."""
    async with open_sim_transport() as sim:
        await provision(sim)
        log = FetchLog(sim)
        task = make_task(uid(), task_type="t")
        done = trio.Event()

        async def handler(tc: TaskContext) -> None:
            await tc.complete("after the outage")
            done.set()

        worker = Worker(log, {"t": handler}, env=deterministic_env(seed))
        async with trio.open_nursery() as nursery:
            await nursery.start(worker.run)
            start = trio.current_time()
            sim.faults.unavailable_for(OUTAGE_S)
            with trio.fail_after(WAIT_S):
                await trio.sleep_until(start + OUTAGE_S)  # the outage itself, in Trio time
                await publish_task(sim, task)
                await done.wait()
            nursery.cancel_scope.cancel()
        events = await history(sim, task.run_id)
    assert [type(e) for e in events] == [StepCompleted]
    # Rounded: each run starts at another clock reading, so the float subtraction may differ
    # in its last bits.
    failed = [round(at - start, 6) for at, ok in log.tries if not ok and at >= start]
    return failed


def test_backoff_is_capped_and_jittered() -> None:
    for failures in range(12):
        base = min(FETCH_BACKOFF_MAX_S, FETCH_BACKOFF_START_S * 2**failures)
        low = backoff_delay_s(failures, FETCH_BACKOFF_START_S, FETCH_BACKOFF_MAX_S, 0.0)
        high = backoff_delay_s(failures, FETCH_BACKOFF_START_S, FETCH_BACKOFF_MAX_S, 0.999999)
        assert low == pytest.approx(base / 2) and high == pytest.approx(base, rel=1e-5)
    b = Backoff(1.0, 5.0, deterministic_env(3).random)
    delays = [b.next_s() for _ in range(20)]
    assert all(0.5 <= d <= 5.0 for d in delays) and len(set(delays)) == len(delays)
    b.reset()
    assert b.failures == 0 and b.next_s() <= 1.0


async def test_outage_retries_follow_the_seed(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="dagnats_trio.worker")
    first = await _outage_run(seed=7)
    warnings = [
        r for r in caplog.records if r.levelno == logging.WARNING and "fetch from" in r.message
    ]
    again = await _outage_run(seed=7)
    other = await _outage_run(seed=8)
    gaps = [b - a for a, b in itertools.pairwise(first)]
    print(
        f"{len(first)} failed fetches in a {OUTAGE_S:.0f} s outage; first gaps "
        f"{[round(g, 3) for g in gaps[:6]]}; largest {max(gaps):.3f} s"
    )
    assert first == again  # the seed fixes the trace
    assert first != other  # and the jitter comes from it
    assert all(g <= FETCH_BACKOFF_MAX_S + 1e-9 for g in gaps)  # capped
    late = gaps[len(gaps) // 2 :]  # at the cap: jittered between half and all of it
    assert all(g >= FETCH_BACKOFF_MAX_S / 2 - 1e-9 for g in late)
    assert len({round(g, 6) for g in late}) > len(late) // 2
    assert OUTAGE_S / FETCH_BACKOFF_MAX_S <= len(first) <= 2 * OUTAGE_S / FETCH_BACKOFF_MAX_S + 20
    assert len(warnings) == 1  # one warning for the whole outage (the rest at DEBUG)
