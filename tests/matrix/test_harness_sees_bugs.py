"""The matrix's checks can fail: an agent that declares its unsafe tool safe (a broken replay rule,
as far as that tool is concerned) is caught by the same verdict the matrix applies, while the run
itself completes and its journal passes the audit. So a green matrix is evidence, not a harness
that never looks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import pytest
import trio.testing

from dagnats_trio._seams import Seam
from dagnats_trio.journal import Replay, check
from dagnats_trio.protocol import RunStatus
from dagnats_trio.testing import AgentCounters, ScriptedAgent
from dagnats_trio.testing._agent import DEFAULT_SCRIPT

from ._harness import Case, Connect, Mode, problems, run_cases

UNSAFE_ITERATION = 1
BROKEN_SCRIPT = tuple(
    attrs.evolve(t, replay=Replay.SAFE) if t.tool == "send_message" else t for t in DEFAULT_SCRIPT
)


async def _broken_run(connect: Connect, case: Case) -> tuple[list[str], AgentCounters]:
    counters = AgentCounters()
    [outcome] = await run_cases(connect, [case], ScriptedAgent(BROKEN_SCRIPT, counters=counters))
    # The run itself looks fine: completed, and the journal audit passes.
    assert outcome.snapshot is not None
    assert outcome.snapshot.status is RunStatus.COMPLETED
    assert check(outcome.records, outcome.snapshot.step("agent").iterations).ok
    assert outcome.run.fired == 1
    return problems(outcome, counters), counters


async def _stalled_inside_tool(connect: Connect) -> None:
    """Zombie and successor both start the "safe" send_message: two starts, two effects."""
    case = Case(Seam.INSIDE_TOOL, Mode.STALL, UNSAFE_ITERATION)
    found, counters = await _broken_run(connect, case)
    run = next(iter(counters.model_requests))
    assert counters.starts(run, "send_message") == 2
    assert counters.effects(run, "send_message") == 2
    assert "unsafe send_message started 2 times, took effect 2 times" in found


async def _killed_after_intent(connect: Connect) -> None:
    """Only one start (so "at most once" alone passes), but the successor ran a recorded unsafe
    intent instead of recording it interrupted: the per-seam rule catches it."""
    case = Case(Seam.AFTER_TOOL_INTENT, Mode.KILL, UNSAFE_ITERATION)
    found, counters = await _broken_run(connect, case)
    run = next(iter(counters.model_requests))
    assert counters.starts(run, "send_message") == 1
    assert "send_message (iteration 1) started 1 times, expected (0,)" in found
    assert "send_message result of iteration 1 interrupted=False, expected True" in found
    assert not any(p.startswith("unsafe send_message") for p in found)


async def _killed_inside_tool(connect: Connect) -> None:
    """The holder dies after send_message took effect and before its result is recorded: the
    successor, believing it safe, sends it again. Only a seam after the effect shows this."""
    case = Case(Seam.INSIDE_TOOL, Mode.KILL, UNSAFE_ITERATION)
    found, counters = await _broken_run(connect, case)
    run = next(iter(counters.model_requests))
    assert counters.starts(run, "send_message") == 2
    assert counters.effects(run, "send_message") == 2
    assert "unsafe send_message started 2 times, took effect 2 times" in found
    assert "send_message (iteration 1) started 2 times, expected (1,)" in found


BUGS: list[Callable[[Connect], Awaitable[None]]] = [
    _stalled_inside_tool,
    _killed_after_intent,
    _killed_inside_tool,
]
IDS = ["stall-inside-tool", "kill-after-intent", "kill-inside-tool"]


@pytest.mark.parametrize("bug", BUGS, ids=IDS)
async def test_harness_sees_unsafe_declared_safe_nats(
    nats_connect: Connect, bug: Callable[[Connect], Awaitable[None]]
) -> None:
    await bug(nats_connect)


@pytest.mark.parametrize("bug", BUGS, ids=IDS)
async def test_harness_sees_unsafe_declared_safe_sim(
    sim_connect: Connect,
    bug: Callable[[Connect], Awaitable[None]],
    autojump_clock: trio.testing.MockClock,
) -> None:
    await bug(sim_connect)
