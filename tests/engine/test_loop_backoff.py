"""The engine's fetch loops (history and timers) ride out an outage of any length with a capped
backoff jittered from the env's seeded random source (issue 16, item 1), on SimTransport under
the autojumping MockClock: the same seed gives the same retry times, another seed other times;
the pauses stay within ``LOOP_ERROR_BACKOFF_MAX_S``; each loop warns once per outage; a run
started after the outage completes. (The worker's twin is tests/worker/test_fetch_backoff.py;
the real-server outages are tests/e2e/test_nats_outage.py and
tests/cli/test_outage_processes.py.)"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Final

import pytest
import trio
import trio.testing

from dagnats_trio._env import deterministic_env
from dagnats_trio.api import Service
from dagnats_trio.engine import LOOP_ERROR_BACKOFF_MAX_S, LOOP_ERROR_BACKOFF_S, Engine
from dagnats_trio.protocol import RunStatus
from dagnats_trio.protocol.layout import HISTORY_STREAM
from dagnats_trio.transport import TransportError, fetch_feed, open_sim_transport, provision
from dagnats_trio.worker import TaskContext, Worker

#: A long outage, in Trio time (the clock autojumps).
OUTAGE_S: Final = 300.0
#: Bound on the run finishing after the outage (Trio time).
WAIT_S: Final = 60.0
TASK: Final = "after_outage"


class FetchLog:
    """Delegates to a transport and notes when each history fetch was tried and whether it
    failed."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.tries: list[tuple[float, bool]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def fetch(self, stream: str, *args: Any, **kw: Any) -> Any:
        at = trio.current_time()
        try:
            result = await self._inner.fetch(stream, *args, **kw)
        except TransportError:
            if stream == HISTORY_STREAM:
                self.tries.append((at, False))
            raise
        if stream == HISTORY_STREAM:
            self.tries.append((at, True))
        return result

    def consume(self, stream: str, durable: str, batch: int) -> Any:
        """The engine fetches through a feed: one over this log's own fetch."""
        return fetch_feed(self, stream, durable, batch)


async def _outage_run(seed: int) -> tuple[list[float], RunStatus]:
    """The times of the failed history fetches, from the outage's start, and the status of a run
    started after it."""
    async with open_sim_transport() as sim:
        await provision(sim)
        log = FetchLog(sim)

        async def handler(tc: TaskContext) -> None:
            await tc.complete("after the outage")

        engine = Engine(log, env=deterministic_env(seed), legacy_step_events=False)
        service = Service(sim)
        await service.register_workflow({"name": "wf", "steps": [{"id": "s", "task": TASK}]})
        async with trio.open_nursery() as nursery:
            await nursery.start(engine.run)
            await nursery.start(Worker(sim, {TASK: handler}).run)
            start = trio.current_time()
            sim.faults.unavailable_for(OUTAGE_S)
            await trio.sleep_until(start + OUTAGE_S)  # the outage itself, in Trio time
            run_id = await service.start_run("wf")
            snap = await service.wait_for_run(run_id, WAIT_S)
            nursery.cancel_scope.cancel()
    failed = [round(at - start, 6) for at, ok in log.tries if not ok and at >= start]
    return failed, snap.status


async def test_engine_loops_back_off_by_the_seed(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="dagnats_trio.engine")
    first, status = await _outage_run(seed=7)
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "fetch failed" in r.getMessage()
    ]
    again, _ = await _outage_run(seed=7)
    other, _ = await _outage_run(seed=8)
    gaps = [b - a for a, b in itertools.pairwise(first)]
    print(
        f"{len(first)} failed history fetches in a {OUTAGE_S:.0f} s outage; first gaps "
        f"{[round(g, 3) for g in gaps[:6]]}; largest {max(gaps):.3f} s; run {status.value}; "
        f"warnings {warnings}"
    )
    assert status is RunStatus.COMPLETED
    assert first == again  # the seed fixes the trace
    assert first != other  # and the jitter comes from it
    assert gaps[0] <= LOOP_ERROR_BACKOFF_S + 1e-9  # the first pause: at most the start
    assert all(g <= LOOP_ERROR_BACKOFF_MAX_S + 1e-9 for g in gaps)  # capped
    late = gaps[len(gaps) // 2 :]  # at the cap: jittered between half and all of it
    assert all(g >= LOOP_ERROR_BACKOFF_MAX_S / 2 - 1e-9 for g in late)
    assert len({round(g, 6) for g in late}) > len(late) // 2
    assert (
        OUTAGE_S / LOOP_ERROR_BACKOFF_MAX_S
        <= len(first)
        <= 2 * OUTAGE_S / LOOP_ERROR_BACKOFF_MAX_S + 20
    )
    # One warning per loop for the whole outage (the rest at DEBUG): history and timers.
    assert sorted(w.split(" ", 1)[0] for w in warnings) == ["history", "timer"], warnings
