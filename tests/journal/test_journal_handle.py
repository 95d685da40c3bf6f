"""The journal handle (real nats-server and SimTransport): claims, fencing, replay, commits,
restart limit."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

from dagnats_trio._seams import Seam, SeamContext, install_hook
from dagnats_trio.journal import (
    MAX_CALLS_PER_ITERATION,
    RESTART_LIMIT_REASON,
    TAIL_PROOF_FRESH_S,
    CallLimitExceeded,
    Committed,
    DeliveryState,
    Fenced,
    HolderKilled,
    Journal,
    Replay,
    ReplayMismatch,
    RestartLimit,
    ScriptedModel,
    Settlement,
    Stale,
    TaskIdentity,
    ToolCall,
    ToolOutputNotJson,
    check,
    open_journal,
    read_journal,
)
from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    CommitRecord,
    ModelRecord,
    StepContinue,
    StepFailed,
    TaskMessage,
    ToolIntentRecord,
    ToolResultRecord,
)
from dagnats_trio.transport import Transport, WrongLastSequence

from ._helpers import LoseAck, history, make_task, uid


class Crash(BaseException):
    """A process death inside a tool function: nothing after it runs."""


def counting(name: str, counter: dict[str, int], output: Any = "ok") -> Any:
    async def fn(call: ToolCall) -> Any:
        counter[name] = counter.get(name, 0) + 1
        return output

    return fn


async def records(t: Transport, task: TaskMessage) -> list[Any]:
    return [r for _, r in await read_journal(t, task.run_id, task.step_id)]


def holder_of(task: TaskMessage) -> DeliveryState:
    return DeliveryState(TaskIdentity.of(task))


async def test_fast_path_is_one_tail_read_and_one_claim(transport: Transport) -> None:
    task = make_task(uid())
    before = transport.round_trips
    j = await open_journal(transport, task)
    assert transport.round_trips - before == 2
    (rec,) = await records(transport, task)
    assert rec == ClaimRecord(0, 1, j.claim_id, task.dispatch.nonce)

    # next iteration, whose task names the commit: still one read, one claim
    seq = await j.settle(CommitAction.CONTINUE, output="o0")
    nxt = make_task(task.run_id, iteration=1, journal_seq=seq)
    before = transport.round_trips
    j1 = await open_journal(transport, nxt)
    assert transport.round_trips - before == 2
    assert j1.next_call == 0


async def test_redelivery_reuses_models_and_tools(transport: Transport) -> None:
    task = make_task(uid())
    model = ScriptedModel(["plan", "final"])
    starts: dict[str, int] = {}
    j = await open_journal(transport, task)
    assert await j.model(model) == "plan"
    r = await j.tool(ToolCall("search", {"q": 1}), Replay.SAFE, counting("search", starts, [1]))
    assert r.output == [1] and r.error is None
    # crash: the handle is dropped; a redelivery replays by position
    j2 = await open_journal(transport, task)
    assert await j2.model(model) == "plan"
    r2 = await j2.tool(ToolCall("search", {"q": 1}), Replay.SAFE, counting("search", starts))
    assert r2.output == [1]
    assert model.requests == 1 and starts == {"search": 1}
    assert await j2.model(model) == "final"
    assert model.requests == 2
    recs = await records(transport, task)
    assert [type(r).__name__ for r in recs] == [
        "ClaimRecord",
        "ModelRecord",
        "ToolIntentRecord",
        "ToolResultRecord",
        "ClaimRecord",
        "ModelRecord",
    ]
    intent = recs[2]
    assert isinstance(intent, ToolIntentRecord)
    assert intent.key == f"{task.run_id}.agent.0.1"


async def test_call_key_reaches_the_tool(transport: Transport) -> None:
    task = make_task(uid(), iteration=3)
    seen: list[str] = []

    async def fn(call: ToolCall) -> Any:
        seen.append(call.key)
        return None

    j = await open_journal(transport, task)
    await j.tool(ToolCall("a"), Replay.SAFE, fn)
    await j.tool(ToolCall("b"), Replay.SAFE, fn)
    assert seen == [f"{task.run_id}.agent.3.0", f"{task.run_id}.agent.3.1"]


async def test_stale_redelivery_runs_nothing(transport: Transport) -> None:
    run = uid()
    t0 = make_task(run)
    j0 = await open_journal(transport, t0)
    seq = await j0.settle(CommitAction.CONTINUE)
    t1 = make_task(run, iteration=1, journal_seq=seq)
    await open_journal(transport, t1)
    n = len(await records(transport, t0))
    holder = holder_of(t0)
    with pytest.raises(Stale):
        await open_journal(transport, t0, holder=holder)
    assert holder.settlement is Settlement.ACK
    assert len(await records(transport, t0)) == n
    assert len(await history(transport, run)) == 1  # only the continue of iteration 0


async def test_late_redelivery_of_an_earlier_attempt_is_stale(
    transport: Transport,
) -> None:
    run = uid()
    await open_journal(transport, make_task(run, attempt=2))
    with pytest.raises(Stale):
        await open_journal(transport, make_task(run, attempt=1))


async def test_committed_then_crash_republishes(transport: Transport) -> None:
    task = make_task(uid())
    j = await open_journal(transport, task)
    j.set_state({"turns": 1})

    async def kill_after_commit(ctx: SeamContext) -> None:
        if ctx.seam is Seam.AFTER_COMMIT:
            raise RuntimeError("kill")

    with install_hook(kill_after_commit), pytest.raises(HolderKilled):
        await j.settle(CommitAction.CONTINUE, output="out")
    assert await history(transport, task.run_id) == []
    n = len(await records(transport, task))

    holder = holder_of(task)
    with pytest.raises(Committed):
        await open_journal(transport, task, holder=holder)
    assert holder.settlement is Settlement.ACK
    (event,) = await history(transport, task.run_id)
    assert isinstance(event, StepContinue)
    assert event.dispatch == task.dispatch and event.output == "out"
    recs = await read_journal(transport, task.run_id, task.step_id)
    assert len(recs) == n  # no new claim, the turn is not repeated
    commit_seq, commit = recs[-1]
    assert isinstance(commit, CommitRecord) and event.journal_seq == commit_seq
    assert commit.state == {"turns": 1}


async def test_fenced_holder_writes_nothing_and_spends_no_model_call(
    transport: Transport,
) -> None:
    task = make_task(uid())
    zombie_holder = holder_of(task)
    zombie = await open_journal(transport, task, holder=zombie_holder)
    successor = await open_journal(transport, task)  # same task message, redelivered
    # A zombie is a holder that fell silent (its lease ran out): its claim's ack is older than
    # TAIL_PROOF_FRESH_S by the time it calls the model, so the model call reads the tail.
    await trio.sleep(TAIL_PROOF_FRESH_S)
    model = ScriptedModel(["x"])
    before = transport.round_trips
    with pytest.raises(Fenced):
        await zombie.model(model)
    assert model.requests == 0
    assert transport.round_trips - before == 1  # the tail read, nothing written
    assert zombie_holder.settlement is Settlement.NO_ACK
    starts: dict[str, int] = {}
    with pytest.raises(Fenced):
        await zombie.tool(ToolCall("charge"), Replay.UNSAFE, counting("charge", starts))
    with pytest.raises(Fenced):
        await zombie.settle(CommitAction.COMPLETE)
    assert starts == {}
    recs = await records(transport, task)
    assert [type(r).__name__ for r in recs] == ["ClaimRecord", "ClaimRecord"]
    assert await history(transport, task.run_id) == []
    # the successor is unaffected
    assert await successor.model(ScriptedModel(["y"])) == "y"


async def test_a_model_call_right_after_the_claim_reads_no_tail(transport: Transport) -> None:
    """The claim's ack is the model's tail read (the holder held the tail when it was stored);
    so is a model record's ack for the next call. Past TAIL_PROOF_FRESH_S the tail is read."""
    task = make_task(uid())
    j = await open_journal(transport, task)
    model = ScriptedModel(["a", "b", "c"])
    before = transport.round_trips
    assert await j.model(model) == "a"
    assert transport.round_trips - before == 1  # the model record only
    before = transport.round_trips
    assert await j.model(model) == "b"
    assert transport.round_trips - before == 1
    await trio.sleep(TAIL_PROOF_FRESH_S)
    before = transport.round_trips
    assert await j.model(model) == "c"
    assert transport.round_trips - before == 2  # the tail read, then the model record
    assert model.requests == 3
    recs = await records(transport, task)
    assert [type(r).__name__ for r in recs] == ["ClaimRecord", *["ModelRecord"] * 3]


async def test_a_successor_claiming_after_the_bound_fences_the_old_holder_s_model_call(
    transport: Transport,
) -> None:
    task = make_task(uid())
    old_holder = holder_of(task)
    old = await open_journal(transport, task, holder=old_holder)
    await trio.sleep(TAIL_PROOF_FRESH_S)  # the old holder falls silent; its task comes back
    successor = await open_journal(transport, task)
    model = ScriptedModel(["x"])
    before = transport.round_trips
    with pytest.raises(Fenced, match="a successor claimed it"):
        await old.model(model)
    assert model.requests == 0
    assert transport.round_trips - before == 1  # the tail read, nothing written
    assert old_holder.settlement is Settlement.NO_ACK
    assert await successor.model(ScriptedModel(["y"])) == "y"
    recs = await records(transport, task)
    assert [type(r).__name__ for r in recs] == ["ClaimRecord", "ClaimRecord", "ModelRecord"]


@attrs.define(eq=False)
class _StepsOf(trio.abc.Instrument):
    """Counts the scheduler's steps of one task (trio's public instrument hook)."""

    task: trio.lowlevel.Task
    steps: int = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


async def test_a_fresh_tail_proof_costs_the_model_call_no_scheduler_pass(
    transport: Transport,
) -> None:
    """With the claim's ack as the tail proof, nothing stands between the call and the model
    request: no read and no scheduler pass (the model's record is appended next, which waits on
    the server). A cancelled holder still spends no model request."""
    task = make_task(uid())
    j = await open_journal(transport, task)
    steps = _StepsOf(trio.lowlevel.current_task())
    seen_at_request: list[int] = []

    def model() -> str:
        seen_at_request.append(steps.steps)
        return "a"

    trio.lowlevel.add_instrument(steps)
    try:
        assert await j.model(model) == "a"
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert seen_at_request == [0]
    assert steps.steps >= 1  # the append's wait on the server is the call's schedule point

    # A plain function: nothing of the model's own checks for cancellation before it counts.
    with trio.CancelScope() as scope:
        scope.cancel()
        await j.model(model)
    assert scope.cancelled_caught
    assert seen_at_request == [0]  # no second request
    recs = await records(transport, task)
    assert [type(r).__name__ for r in recs] == ["ClaimRecord", "ModelRecord"]


async def test_a_holder_whose_lease_was_lost_reads_the_tail_however_fresh_its_claim(
    transport: Transport,
) -> None:
    task = make_task(uid())
    holder = holder_of(task)
    j = await open_journal(transport, task, holder=holder)
    holder.lose_lease("its heartbeat failed: test")
    model = ScriptedModel(["x"])
    before = transport.round_trips
    assert await j.model(model) == "x"  # nobody claimed after it: the read finds its claim
    assert transport.round_trips - before == 2  # the tail read, then the model record


async def test_zombie_tool_write_is_fenced(transport: Transport) -> None:
    task = make_task(uid())
    zombie = await open_journal(transport, task)
    release = trio.Event()
    entered = trio.Event()

    async def slow_tool(call: ToolCall) -> Any:
        entered.set()
        await release.wait()
        return "late"

    async def zombie_call() -> None:
        with pytest.raises(Fenced):
            await zombie.tool(ToolCall("charge"), Replay.UNSAFE, slow_tool)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(zombie_call)
            await entered.wait()
            successor = await open_journal(transport, task)
            starts: dict[str, int] = {}
            r = await successor.tool(ToolCall("charge"), Replay.UNSAFE, counting("c", starts))
            assert r.interrupted and starts == {}
            release.set()
    recs = await records(transport, task)
    assert check(list(enumerate(recs, 1))).ok


@pytest.mark.parametrize("error", ["timeout", "wrong_last"])
async def test_lost_ack_of_a_stored_record_is_not_fencing(transport: Transport, error: str) -> None:
    from dagnats_trio.transport import TransportTimeout

    lossy = LoseAck(transport, TransportTimeout if error == "timeout" else WrongLastSequence)
    task = make_task(uid())
    j = await open_journal(lossy, task)  # type: ignore[arg-type]
    lossy.armed = True
    assert await j.model(ScriptedModel(["m"])) == "m"
    assert not lossy.armed
    await j.tool(ToolCall("t"), Replay.SAFE, counting("t", {}))
    recs = await records(transport, task)
    assert [type(r).__name__ for r in recs] == [
        "ClaimRecord",
        "ModelRecord",
        "ToolIntentRecord",
        "ToolResultRecord",
    ]


@pytest.mark.parametrize("limit", [5, 1])
async def test_restart_limit(transport: Transport, limit: int) -> None:
    task = make_task(uid())
    for _ in range(limit):
        await open_journal(transport, task, restart_limit=limit)  # claim, then "crash"
    holder = holder_of(task)
    with pytest.raises(RestartLimit):
        await open_journal(transport, task, restart_limit=limit, holder=holder)
    assert holder.settlement is Settlement.ACK
    recs = await read_journal(transport, task.run_id, task.step_id)
    assert [type(r).__name__ for _, r in recs] == ["ClaimRecord"] * (limit + 1) + ["CommitRecord"]
    seq, commit = recs[-1]
    assert isinstance(commit, CommitRecord)
    assert commit.action is CommitAction.FAIL and commit.reason == RESTART_LIMIT_REASON
    (event,) = await history(transport, task.run_id)
    assert isinstance(event, StepFailed)
    assert event.retriable and event.reason == RESTART_LIMIT_REASON
    assert event.journal_seq == seq and event.dispatch == task.dispatch
    # the retry (a new attempt) resumes from the journal: the failure commit is progress
    retry = make_task(task.run_id, attempt=2)
    await open_journal(transport, retry, restart_limit=limit)


async def test_pause_counts_as_progress(transport: Transport) -> None:
    task = make_task(uid())
    await open_journal(transport, task, restart_limit=1)  # a crash
    j = await open_journal(transport, make_task(task.run_id, nonce="p1"), restart_limit=2)
    await j.settle(CommitAction.PAUSE, pause_ms=10)
    resumed = make_task(task.run_id, nonce="p2")
    j2 = await open_journal(transport, resumed, restart_limit=1)
    assert j2.next_call == 0


async def test_redelivery_reruns_safe_and_interrupts_unsafe(transport: Transport) -> None:
    task = make_task(uid())
    j = await open_journal(transport, task)

    async def crash_mid_tool(call: ToolCall) -> Any:
        await j.tool_output({"line": 1})
        raise Crash

    with pytest.raises(Crash):
        await j.tool(ToolCall("search", "q"), Replay.SAFE, crash_mid_tool)
    j2 = await open_journal(transport, task)
    starts: dict[str, int] = {}
    r = await j2.tool(ToolCall("search", "q"), Replay.SAFE, counting("search", starts, "hit"))
    assert r.output == "hit" and starts == {"search": 1}

    async def crash_mid_unsafe(call: ToolCall) -> Any:
        await j2.tool_output("partial-1")
        raise Crash

    with pytest.raises(Crash):
        await j2.tool(ToolCall("send", "hi"), Replay.UNSAFE, crash_mid_unsafe)
    j3 = await open_journal(transport, task)
    await j3.tool(ToolCall("search", "q"), Replay.SAFE, counting("search", starts))
    r3 = await j3.tool(ToolCall("send", "hi"), Replay.UNSAFE, counting("send", starts))
    assert r3.interrupted and r3.partial == ("partial-1",)
    assert starts == {"search": 1}
    # a safe declaration now does not rerun an intent recorded as unsafe
    j4 = await open_journal(transport, task)
    await j4.tool(ToolCall("search", "q"), Replay.SAFE, counting("search", starts))
    r4 = await j4.tool(ToolCall("send", "hi"), Replay.SAFE, counting("send", starts))
    assert r4.interrupted and starts == {"search": 1}


async def test_retry_runs_safe_and_models_fresh_and_honours_unsafe(
    transport: Transport,
) -> None:
    run = uid()
    model = ScriptedModel(["m1", "m2"])
    starts: dict[str, int] = {}
    a1 = make_task(run)
    j = await open_journal(transport, a1)
    await j.model(model)
    await j.tool(ToolCall("search", "q"), Replay.SAFE, counting("search", starts, "old"))
    await j.tool(ToolCall("charge", 10), Replay.UNSAFE, counting("charge", starts, "charged"))

    async def crash(call: ToolCall) -> Any:
        starts["send"] = starts.get("send", 0) + 1
        raise Crash

    with pytest.raises(Crash):
        await j.tool(ToolCall("send", "hi"), Replay.UNSAFE, crash)
    # the attempt timed out; the engine sends attempt 2
    j2 = await open_journal(transport, make_task(run, attempt=2))
    assert await j2.model(model) == "m2"
    assert model.requests == 2
    r = await j2.tool(ToolCall("search", "q"), Replay.SAFE, counting("search", starts, "new"))
    assert r.output == "new"
    c = await j2.tool(ToolCall("charge", 10), Replay.UNSAFE, counting("charge", starts))
    assert c.output == "charged"
    s = await j2.tool(ToolCall("send", "hi"), Replay.UNSAFE, counting("send", starts))
    assert s.interrupted
    # a charge with another input is a new call
    c2 = await j2.tool(ToolCall("charge", 20), Replay.UNSAFE, counting("charge", starts, "20"))
    assert c2.output == "20"
    assert starts == {"search": 2, "charge": 2, "send": 1}
    await j2.settle(CommitAction.COMPLETE)
    assert check(await read_journal(transport, run, "agent"), 1).ok


async def test_replay_mismatch_writes_nothing(transport: Transport) -> None:
    task = make_task(uid())
    j = await open_journal(transport, task)
    await j.tool(ToolCall("search", "a"), Replay.SAFE, counting("s", {}))
    await j.model(ScriptedModel(["m"]))
    j2 = await open_journal(transport, task)
    n = len(await records(transport, task))
    with pytest.raises(ReplayMismatch, match="search"):
        await j2.tool(ToolCall("search", "b"), Replay.SAFE, counting("s", {}))
    with pytest.raises(ReplayMismatch):
        await j2.model(ScriptedModel(["x"]))
    assert len(await records(transport, task)) == n
    await j2.tool(ToolCall("search", "a"), Replay.SAFE, counting("s", {}))  # the right call
    with pytest.raises(ReplayMismatch):
        await j2.tool(ToolCall("search", "a"), Replay.SAFE, counting("s", {}))  # model at 1


async def test_concurrent_use_raises_busy(transport: Transport) -> None:
    j = await open_journal(transport, make_task(uid()))
    gate = trio.Event()
    entered = trio.Event()

    async def blocking(call: ToolCall) -> Any:
        entered.set()
        await gate.wait()
        return 1

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(j.tool, ToolCall("a"), Replay.SAFE, blocking)
            await entered.wait()
            with pytest.raises(trio.BusyResourceError):
                await j.model(ScriptedModel(["x"]))
            with pytest.raises(trio.BusyResourceError):
                await j.tool(ToolCall("b"), Replay.SAFE, blocking)
            with pytest.raises(trio.BusyResourceError):
                await j.settle(CommitAction.COMPLETE)
            gate.set()
    assert await j.model(ScriptedModel(["x"])) == "x"  # free again


async def test_tool_errors_and_non_json_output(transport: Transport) -> None:
    task = make_task(uid())
    j = await open_journal(transport, task)

    async def boom(call: ToolCall) -> Any:
        raise ValueError("no such file")

    r = await j.tool(ToolCall("read"), Replay.SAFE, boom)
    assert r.error == "ValueError: no such file" and r.output is None

    async def not_json(call: ToolCall) -> Any:
        return object()

    with pytest.raises(ToolOutputNotJson):
        await j.tool(ToolCall("weird"), Replay.SAFE, not_json)
    recs = await records(transport, task)
    assert isinstance(recs[-1], ToolResultRecord) and recs[-1].error is not None
    j2 = await open_journal(transport, task)
    r2 = await j2.tool(ToolCall("read"), Replay.SAFE, boom)
    assert r2.error == "ValueError: no such file"
    with pytest.raises(ToolOutputNotJson):
        await j2.tool(ToolCall("weird"), Replay.SAFE, not_json)
    with pytest.raises(TypeError, match="tool input"):
        await j2.tool(ToolCall("x", object()), Replay.SAFE, boom)


async def test_failed_model_request_records_nothing(transport: Transport) -> None:
    task = make_task(uid())
    j = await open_journal(transport, task)
    model = ScriptedModel([RuntimeError("503"), "ok"])
    with pytest.raises(RuntimeError, match="503"):
        await j.model(model)
    assert await j.model(model) == "ok"
    recs = await records(transport, task)
    assert [type(r).__name__ for r in recs] == ["ClaimRecord", "ModelRecord"]
    assert isinstance(recs[1], ModelRecord) and recs[1].call == 0


async def test_call_limit(transport: Transport, monkeypatch: pytest.MonkeyPatch) -> None:
    assert MAX_CALLS_PER_ITERATION >= 100
    monkeypatch.setattr("dagnats_trio.journal._handle.MAX_CALLS_PER_ITERATION", 2)
    j = await open_journal(transport, make_task(uid()))
    await j.model(ScriptedModel(["a"]))
    await j.model(ScriptedModel(["b"]))
    with pytest.raises(CallLimitExceeded, match="at most 2"):
        await j.model(ScriptedModel(["c"]))


async def test_state_rides_the_commit_and_loads_with_one_get(
    transport: Transport,
) -> None:
    run = uid()
    j = await open_journal(transport, make_task(run))
    assert await j.load_state() is None
    big = {"history": ["x" * 1000] * 50}  # no loop_state_max_bytes for journal steps
    j.set_state(big)
    seq = await j.settle(CommitAction.CONTINUE)
    j1 = await open_journal(transport, make_task(run, iteration=1, journal_seq=seq))
    before = transport.round_trips
    assert await j1.load_state() == big
    assert transport.round_trips == before  # the tail read already had the commit
    # a redelivery that must read the iteration gets the base commit in the same read
    j1b = await open_journal(transport, make_task(run, iteration=1, journal_seq=seq))
    before = transport.round_trips
    assert await j1b.load_state() == big
    assert transport.round_trips == before


async def test_settle_closes_the_handle(transport: Transport) -> None:
    j = await open_journal(transport, make_task(uid()))
    await j.settle(CommitAction.COMPLETE, output=1)
    with pytest.raises(RuntimeError, match="closed"):
        await j.model(ScriptedModel(["x"]))


async def test_crash_seams_are_reached_in_order(transport: Transport) -> None:
    seen: list[Seam] = []

    async def hook(ctx: SeamContext) -> None:
        seen.append(ctx.seam)

    task = make_task(uid())
    with install_hook(hook):
        j = await open_journal(transport, task)
        await j.tool(ToolCall("a"), Replay.UNSAFE, counting("a", {}))
        await j.settle(CommitAction.COMPLETE)
    assert seen == [
        Seam.BEFORE_CLAIM,
        Seam.AFTER_CLAIM,
        Seam.AFTER_TOOL_INTENT,
        Seam.INSIDE_TOOL,
        Seam.AFTER_TOOL_RESULT,
        Seam.AFTER_COMMIT,
        Seam.AFTER_LIFECYCLE_EVENT,
    ]


async def test_kill_inside_tool_after_its_effect_leaves_the_intent_open(
    transport: Transport,
) -> None:
    """INSIDE_TOOL is reached after the tool function ran: the charge happened, its result was
    never recorded, and the successor records it interrupted instead of charging again."""
    task = make_task(uid())

    async def kill_inside(ctx: SeamContext) -> None:
        if ctx.seam is Seam.INSIDE_TOOL:
            raise RuntimeError("kill")

    holder = holder_of(task)
    starts: dict[str, int] = {}
    with install_hook(kill_inside):
        j = await open_journal(transport, task, holder=holder)
        with pytest.raises(HolderKilled):
            await j.tool(ToolCall("charge"), Replay.UNSAFE, counting("charge", starts))
    assert starts == {"charge": 1} and holder.killed
    with pytest.raises(HolderKilled):  # a dead holder writes nothing more
        await j.settle(CommitAction.COMPLETE)
    assert not [r for r in await records(transport, task) if isinstance(r, ToolResultRecord)]
    j2 = await open_journal(transport, task)
    r = await j2.tool(ToolCall("charge"), Replay.UNSAFE, counting("charge", starts))
    assert r.interrupted and starts == {"charge": 1}


async def test_placed_inputs_and_append(transport: Transport) -> None:
    from dagnats_trio.protocol import InputPlacedRecord

    task = make_task(uid())
    j: Journal = await open_journal(transport, task)
    rec = InputPlacedRecord(0, 1, j.claim_id, "msg-1", "steer", {"text": "hi"})
    await j.append(rec)
    assert j.placed_inputs() == [rec]
    with pytest.raises(ValueError, match="claim_id"):
        await j.append(attrs.evolve(rec, claim_id="other"))
    j2 = await open_journal(transport, task)
    assert j2.placed_inputs() == [rec]


async def test_append_is_guarded_like_the_calls(transport: Transport) -> None:
    from dagnats_trio.protocol import InputPlacedRecord

    j = await open_journal(transport, make_task(uid()))
    rec = InputPlacedRecord(0, 1, j.claim_id, "msg-1", "steer", {"text": "hi"})
    gate = trio.Event()
    entered = trio.Event()

    async def blocking(call: ToolCall) -> Any:
        entered.set()
        await gate.wait()
        return 1

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(j.tool, ToolCall("a"), Replay.SAFE, blocking)
            await entered.wait()
            with pytest.raises(trio.BusyResourceError):
                await j.append(rec)
            gate.set()
    assert j.placed_inputs() == []
    await j.append(rec)  # free again
    assert j.placed_inputs() == [rec]


#: Recorded calls replayed by a redelivery (half model responses, half tool results).
REPLAYED_CALLS = 1000


async def test_a_replay_of_recorded_calls_lets_other_tasks_run(transport: Transport) -> None:
    """The REUSE paths do no I/O, so they must checkpoint: while a redelivery replays 1,000
    recorded calls, another task keeps running (it would not run once without the checkpoints)."""
    task = make_task(uid())
    pairs = REPLAYED_CALLS // 2
    model = ScriptedModel([f"m{i}" for i in range(pairs)])
    starts: dict[str, int] = {}
    j = await open_journal(transport, task)
    for i in range(pairs):
        await j.model(model)
        await j.tool(ToolCall("t", {"i": i}), Replay.SAFE, counting("t", starts, i))
    j2 = await open_journal(transport, task)  # a redelivery of the same attempt
    ticks = 0
    replayed = trio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not replayed.is_set():
            ticks += 1
            await trio.lowlevel.checkpoint()

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            await trio.lowlevel.checkpoint()  # the ticker starts
            before = ticks
            for i in range(pairs):
                assert await j2.model(model) == f"m{i}"
                assert (
                    await j2.tool(ToolCall("t", {"i": i}), Replay.SAFE, counting("t", starts))
                ).output == i
            during = ticks - before
            replayed.set()
    print(f"replayed {REPLAYED_CALLS} calls; the other task ran {during} times meanwhile")
    assert model.requests == pairs and starts == {"t": pairs}  # all reused, none re-run
    assert during >= REPLAYED_CALLS // 2
