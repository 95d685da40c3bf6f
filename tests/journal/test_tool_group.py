"""Parallel tool calls (``Journal.tools``, issue 15 part 1) on a real nats-server and on
SimTransport: every intent before any start (one atomic batch), members at once, results in
completion order, replay by position + name + input (+ call id), cancel-on-error recorded, and
the group crash points: killed or stalled inside the intents' batch (before it goes out, or cut
short on the wire with some intents sent), after it, inside a member after its effect, after
some results. The 16 group crash cases per transport are in tests/matrix/test_group_matrix.py;
the property here draws group sizes, safe/unsafe mixes and crash points at random.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
import trio
from hypothesis import event, given, settings
from hypothesis import strategies as st

from dagnats_trio._seams import Seam, SeamContext, install_hook
from dagnats_trio.journal import (
    MAX_CALLS_PER_ITERATION,
    MAX_GROUP_CALLS,
    MAX_GROUP_MESSAGE_BYTES,
    CheckReport,
    DeliveryState,
    Fenced,
    HolderKilled,
    Replay,
    ReplayMismatch,
    TaskIdentity,
    ToolCall,
    ToolResult,
    check,
    open_journal,
    read_journal,
    read_journal_for_audit,
)
from dagnats_trio.journal._fencing import FencedWriter
from dagnats_trio.protocol import (
    BATCH_HEADER,
    RECORD_TYPE_HEADER,
    ClaimRecord,
    CommitAction,
    ModelRecord,
    TaskMessage,
    ToolIntentRecord,
    ToolResultRecord,
)
from dagnats_trio.protocol.layout import JOURNAL_STREAM, journal_subject
from dagnats_trio.transport import (
    MAX_BATCH_PUBLISH_MSGS,
    BatchAck,
    BatchMsg,
    Headers,
    SimServer,
    Transport,
    provision,
)

from ._helpers import WAIT_S, make_task, uid

#: The seams a group reaches once: before its intents' message (or atomic batch) goes out (a
#: crash there stores no intent of the group), after it is stored (every intent, no start).
GROUP_ONCE_SEAMS = (Seam.INSIDE_BATCH, Seam.AFTER_TOOL_INTENT)
#: The seams a group reaches once per member: inside each member after its function ran, after
#: each result.
MEMBER_SEAMS = (Seam.INSIDE_TOOL, Seam.AFTER_TOOL_RESULT)
GROUP_SEAMS = GROUP_ONCE_SEAMS + MEMBER_SEAMS
#: Claims a redelivery tries while a stalled holder's other members still write.
CLAIM_TRIES = 50


async def journal_records(t: Transport, task: TaskMessage) -> list[tuple[int, Any]]:
    return await read_journal(t, task.run_id, task.step_id)


async def batch_marks(t: Transport, task: TaskMessage) -> list[tuple[str, str | None]]:
    """(``Dagnats-Record``, batch mark) of every stored message of the task's journal, in order
    (a record group's header joins its records' types with ``+``)."""
    subject = journal_subject(task.run_id, task.step_id)
    msgs = await t.read_subject(JOURNAL_STREAM, subject, 1, MAX_CALLS_PER_ITERATION * 3)
    return [(m.headers[RECORD_TYPE_HEADER], m.headers.get(BATCH_HEADER)) for m in msgs]


async def audit(t: Transport, task: TaskMessage) -> CheckReport:
    """``journal check`` of the task's journal, with its batch marks (rule 7)."""
    records, unreadable, batches = await read_journal_for_audit(t, task.run_id, task.step_id)
    return check(records, unreadable=unreadable, batches=batches)


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


def group_of(
    tools: Tools, replays: list[Replay], pad: str = ""
) -> list[tuple[ToolCall, Replay, Any]]:
    """The group's calls; ``pad`` goes into each input (a big one makes the intents too big for
    one message: an atomic batch)."""
    inputs = [{"k": k, "pad": pad} if pad else {"k": k} for k in range(len(replays))]
    return [
        (ToolCall(f"t{k}", inputs[k], call_id=f"call_{k}"), r, tools.fn(f"t{k}"))
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
    # the three intents are one message; each result is stored alone
    assert await batch_marks(transport, task) == [
        ("claim", None),
        ("tool.intent+tool.intent+tool.intent", None),
        ("tool.result", None),
        ("tool.result", None),
        ("tool.result", None),
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


async def intents_whole_or_none(
    t: Transport, task: TaskMessage, replays: list[Replay], seam: Seam, crashed: bool
) -> list[str]:
    """The first holder's intents are one atomic batch: all of them are stored, or (crashed
    before the batch went out) none."""
    records = await journal_records(t, task)
    first = next(r for _, r in records if isinstance(r, ClaimRecord))
    mine = [r for _, r in records if isinstance(r, ToolIntentRecord)
            and r.claim_id == first.claim_id]  # fmt: skip
    want = 0 if crashed and seam is Seam.INSIDE_BATCH else len(replays)
    if len(mine) != want:
        return [f"{len(mine)} intents of the first holder stored, want {want}"]
    return []


#: Examples the property draws (each a full crash case on SimTransport, virtual time).
PROPERTY_EXAMPLES = 200


def test_property_an_unsafe_member_starts_at_most_once() -> None:
    """Random group sizes (1-5), safe/unsafe mixes, seams, members and kill/stall: no unsafe
    member starts twice, the first holder's intents are stored whole or not at all, results are
    complete. Prints how many examples ran and how many reached their crash point (a group of
    one has no batch, so ``inside_batch`` is never reached there)."""
    counts: Counter[str] = Counter()

    @settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
    @given(
        replays=st.lists(st.sampled_from([Replay.SAFE, Replay.UNSAFE]), min_size=1, max_size=5),
        seam=st.sampled_from(GROUP_SEAMS),
        nth=st.integers(min_value=0, max_value=4),
        stall=st.booleans(),
    )
    def prop(replays: list[Replay], seam: Seam, nth: int, stall: bool) -> None:
        at = 0 if seam in GROUP_ONCE_SEAMS else nth % len(replays)

        async def main() -> list[str]:
            async with SimServer().connect() as t:
                await provision(t)
                tools, results, task = await run_group_case(t, replays, seam, at, stall)
                counts["examples"] += 1
                counts["crashed" if tools.crashed else "not reached"] += 1
                unsafe = [tools.starts.get(f"t{k}", 0) for k, r in enumerate(replays)
                          if r is Replay.UNSAFE]  # fmt: skip
                counts["unsafe calls"] += len(unsafe)
                counts["most starts"] = max(counts["most starts"], *unsafe, 0)
                event("crashed" if tools.crashed else "crash point not reached")
                whole = await intents_whole_or_none(t, task, replays, seam, tools.crashed)
                return verdict(tools, results, replays) + whole

        problems = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        assert not problems, (replays, seam, at, stall, problems)

    prop()
    print(
        f"\ngroup property: {counts['examples']} examples, {counts['crashed']} reached their "
        f"crash point, {counts['not reached']} did not; {counts['unsafe calls']} unsafe calls, "
        f"the most starts of one: {counts['most starts']}"
    )
    assert counts["crashed"] > counts["examples"] // 2


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


# --- the intents' atomic batch ----------------------------------------------------------------


class CutShort:
    """A transport whose next atomic batch is cut short on the wire: its first ``sent``
    messages reach the server with their ADR-50 headers (``Nats-Batch-Id``,
    ``Nats-Batch-Sequence``, the expectation on the first), the commit never does, and the
    writer dies (:class:`Kill`). Every other call goes to the real transport."""

    def __init__(self, inner: Transport, sent: int) -> None:
        self._inner = inner
        self._sent = sent
        self.cut = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def publish_batch(
        self, msgs: list[BatchMsg], expected_last_subject_seq: int | None = None
    ) -> BatchAck:
        if self.cut:
            ack: BatchAck = await self._inner.publish_batch(
                msgs, expected_last_subject_seq=expected_last_subject_seq
            )
            return ack
        assert 0 < self._sent < len(msgs)
        batch_id = uid("b")
        for k, msg in enumerate(msgs[: self._sent], 1):
            headers: Headers = {
                **msg.headers,
                "Nats-Batch-Id": batch_id,
                "Nats-Batch-Sequence": str(k),
            }
            if k == 1 and expected_last_subject_seq is not None:
                headers["Nats-Expected-Last-Subject-Sequence"] = str(expected_last_subject_seq)
            await self._inner.core_publish(msg.subject, msg.data, headers)
        # A stored publish to the same stream after them, on the same connection: once it is
        # acknowledged, the stream has handled the batch's first messages.
        await self._inner.publish(msgs[0].subject + "-probe", b"{}")
        self.cut = True
        raise Kill(f"killed with {self._sent} of the {len(msgs)} messages of a batch sent")


@pytest.fixture(params=["nats", "trio"])
def real_transport(request: pytest.FixtureRequest) -> Transport:
    """The test on nats-server through nats-py and through the native Trio client."""
    value: Transport = request.getfixturevalue(f"{request.param}_transport")
    return value


MIX = [Replay.SAFE, Replay.UNSAFE, Replay.UNSAFE]


@pytest.mark.parametrize("sent", [1, 2])
async def test_a_group_batch_cut_short_on_the_wire_stores_no_intent(
    real_transport: Transport, sent: int
) -> None:
    """The crash between a group's intents, on a real server: the holder dies with ``sent`` of
    its three intents on the wire and no commit (intents too big for one message go as an
    atomic batch). The server stores none of them and no member started; the redelivery records
    all three intents as one batch and runs each member once."""
    t = real_transport
    task = make_task(uid())
    tools = Tools()
    cut = CutShort(t, sent)
    j = await open_journal(cut, task)  # type: ignore[arg-type]
    pad = "x" * (MAX_GROUP_MESSAGE_BYTES // 2)
    with trio.fail_after(WAIT_S), pytest.raises(Kill):
        await j.tools(group_of(tools, MIX, pad))
    assert cut.cut and tools.starts == {}
    assert await batch_marks(t, task) == [("claim", None)]
    j2 = await claim(t, task)
    with trio.fail_after(WAIT_S):
        results = await j2.tools(group_of(tools, MIX, pad))
        await j2.settle(CommitAction.COMPLETE)
    assert verdict(tools, results, MIX) == []
    assert tools.starts == {"t0": 1, "t1": 1, "t2": 1}
    assert [r.interrupted for r in results] == [False, False, False]
    marks = await batch_marks(t, task)
    assert marks[:5] == [("claim", None), ("claim", None), ("tool.intent", "1/3"),
                         ("tool.intent", "2/3"), ("tool.intent", "3/3")]  # fmt: skip
    report = await audit(t, task)
    assert report.ok, report.render()


async def test_a_killed_group_batch_stores_nothing_and_a_stored_one_everything(
    transport: Transport,
) -> None:
    """Killed before the intents' batch goes out: no intent, no start; the successor runs all.
    Killed right after it is stored: every intent is there, no member started, and the unsafe
    ones come back interrupted (never started twice), the safe one runs."""
    for seam, starts, interrupted in (
        (Seam.INSIDE_BATCH, {"t0": 1, "t1": 1, "t2": 1}, [False, False, False]),
        (Seam.AFTER_TOOL_INTENT, {"t0": 1}, [False, True, True]),
    ):
        tools, results, task = await run_group_case(transport, MIX, seam, 0, stall=False)
        assert tools.crashed and tools.starts == starts, seam
        assert [r.interrupted for r in results] == interrupted, seam
        assert await intents_whole_or_none(transport, task, MIX, seam, True) == []
        report = await audit(transport, task)
        assert report.ok, report.render()


async def test_a_zombies_group_batch_is_fenced_whole(transport: Transport) -> None:
    """Stalled before its intents' batch, then overtaken: the zombie's batch stores nothing."""
    tools, _, task = await run_group_case(transport, MIX, Seam.INSIDE_BATCH, 0, stall=True)
    assert tools.crashed and tools.starts == {"t0": 1, "t1": 1, "t2": 1}
    assert await intents_whole_or_none(transport, task, MIX, Seam.INSIDE_BATCH, True) == []
    records = await journal_records(transport, task)
    zombie = next(r for _, r in records if isinstance(r, ClaimRecord)).claim_id
    assert [r for _, r in records if r.claim_id == zombie and not isinstance(r, ClaimRecord)] == []
    report = await audit(transport, task)
    assert report.ok, report.render()


async def test_a_group_over_the_batch_limit_is_refused_whole(transport: Transport) -> None:
    """A group of the server's atomic batch limit is one message of intents; one call more is
    a ValueError naming the limit, and nothing is written."""
    task = make_task(uid())
    tools = Tools()
    j = await open_journal(transport, task)
    too_many = [(ToolCall("t", k), Replay.SAFE, tools.fn("t")) for k in range(MAX_GROUP_CALLS + 1)]
    with pytest.raises(ValueError, match=f"at most {MAX_GROUP_CALLS} calls"):
        await j.tools(too_many)
    assert tools.starts == {} and await batch_marks(transport, task) == [("claim", None)]
    with trio.fail_after(WAIT_S * 3):
        results = await j.tools(too_many[:MAX_GROUP_CALLS])
    assert len(results) == MAX_GROUP_CALLS and tools.starts == {"t": MAX_GROUP_CALLS}
    marks = await batch_marks(transport, task)
    assert marks[1] == ("+".join(["tool.intent"] * MAX_GROUP_CALLS), None)
    records = await journal_records(transport, task)
    intents = [seq for seq, r in records if isinstance(r, ToolIntentRecord)]
    assert len(intents) == MAX_GROUP_CALLS and set(intents) == {intents[0]}


async def test_held_records_past_the_limit_go_first_in_a_batch_of_their_own(
    transport: Transport,
) -> None:
    """FencedWriter.append_batch: held records that would take a group past the server's batch
    limit are stored first; a group over the limit alone, or an empty one, is refused
    unwritten. Groups this small are one message each."""
    task = make_task(uid())
    holder = DeliveryState(TaskIdentity.of(task))
    j = await open_journal(transport, task, holder=holder)
    writer = FencedWriter(transport=transport, subject=journal_subject(task.run_id,
                          task.step_id), holder=holder, claim_id=j.claim_id,
                          last_seq=j.last_seq)  # fmt: skip
    ident = TaskIdentity.of(task)

    def model(call: int) -> ModelRecord:
        return ModelRecord(ident.iteration, ident.attempt, j.claim_id, call, {"n": call})

    n = MAX_BATCH_PUBLISH_MSGS
    for bad in ([], [model(k) for k in range(n + 1)]):
        with pytest.raises(ValueError, match=f"1 to {n} records"):
            await writer.append_batch(bad)
    writer.hold(model(0))
    await writer.append_batch([model(k) for k in range(1, n + 1)])
    marks = await batch_marks(transport, task)
    assert marks == [("claim", None), ("model", None), ("+".join(["model"] * n), None)]
    writer.hold(model(n + 1))
    await writer.append_batch([model(n + 2)])  # within the limit: one group, as before
    assert (await batch_marks(transport, task))[-1] == ("model+model", None)
    records = await journal_records(transport, task)
    assert [r.call for _, r in records[1:]] == list(range(n + 3))  # type: ignore[union-attr]


def test_check_sees_a_groups_intents_split_across_writes() -> None:
    """``group-intents-split``: one claim's intents of a group, when marked, are one batch."""
    claim = ClaimRecord(0, 1, "c1", "n1")

    def intent(call: int) -> ToolIntentRecord:
        return ToolIntentRecord(0, 1, "c1", call, f"t{call}", None, Replay.SAFE, "k", 0, 3)

    recs = list(enumerate([claim, intent(0), intent(1), intent(2)], 1))
    one = {2: "1/3", 3: "2/3", 4: "3/3"}
    assert check(recs, batches=one).ok
    assert check(recs, batches={}).ok  # stored one by one, before groups were batched
    for split in ({2: "1/2", 3: "2/2"}, {2: "1/1", 3: "1/2", 4: "2/2"}):
        report = check(recs, batches=split)
        assert [v.rule for v in report.violations] == ["group-intents-split"], split
        assert report.violations[0].seq == 2


async def test_an_unfinished_member_comes_back_by_its_declaration(transport: Transport) -> None:
    """Both members wrote partial output and ran; the holder dies before either result. The
    successor reruns the safe member and answers the unsafe one interrupted, with its partial
    output; the unsafe function started once."""
    task = make_task(uid())
    starts = {"s": 0, "u": 0}
    holder_dies = True

    def member(name: str, j: Any, both: list[trio.Event]) -> Any:
        async def run(call: ToolCall) -> Any:
            starts[name] += 1
            await j.tool_output(f"{name} half")
            both[0 if name == "s" else 1].set()
            if holder_dies:  # the first holder: both effects happen before either returns
                for e in both:
                    await e.wait()
            return {"done": name}

        return run

    async def hook(ctx: SeamContext) -> None:
        if ctx.seam is Seam.INSIDE_TOOL and holder_dies:
            raise Kill("kill inside a member, after its effect")

    def group(j: Any) -> list[tuple[ToolCall, Replay, Any]]:
        both = [trio.Event(), trio.Event()]
        return [
            (ToolCall("s", 1, call_id="c_s"), Replay.SAFE, member("s", j, both)),
            (ToolCall("u", 2, call_id="c_u"), Replay.UNSAFE, member("u", j, both)),
        ]

    with trio.fail_after(WAIT_S), install_hook(hook):
        j = await open_journal(transport, task)
        with pytest.raises(HolderKilled):
            await j.tools(group(j))
        holder_dies = False
        j2 = await open_journal(transport, task)
        safe, unsafe = await j2.tools(group(j2))
        await j2.settle(CommitAction.COMPLETE)
    assert starts == {"s": 2, "u": 1}
    assert safe == ToolResult(output={"done": "s"})
    assert unsafe.interrupted and unsafe.partial == ("u half",) and unsafe.output is None
    report = await audit(transport, task)
    assert report.ok, report.render()
