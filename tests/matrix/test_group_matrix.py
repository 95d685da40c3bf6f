"""The crash-point matrix's group seams (issue 15 part 1): a parallel group of three tool calls
(safe, unsafe, unsafe) killed or stalled at each group seam: inside the atomic batch of its
intents (before it goes out: no intent stored), after that batch (every intent, no start),
inside the k-th member after its effect, after the k-th result; a redelivery then runs the same
group. (2 group seams + 2 seams x 3 members) x (kill, stall) = 16 cases per transport, on
nats-py, the native Trio client and SimTransport; a batch cut short on the wire (some intents
sent, no commit) is in tests/journal/test_tool_group.py on both real clients. Every case: no
unsafe member started twice, three results, safe members never left interrupted, the first
holder's intents stored whole or not at all, ``journal check`` (with batch marks) clean."""

from __future__ import annotations

import pytest

from dagnats_trio._seams import Seam
from dagnats_trio.journal import Replay
from dagnats_trio.transport import Transport
from tests.journal.test_tool_group import (
    GROUP_ONCE_SEAMS,
    GROUP_SEAMS,
    audit,
    intents_whole_or_none,
    run_group_case,
    verdict,
)

MIX = [Replay.SAFE, Replay.UNSAFE, Replay.UNSAFE]
CASES = [
    (seam, nth, stall)
    for seam in GROUP_SEAMS
    for nth in (range(1) if seam in GROUP_ONCE_SEAMS else range(3))
    for stall in (False, True)
]
CASE_IDS = [f"{seam.value}#{nth}-{'stall' if stall else 'kill'}" for seam, nth, stall in CASES]


def test_the_group_rows_are_16_cases() -> None:
    assert len(CASES) == len(set(CASES)) == 16
    assert set(GROUP_SEAMS) == {
        Seam.INSIDE_BATCH,
        Seam.AFTER_TOOL_INTENT,
        Seam.INSIDE_TOOL,
        Seam.AFTER_TOOL_RESULT,
    }


async def _case(transport: Transport, seam: Seam, nth: int, stall: bool) -> None:
    tools, results, task = await run_group_case(transport, MIX, seam, nth, stall)
    problems = verdict(tools, results, MIX)
    problems += await intents_whole_or_none(transport, task, MIX, seam, tools.crashed)
    assert not problems, problems
    assert len(results) == 3
    assert tools.crashed, "the crash point was not reached"
    report = await audit(transport, task)
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
