"""The crash-point matrix (spec, "How it is verified"): every crash seam, killed and stalled, on
iteration 0, the unsafe iteration 1 and iteration 2, with two engines sharing the history consumer
and two workers: 8 seams x 2 modes x 3 iterations = 48 cases per transport. One test per seam and
mode (its id says which, e.g. ``[inside_tool-stall]``) runs its three cases at once, each crashing
only its own run; a failure names each failing case as ``seam/mode/iteration N``."""

from __future__ import annotations

import itertools

import pytest
import trio
import trio.testing

from dagnats_trio._seams import Seam
from dagnats_trio.testing import AgentCounters, ScriptedAgent

from ._harness import (
    ALL_CASES,
    ITERATIONS,
    SEAMS,
    Case,
    Connect,
    Mode,
    cases_for,
    render,
    run_cases,
)

ROWS = [(seam, mode) for seam in SEAMS for mode in Mode]
ROW_IDS = [f"{seam.value}-{mode.value}" for seam, mode in ROWS]
#: The spec's crash points, in its words' order: before and after the claim, after the tool
#: intent, inside the tool, after the result, after the commit, after the lifecycle event, and in
#: the engine between saving a dispatch and publishing it.
SPEC_SEAMS = (
    Seam.BEFORE_CLAIM,
    Seam.AFTER_CLAIM,
    Seam.AFTER_TOOL_INTENT,
    Seam.INSIDE_TOOL,
    Seam.AFTER_TOOL_RESULT,
    Seam.AFTER_COMMIT,
    Seam.AFTER_LIFECYCLE_EVENT,
    Seam.ENGINE_AFTER_DISPATCH_SAVED,
)


def test_the_rows_cover_the_specs_48_cases_and_a_crash_inside_a_batch() -> None:
    spec = {Case(s, m, i) for s, m, i in itertools.product(SPEC_SEAMS, Mode, (0, 1, 2))}
    batch = {Case(Seam.INSIDE_BATCH, m, i) for m, i in itertools.product(Mode, (0, 1, 2))}
    rows = [c for seam, mode in ROWS for c in cases_for(seam, mode)]
    assert ITERATIONS == (0, 1, 2)
    assert len(spec) == 48
    assert len(rows) == len(set(rows)) == 54
    assert set(rows) == set(ALL_CASES) == spec | batch
    assert set(SEAMS) == set(Seam)


async def _matrix_row(connect: Connect, seam: Seam, mode: Mode) -> None:
    counters = AgentCounters()
    cases = cases_for(seam, mode)
    outcomes = await run_cases(connect, cases, ScriptedAgent(counters=counters))
    assert [o.run.case for o in outcomes] == cases
    failing = render(outcomes, counters)
    assert not failing, f"failing cases:\n{failing}"


#: The answer iteration (3): its model response and complete commit are one message
#: (``then_complete``), so a crash inside it loses the response (asked again) and one after it
#: finds the step committed (not asked again).
ANSWER_CASES = [
    Case(seam, mode, 3) for seam in (Seam.INSIDE_BATCH, Seam.AFTER_COMMIT) for mode in Mode
]


async def _answer_cases(connect: Connect) -> None:
    counters = AgentCounters()
    outcomes = await run_cases(connect, ANSWER_CASES, ScriptedAgent(counters=counters))
    assert [o.run.case for o in outcomes] == ANSWER_CASES
    failing = render(outcomes, counters)
    assert not failing, f"failing cases:\n{failing}"
    assert all(o.run.fired == 1 for o in outcomes)


async def test_the_answer_iteration_crashed_inside_and_after_its_message_trio(
    trio_connect: Connect,
) -> None:
    await _answer_cases(trio_connect)


async def test_the_answer_iteration_crashed_inside_and_after_its_message_sim(
    sim_connect: Connect, autojump_clock: trio.testing.MockClock
) -> None:
    await _answer_cases(sim_connect)


@pytest.mark.parametrize(("seam", "mode"), ROWS, ids=ROW_IDS)
async def test_matrix_nats(nats_connect: Connect, seam: Seam, mode: Mode) -> None:
    await _matrix_row(nats_connect, seam, mode)


@pytest.mark.parametrize(("seam", "mode"), ROWS, ids=ROW_IDS)
async def test_matrix_trio(trio_connect: Connect, seam: Seam, mode: Mode) -> None:
    await _matrix_row(trio_connect, seam, mode)


@pytest.mark.parametrize(("seam", "mode"), ROWS, ids=ROW_IDS)
async def test_matrix_sim(
    sim_connect: Connect, seam: Seam, mode: Mode, autojump_clock: trio.testing.MockClock
) -> None:
    await _matrix_row(sim_connect, seam, mode)
