"""A final answer stored with the commit that completes the step (issue 12, goals 1 and 2), on a
real nats-server (the nats-py and the native transport) and on SimTransport:
``j.model(fn, then_complete=...)`` stores the model response and the complete commit as ONE
message (a record group, fenced once), then publishes the lifecycle event. A crash before the
message stores neither (the model is asked again); a crash after it finds the step committed
(the model is not asked again); a second settle is refused and writes nothing; journal check
accepts the group and still sees one commit per iteration."""

from __future__ import annotations

from typing import Any

import pytest

from dagnats_trio._seams import Seam, SeamContext, install_hook
from dagnats_trio.journal import (
    Committed,
    Completion,
    DeliveryState,
    HolderKilled,
    NextTool,
    Replay,
    ScriptedModel,
    Settlement,
    TaskIdentity,
    ToolCall,
    check,
    open_journal,
    read_journal_for_audit,
)
from dagnats_trio.protocol import (
    CommitAction,
    CommitRecord,
    JsonValue,
    ModelRecord,
    StepCompleted,
)
from dagnats_trio.transport import Transport

from ._helpers import history, make_task, uid
from ._pairs import CountWrites, audit_ok, kill_at, stored

ANSWER = {"done": True, "answer": "deployed"}
TOOL_REPLY = {"done": False, "tool": "search"}


def answered(reply: JsonValue) -> Completion | None:
    """The completion a final answer leads to: its answer as the output, the reply as state."""
    if not isinstance(reply, dict) or not reply.get("done"):
        return None
    return Completion({"answer": reply["answer"]}, {"history": [reply]})


def then_tool(reply: JsonValue) -> NextTool | None:
    if isinstance(reply, dict) and reply.get("tool"):
        return NextTool(ToolCall(str(reply["tool"])), Replay.SAFE)
    return None


async def test_an_answer_and_its_complete_commit_are_one_message(
    any_transport: Transport,
) -> None:
    """Claim, (model + commit), event: three durable writes, two journal messages for three
    records; the commit completes with the completion's output and state."""
    transport = any_transport
    task = make_task(uid())
    counted = CountWrites(transport)
    holder = DeliveryState(TaskIdentity.of(task))
    model = ScriptedModel([ANSWER])
    j = await open_journal(counted, task, holder=holder)  # type: ignore[arg-type]
    reply = await j.model(model, then_tool=then_tool, then_complete=answered)
    assert reply == ANSWER and model.requests == 1
    assert counted.writes == 3  # claim, (model + commit), lifecycle event: not four
    assert await stored(transport, task) == [("claim", None), ("model+commit", None)]
    assert holder.settlement is Settlement.ACK
    records, _, _ = await read_journal_for_audit(transport, task.run_id, task.step_id)
    assert [type(r) for _, r in records[1:]] == [ModelRecord, CommitRecord]
    (model_seq, _), (commit_seq, commit) = records[1:]
    assert model_seq == commit_seq  # one message: the group's records share its sequence
    assert isinstance(commit, CommitRecord) and commit.action is CommitAction.COMPLETE
    assert commit.output == {"answer": "deployed"} and commit.state == {"history": [ANSWER]}
    (event,) = await history(transport, task.run_id)
    assert isinstance(event, StepCompleted) and event.journal_seq == commit_seq
    assert event.output == {"answer": "deployed"}
    await audit_ok(transport, task)


async def test_a_crash_after_the_group_finds_the_step_committed(
    any_transport: Transport,
) -> None:
    """Killed right after the group stored (before the event): the redelivery finds the
    iteration committed (``Committed``, the event resent) and never asks the model again."""
    transport = any_transport
    task = make_task(uid())
    model = ScriptedModel([ANSWER, ANSWER])
    with install_hook(kill_at(Seam.AFTER_COMMIT)):
        j = await open_journal(transport, task)
        with pytest.raises(HolderKilled):
            await j.model(model, then_complete=answered)
    assert await stored(transport, task) == [("claim", None), ("model+commit", None)]
    assert await history(transport, task.run_id) == []
    with pytest.raises(Committed):
        await open_journal(transport, task)
    assert model.requests == 1
    records, _, _ = await read_journal_for_audit(transport, task.run_id, task.step_id)
    commit_seq, commit = records[-1]
    assert isinstance(commit, CommitRecord) and commit.action is CommitAction.COMPLETE
    (event,) = await history(transport, task.run_id)
    assert isinstance(event, StepCompleted) and event.journal_seq == commit_seq
    await audit_ok(transport, task)


async def test_a_crash_before_the_group_stores_neither(any_transport: Transport) -> None:
    """Killed inside the group, before it is stored: no response, no commit; the redelivery
    asks the model again (the spec allows it) and stores its own group."""
    transport = any_transport
    task = make_task(uid())
    model = ScriptedModel([ANSWER, ANSWER])
    with install_hook(kill_at(Seam.INSIDE_BATCH)):
        j = await open_journal(transport, task)
        with pytest.raises(HolderKilled):
            await j.model(model, then_complete=answered)
    assert await stored(transport, task) == [("claim", None)]
    assert await history(transport, task.run_id) == []
    j2 = await open_journal(transport, task)
    assert await j2.model(model, then_complete=answered) == ANSWER
    assert model.requests == 2
    assert [k for k, _ in await stored(transport, task)] == ["claim", "claim", "model+commit"]
    (event,) = await history(transport, task.run_id)
    assert isinstance(event, StepCompleted) and event.output == {"answer": "deployed"}
    await audit_ok(transport, task)


async def test_a_second_settle_after_then_complete_is_refused(transport: Transport) -> None:
    """The step is committed by ``model``: a later settle or call raises and writes nothing."""
    task = make_task(uid())
    counted = CountWrites(transport)
    j = await open_journal(counted, task)  # type: ignore[arg-type]
    await j.model(ScriptedModel([ANSWER]), then_complete=answered)
    writes = counted.writes
    with pytest.raises(RuntimeError, match="committed"):
        await j.settle(CommitAction.COMPLETE, output="again")
    with pytest.raises(RuntimeError, match="committed"):
        await j.model(ScriptedModel([ANSWER]), then_complete=answered)
    assert counted.writes == writes
    assert [k for k, _ in await stored(transport, task)] == ["claim", "model+commit"]
    assert len(await history(transport, task.run_id)) == 1


async def test_then_tool_is_asked_first_and_a_tool_reply_completes_nothing(
    transport: Transport,
) -> None:
    """A response leads to a tool call or to the step's end: with both functions, a reply that
    names a tool is stored with its intent and ``then_complete`` is never asked."""
    asked: list[JsonValue] = []

    def spy(reply: JsonValue) -> Completion | None:
        asked.append(reply)
        return answered(reply)

    task = make_task(uid())
    j = await open_journal(transport, task)
    await j.model(ScriptedModel([TOOL_REPLY]), then_tool=then_tool, then_complete=spy)
    assert asked == []
    assert [k for k, _ in await stored(transport, task)] == ["claim", "model+tool.intent"]
    assert await history(transport, task.run_id) == []


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda r: {"not": "a Completion"}, id="wrong-type"),
        pytest.param(lambda r: Completion({1, 2}, None), id="output-not-json"),
        pytest.param(lambda r: Completion("out", {2, 3}), id="state-not-json"),
        pytest.param(lambda r: 1 / 0, id="raises"),
    ],
)
async def test_a_bad_then_complete_stores_the_response_alone(
    transport: Transport, bad: Any
) -> None:
    """A ``then_complete`` that raises or gives no valid Completion: the response is stored
    alone (the model is not asked again on the next delivery), nothing is committed, and the
    error is raised for the handler to see."""
    task = make_task(uid())
    model = ScriptedModel([ANSWER])
    j = await open_journal(transport, task)
    with pytest.raises((TypeError, ZeroDivisionError)):
        await j.model(model, then_complete=bad)
    assert [k for k, _ in await stored(transport, task)] == ["claim", "model"]
    assert await history(transport, task.run_id) == []
    j2 = await open_journal(transport, task)
    assert await j2.model(model, then_complete=answered) == ANSWER
    assert model.requests == 1


async def test_a_response_recorded_alone_is_reused_and_completed(transport: Transport) -> None:
    """An earlier delivery stored the answer alone (without ``then_complete``) and died: the
    next one reuses it, asks nothing, and ``then_complete`` writes the commit alone."""
    task = make_task(uid())
    model = ScriptedModel([ANSWER])
    j = await open_journal(transport, task)
    await j.model(model)
    j2 = await open_journal(transport, task)
    assert await j2.model(model, then_complete=answered) == ANSWER
    assert model.requests == 1
    assert [k for k, _ in await stored(transport, task)] == ["claim", "model", "claim", "commit"]
    (event,) = await history(transport, task.run_id)
    assert isinstance(event, StepCompleted) and event.output == {"answer": "deployed"}
    await audit_ok(transport, task)


async def test_check_accepts_the_group_and_still_refuses_a_second_commit(
    transport: Transport,
) -> None:
    """Journal check reads the (model + commit) group as two records of one claim; a second
    commit of the same iteration after it is still a violation."""
    task = make_task(uid())
    j = await open_journal(transport, task)
    await j.model(ScriptedModel([ANSWER]), then_complete=answered)
    records, unreadable, batches = await read_journal_for_audit(
        transport, task.run_id, task.step_id
    )
    assert check(records, 1, unreadable=unreadable, batches=batches).ok
    last_seq, commit = records[-1]
    assert isinstance(commit, CommitRecord)
    again = (*records, (last_seq + 1, commit))
    report = check(list(again), 1, unreadable=unreadable, batches=batches)
    assert not report.ok
    assert {v.rule for v in report.violations} >= {"duplicate-commit"}


async def test_seams_of_an_answer_stored_with_its_commit(transport: Transport) -> None:
    seen: list[Seam] = []

    async def hook(ctx: SeamContext) -> None:
        seen.append(ctx.seam)

    task = make_task(uid())
    with install_hook(hook):
        j = await open_journal(transport, task)
        await j.model(ScriptedModel([ANSWER]), then_complete=answered)
    assert seen == [
        Seam.BEFORE_CLAIM,
        Seam.AFTER_CLAIM,
        Seam.INSIDE_BATCH,
        Seam.AFTER_COMMIT,
        Seam.AFTER_LIFECYCLE_EVENT,
    ]
