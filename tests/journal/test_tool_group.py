"""Parallel tool calls (``Journal.tools``, issue 15 part 1) on a real nats-server and on
SimTransport: every intent before any start, members at once, results in completion order,
replay by position + name + input (+ call id), cancel-on-error recorded, and the group crash
points: killed or stalled between intents, inside a member after its effect, after some results.
The 18 group crash cases per transport are in tests/matrix/test_group_matrix.py; the property
here draws group sizes, safe/unsafe mixes and crash points at random.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import trio
from hypothesis import event, given, settings
from hypothesis import strategies as st

from dagnats_trio._seams import Seam, SeamContext, install_hook
from dagnats_trio.journal import (
    Fenced,
    HolderKilled,
    Replay,
    ReplayMismatch,
    ToolCall,
    ToolResult,
    check,
    open_journal,
    read_journal,
)
from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    TaskMessage,
    ToolIntentRecord,
    ToolResultRecord,
)
from dagnats_trio.transport import SimServer, Transport

from ._helpers import WAIT_S, make_task, uid

#: The seams a group reaches, each once per member: after each intent, inside each member
#: after its function ran, after each result.
GROUP_SEAMS = (Seam.AFTER_TOOL_INTENT, Seam.INSIDE_TOOL, Seam.AFTER_TOOL_RESULT)
#: Claims a redelivery tries while a stalled holder's other members still write.
CLAIM_TRIES = 50


async def journal_records(t: Transport, task: TaskMessage) -> list[tuple[int, Any]]:
    return await read_journal(t, task.run_id, task.step_id)


class Tools:
    """Member functions that count their starts (outside the journal, as a real effect is)."""

    def __init__(self) -> None:
        self.starts: dict[str, int] = {}
        #: Set by the crash cases: the crash point was reached (a kill or stall happened).
        self.crashed = False

    def fn(self, name: str) -> Any:
        async def run(call: ToolCall) -> Any:
            self.starts[name] = self.starts.get(name, 0) + 1
            await trio.lowlevel.checkpoint()
            return {"tool": name, "key": call.key}

        return run


def group_of(tools: Tools, replays: list[Replay]) -> list[tuple[ToolCall, Replay, Any]]:
    return [
        (ToolCall(f"t{k}", {"k": k}, call_id=f"call_{k}"), r, tools.fn(f"t{k}"))
        for k, r in enumerate(replays)
    ]


async def test_members_run_at_once_and_record_in_completion_order(transport: Transport) -> None:
    task = make_task(uid())
    j = await open_journal(transport, task)
    started = 0
    all_started = trio.Event()
    finish_order = [trio.Event() for _ in range(3)]

    def member(k: int) -> Any:
        async def run(call: ToolCall) -> Any:
            nonlocal started
            started += 1
            if started == 3:
                all_started.set()
            await all_started.wait()  # only reached by all three if they run at once
            if k < 2:
                await finish_order[k + 1].wait()  # member 2 finishes first, then 1, then 0
            finish_order[k].set()
            return k

        return run

    calls = [(ToolCall(f"m{k}", k), Replay.SAFE, member(k)) for k in range(3)]
    with trio.fail_after(WAIT_S):
        results = await j.tools(calls)
    assert [r.output for r in results] == [0, 1, 2]
    recs = [r for _, r in await journal_records(transport, task)]
    kinds = [(type(r).__name__, getattr(r, "call", None)) for r in recs[1:]]
    assert kinds == [
        ("ToolIntentRecord", 0),
        ("ToolIntentRecord", 1),
        ("ToolIntentRecord", 2),
        ("ToolResultRecord", 2),
        ("ToolResultRecord", 1),
        ("ToolResultRecord", 0),
    ]
    intents = [r for r in recs if isinstance(r, ToolIntentRecord)]
    assert all(i.group == 0 and i.group_size == 3 for i in intents)
    assert j.next_call == 3
    await j.settle(CommitAction.COMPLETE)
    assert check(await journal_records(transport, task)).ok
    # the redelivery of the committed dispatch runs nothing; a replay of the same calls on a
    # new holder of the same attempt (before the commit) is covered by the crash cases below


async def test_replay_matches_by_position_name_input_and_call_id(transport: Transport) -> None:
    task = make_task(uid())
    tools = Tools()
    j = await open_journal(transport, task)
    first = await j.tools(group_of(tools, [Replay.SAFE, Replay.UNSAFE]))
    j2 = await open_journal(transport, task)
    again = await j2.tools(group_of(tools, [Replay.SAFE, Replay.UNSAFE]))
    assert again == first and tools.starts == {"t0": 1, "t1": 1}
    before = await journal_records(transport, task)
    # a changed input, a changed call id: a mismatch that writes nothing
    for changed in (
        [
            (ToolCall("t0", {"k": 0}, call_id="call_0"), Replay.SAFE, tools.fn("t0")),
            (ToolCall("t1", {"k": 99}, call_id="call_1"), Replay.UNSAFE, tools.fn("t1")),
        ],
        [
            (ToolCall("t0", {"k": 0}, call_id="other"), Replay.SAFE, tools.fn("t0")),
            (ToolCall("t1", {"k": 1}, call_id="call_1"), Replay.UNSAFE, tools.fn("t1")),
        ],
    ):
        j3 = await open_journal(transport, task)
        with pytest.raises(ReplayMismatch, match="member"):
            await j3.tools(changed)
    after = await journal_records(transport, task)
    assert len(after) == len(before) + 2  # the two claims, nothing else
    assert tools.starts == {"t0": 1, "t1": 1}


async def test_cancel_on_error_cancels_the_rest_and_records_it(transport: Transport) -> None:
    task = make_task(uid())
    j = await open_journal(transport, task)
    blocked = trio.Event()

    async def fails(call: ToolCall) -> Any:
        await blocked.wait()
        raise ValueError("no such user")

    async def hangs(call: ToolCall) -> Any:
        await j.tool_output("half")
        blocked.set()
        await trio.sleep_forever()

    calls = [
        (ToolCall("lookup"), Replay.SAFE, fails),
        (ToolCall("upload"), Replay.UNSAFE, hangs),
    ]
    with trio.fail_after(WAIT_S):
        results = await j.tools(calls, cancel_on_error=True)
    assert results[0].error == "ValueError: no such user" and results[0].cancelled_by is None
    assert results[1] == ToolResult(
        error="cancelled: call 0 of the group failed",
        interrupted=True,
        partial=("half",),
        cancelled_by=0,
    )
    recs = await journal_records(transport, task)
    cancelled = [r for _, r in recs if isinstance(r, ToolResultRecord) and r.cancelled_by == 0]
    assert [r.call for r in cancelled] == [1]
    # a redelivery reuses both results, the cancellation included, and starts nothing
    j2 = await open_journal(transport, task)
    with trio.fail_after(WAIT_S):
        assert await j2.tools(calls, cancel_on_error=True) == results
    await j2.settle(CommitAction.COMPLETE)
    assert check(await journal_records(transport, task)).ok


async def test_the_group_holds_the_guard(transport: Transport) -> None:
    task = make_task(uid())
    j = await open_journal(transport, task)
    inside = trio.Event()
    release = trio.Event()

    async def slow(call: ToolCall) -> Any:
        inside.set()
        await release.wait()
        return 1

    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(j.tools, [(ToolCall("a"), Replay.SAFE, slow)])
            await inside.wait()
            with pytest.raises(trio.BusyResourceError):
                await j.tool(ToolCall("b"), Replay.SAFE, slow)
            release.set()


# --- the group crash points -------------------------------------------------------------------


class Kill(Exception):
    pass


async def run_group_case(
    transport: Transport, replays: list[Replay], seam: Seam, nth: int, stall: bool
) -> tuple[Tools, list[ToolResult], TaskMessage]:
    """First holder: the group, crashed at the ``nth`` time it reaches ``seam`` (killed, or
    stalled until a successor finished). Successor: the same delivery, the same group. Returns
    the counters and the successor's results."""
    task = make_task(uid())
    tools = Tools()
    reached = itertools.count()
    successor_done = trio.Event()
    stalled = trio.Event()

    async def hook(ctx: SeamContext) -> None:
        if ctx.run_id != task.run_id or ctx.seam is not seam or stalled.is_set():
            return
        if next(reached) != nth:
            return
        if not stall:
            stalled.set()
            raise Kill(f"kill at {seam.value} #{nth}")
        stalled.set()
        await successor_done.wait()

    async def first_holder() -> None:
        j = await open_journal(transport, task)
        try:
            await j.tools(group_of(tools, replays))
        except (HolderKilled, Fenced):
            return
        if stall and stalled.is_set():
            with pytest.raises(Fenced):
                await j.settle(CommitAction.COMPLETE)

    results: list[ToolResult] = []
    with trio.fail_after(WAIT_S * 3), install_hook(hook):
        async with trio.open_nursery() as nursery:
            if stall:
                nursery.start_soon(first_holder)
                with trio.move_on_after(WAIT_S):
                    await stalled.wait()
            else:
                await first_holder()
            if stalled.is_set() or not stall:
                j2 = await claim(transport, task)
                results = await j2.tools(group_of(tools, replays))
                await j2.settle(CommitAction.COMPLETE)
            successor_done.set()
    tools.crashed = stalled.is_set()
    return tools, results, task


async def claim(transport: Transport, task: TaskMessage) -> Any:
    """A redelivery's claim. The zombie's other members may still write while it claims: a
    claim fenced that way is lost, and the task comes back, as here, for another claim."""
    for _ in range(CLAIM_TRIES):
        try:
            return await open_journal(transport, task)
        except Fenced:
            await trio.sleep(0.01)
    raise AssertionError(f"no claim in {CLAIM_TRIES} tries")


def verdict(tools: Tools, results: list[ToolResult], replays: list[Replay]) -> list[str]:
    problems = []
    for k, r in enumerate(replays):
        n = tools.starts.get(f"t{k}", 0)
        if r is Replay.UNSAFE and n > 1:
            problems.append(f"unsafe t{k} started {n} times")
    if results and len(results) != len(replays):
        problems.append(f"{len(results)} results for {len(replays)} calls")
    for k, res in enumerate(results):
        if not res.interrupted and res.output != {"tool": f"t{k}", "key": res.output["key"]}:
            problems.append(f"t{k}: {res}")
        if replays[k] is Replay.SAFE and res.interrupted:
            problems.append(f"safe t{k} interrupted instead of rerun")
    return problems


@settings(max_examples=200, deadline=None)
@given(
    replays=st.lists(st.sampled_from([Replay.SAFE, Replay.UNSAFE]), min_size=1, max_size=5),
    seam=st.sampled_from(GROUP_SEAMS),
    nth=st.integers(min_value=0, max_value=4),
    stall=st.booleans(),
)
def test_property_an_unsafe_member_starts_at_most_once(
    replays: list[Replay], seam: Seam, nth: int, stall: bool
) -> None:
    async def main() -> list[str]:
        server = SimServer()
        async with server.connect() as t:
            from dagnats_trio.transport import provision

            await provision(t)
            tools, results, _ = await run_group_case(t, replays, seam, nth, stall)
            event("crashed" if tools.crashed else "crash point not reached")
            return verdict(tools, results, replays)

    problems = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert not problems, (replays, seam, nth, stall, problems)


def test_check_sees_a_member_started_before_the_last_intent() -> None:
    claim = ClaimRecord(0, 1, "c1", "n1")

    def intent(call: int) -> ToolIntentRecord:
        return ToolIntentRecord(0, 1, "c1", call, f"t{call}", None, Replay.SAFE, "k", 0, 2)

    result0 = ToolResultRecord(0, 1, "c1", 0, output=1)
    good = [claim, intent(0), intent(1), result0, ToolResultRecord(0, 1, "c1", 1, output=2)]
    assert check(list(enumerate(good, 1))).ok
    early = [claim, intent(0), result0, intent(1), ToolResultRecord(0, 1, "c1", 1, output=2)]
    report = check(list(enumerate(early, 1)))
    assert [v.rule for v in report.violations] == ["group-intent-after-start"]
    outside = [claim, ToolIntentRecord(0, 1, "c1", 5, "t", None, Replay.SAFE, "k", 0, 2)]
    assert [v.rule for v in check(list(enumerate(outside, 1))).violations] == ["group-shape"]


def test_the_cli_timeline_shows_groups_and_cancellations() -> None:
    from dagnats_trio.cli._journal import timeline

    recs = [
        ClaimRecord(0, 1, "c1", "n1"),
        ToolIntentRecord(0, 1, "c1", 0, "a", 1, Replay.SAFE, "k0", 0, 2),
        ToolIntentRecord(0, 1, "c1", 1, "b", 2, Replay.UNSAFE, "k1", 0, 2),
        ToolResultRecord(0, 1, "c1", 0, error="boom"),
        ToolResultRecord(0, 1, "c1", 1, error="cancelled", interrupted=True, cancelled_by=0),
    ]
    rows = timeline(list(enumerate(recs, 1)))
    assert "[parallel 1/2]" in rows[1].detail and "[parallel 2/2]" in rows[2].detail
    assert rows[4].detail.startswith("cancelled: call 0 of its parallel group failed")


async def test_golden_replay_answers_a_group() -> None:
    """A recorded group replays from the records; another input in it is a finding."""
    from dagnats_trio.protocol import CommitRecord
    from dagnats_trio.testing import Golden, GoldenHeader, replay_golden

    recs = [
        ClaimRecord(0, 1, "c1", "n1"),
        ToolIntentRecord(0, 1, "c1", 0, "a", 1, Replay.SAFE, "k0", 0, 2),
        ToolIntentRecord(0, 1, "c1", 1, "b", 2, Replay.UNSAFE, "k1", 0, 2),
        ToolResultRecord(0, 1, "c1", 1, output="B"),
        ToolResultRecord(0, 1, "c1", 0, output="A"),
        CommitRecord(0, 1, "c1", "n1", CommitAction.COMPLETE, output=["A", "B"]),
    ]
    golden = Golden(GoldenHeader(1, "r", "s"), tuple(enumerate(recs, 1)))

    def handler(b_input: int) -> Any:
        async def run(tc: Any) -> None:
            j = await tc.journal()
            never = Tools().fn("never")
            results = await j.tools(
                [
                    (ToolCall("a", 1), Replay.SAFE, never),
                    (ToolCall("b", b_input), Replay.UNSAFE, never),
                ]
            )
            await tc.complete([r.output for r in results])

        return run

    same = await replay_golden(golden, handler(2))
    assert same.ok and same.deliveries == 1
    changed = await replay_golden(golden, handler(3))
    assert [(f.position, f.kind) for f in changed.findings] == [(1, "ReplayMismatch")]
    assert "member 1 of the group" in changed.findings[0].new
