"""The crash-point matrix's group seams (issue 15 part 1): a parallel group of three tool calls
(safe, unsafe, unsafe) killed or stalled at each group seam, at each member: after the k-th
intent (between intents), inside the k-th member after its effect, after the k-th result; a
redelivery then runs the same group. 3 seams x 3 members x (kill, stall) = 18 cases per
transport, on nats-py, the native Trio client and SimTransport. Every case: no unsafe member
started twice, three results, safe members never left interrupted, ``journal check`` clean."""

from __future__ import annotations

import pytest

from dagnats_trio._seams import Seam
from dagnats_trio.journal import Replay, check, read_journal
from dagnats_trio.transport import Transport
from tests.journal.test_tool_group import GROUP_SEAMS, run_group_case, verdict

MIX = [Replay.SAFE, Replay.UNSAFE, Replay.UNSAFE]
CASES = [(seam, nth, stall) for seam in GROUP_SEAMS for nth in range(3) for stall in (False, True)]
CASE_IDS = [f"{seam.value}#{nth}-{'stall' if stall else 'kill'}" for seam, nth, stall in CASES]


def test_the_group_rows_are_18_cases() -> None:
    assert len(CASES) == len(set(CASES)) == 18
    assert set(GROUP_SEAMS) == {Seam.AFTER_TOOL_INTENT, Seam.INSIDE_TOOL, Seam.AFTER_TOOL_RESULT}


async def _case(transport: Transport, seam: Seam, nth: int, stall: bool) -> None:
    tools, results, task = await run_group_case(transport, MIX, seam, nth, stall)
    problems = verdict(tools, results, MIX)
    assert not problems, problems
    assert len(results) == 3
    assert tools.crashed, "the crash point was not reached"
    report = check(await read_journal(transport, task.run_id, task.step_id))
    assert report.ok, report.render()


@pytest.mark.parametrize(("seam", "nth", "stall"), CASES, ids=CASE_IDS)
async def test_group_matrix_nats(
    nats_transport: Transport, seam: Seam, nth: int, stall: bool
) -> None:
    await _case(nats_transport, seam, nth, stall)


@pytest.mark.parametrize(("seam", "nth", "stall"), CASES, ids=CASE_IDS)
async def test_group_matrix_trio(
    trio_transport: Transport, seam: Seam, nth: int, stall: bool
) -> None:
    await _case(trio_transport, seam, nth, stall)


@pytest.mark.parametrize(("seam", "nth", "stall"), CASES, ids=CASE_IDS)
async def test_group_matrix_sim(
    sim_transport: Transport, seam: Seam, nth: int, stall: bool
) -> None:
    await _case(sim_transport, seam, nth, stall)
