"""The crash-point matrix (spec, "How it is verified"): every crash seam, killed and stalled, on
iteration 0, the unsafe iteration 1 and iteration 2, with two engines sharing the history consumer
and two workers. One test per seam runs its cases at once, each crashing only its own run."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from dagnats_trio._seams import Seam
from dagnats_trio.testing import AgentCounters, ScriptedAgent

from ._harness import WORKER_SEAMS, Connect, cases_for, render, run_cases

SEAMS = [*WORKER_SEAMS, Seam.ENGINE_AFTER_DISPATCH_SAVED]


async def _matrix_row(connect: Connect, seam: Seam) -> None:
    counters = AgentCounters()
    cases = cases_for(seam)
    outcomes = await run_cases(connect, cases, ScriptedAgent(counters=counters))
    assert [o.run.case for o in outcomes] == cases
    failing = render(outcomes, counters)
    assert not failing, f"failing cases:\n{failing}"


@pytest.mark.parametrize("seam", SEAMS, ids=[s.value for s in SEAMS])
async def test_matrix_nats(nats_connect: Connect, seam: Seam) -> None:
    await _matrix_row(nats_connect, seam)


@pytest.mark.parametrize("seam", SEAMS, ids=[s.value for s in SEAMS])
async def test_matrix_sim(
    sim_connect: Connect, seam: Seam, autojump_clock: trio.testing.MockClock
) -> None:
    await _matrix_row(sim_connect, seam)
