"""Records stored in pairs (issue 12 item 2), on a real nats-server (the nats-py and the native
transport) and on SimTransport: a model response with the tool intent it leads to
(``then_tool``), a tool result with the continue commit (``then_continue``), each pair ONE
message on the journal subject (a record group, fenced once), or an atomic batch when the pair is
too big for one message. A crash before the message stores none of it; a crash after it finds
all of it; a zombie's pair is fenced whole. Journal check sees each pair whole."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from dagnats_trio._seams import Seam, SeamContext, install_hook
from dagnats_trio.journal import (
    MAX_GROUP_MESSAGE_BYTES,
    DeliveryState,
    Fenced,
    HolderKilled,
    Journal,
    NextTool,
    Replay,
    ReplayMismatch,
    ScriptedModel,
    Settlement,
    TaskIdentity,
    ToolCall,
    ToolResult,
    open_journal,
    read_journal_for_audit,
)
from dagnats_trio.journal import _calls as calls_module
from dagnats_trio.journal._fencing import FencedWriter
from dagnats_trio.protocol import (
    BATCH_HEADER,
    CommitAction,
    CommitRecord,
    JournalRecord,
    ModelRecord,
    StepContinue,
    ToolIntentRecord,
    ToolResultRecord,
    encode_record,
    record_headers,
)
from dagnats_trio.protocol.layout import JOURNAL_STREAM, journal_subject
from dagnats_trio.transport import Headers, Transport, TrioNatsTransport

from ._helpers import history, make_task, uid
from ._pairs import CountWrites, audit_ok, kill_at, stored

CALL = ToolCall("send_message", {"to": "ops"})
REPLY = {"tool": "send_message"}


def then_tool(reply: Any) -> NextTool | None:
    return NextTool(CALL, Replay.UNSAFE) if reply.get("tool") else None


def counting(starts: dict[str, int]) -> Any:
    async def fn(call: ToolCall) -> Any:
        starts[call.name] = starts.get(call.name, 0) + 1
        await trio.lowlevel.checkpoint()
        return {"sent": call.key}

    return fn


def state_of(result: ToolResult) -> Any:
    return {"result": result.output, "interrupted": result.interrupted}


async def paired_turn(j: Journal, model: ScriptedModel, starts: dict[str, int]) -> ToolResult:
    await j.model(model, then_tool=then_tool)
    return await j.tool(CALL, Replay.UNSAFE, counting(starts), then_continue=state_of)


async def test_a_paired_turn_is_a_claim_and_two_messages(any_transport: Transport) -> None:
    """Each pair is ONE message on the journal subject: the stream holds three messages for the
    turn's five records (counted on the transport, not as records)."""
    transport = any_transport
    task = make_task(uid())
    counted = CountWrites(transport)
    holder = DeliveryState(TaskIdentity.of(task))
    model, starts = ScriptedModel([REPLY]), {}
    j = await open_journal(counted, task, holder=holder)  # type: ignore[arg-type]
    result = await paired_turn(j, model, starts)
    assert starts == {"send_message": 1} and model.requests == 1 and not result.interrupted
    # claim, (model + intent), (result + commit), lifecycle event: four durable writes, not six.
    assert counted.writes == 4
    assert await stored(transport, task) == [
        ("claim", None),
        ("model+tool.intent", None),
        ("tool.result+commit", None),
    ]
    assert holder.settlement is Settlement.ACK
    records, _, _ = await read_journal_for_audit(transport, task.run_id, task.step_id)
    commit_seq, commit = records[-1]
    assert isinstance(commit, CommitRecord) and commit.action is CommitAction.CONTINUE
    assert commit.state == {"result": {"sent": f"{task.run_id}.agent.0.1"}, "interrupted": False}
    (event,) = await history(transport, task.run_id)
    assert isinstance(event, StepContinue) and event.journal_seq == commit_seq
    await audit_ok(transport, task)


async def test_a_pair_too_big_for_one_message_goes_as_an_atomic_batch(
    any_transport: Transport,
) -> None:
    """A model response bigger than :data:`MAX_GROUP_MESSAGE_BYTES` is stored with its intent
    as an atomic batch (each record its own message, marked ``k/n``), still one durable write; a
    crash before the batch stores none of it, and the successor's pair is found whole."""
    transport = any_transport
    task = make_task(uid())
    big = {**REPLY, "text": "x" * MAX_GROUP_MESSAGE_BYTES}
    model, starts = ScriptedModel([big, big]), {}
    with install_hook(kill_at(Seam.INSIDE_BATCH)):
        j = await open_journal(transport, task)
        with pytest.raises(HolderKilled):
            await paired_turn(j, model, starts)
    assert await stored(transport, task) == [("claim", None)]
    counted = CountWrites(transport)
    j2 = await open_journal(counted, task)  # type: ignore[arg-type]
    result = await paired_turn(j2, model, starts)
    assert model.requests == 2 and starts == {"send_message": 1} and not result.interrupted
    assert counted.writes == 4  # claim, (model + intent) batch, (result + commit), event
    assert (await stored(transport, task))[1:] == [
        ("claim", None),
        ("model", "1/2"),
        ("tool.intent", "2/2"),
        ("tool.result+commit", None),
    ]
    await audit_ok(transport, task)


async def test_seams_of_a_paired_turn(transport: Transport) -> None:
    seen: list[Seam] = []

    async def hook(ctx: SeamContext) -> None:
        seen.append(ctx.seam)

    task = make_task(uid())
    with install_hook(hook):
        j = await open_journal(transport, task)
        await paired_turn(j, ScriptedModel([REPLY]), {})
    assert seen == [
        Seam.BEFORE_CLAIM,
        Seam.AFTER_CLAIM,
        Seam.INSIDE_BATCH,
        Seam.AFTER_TOOL_INTENT,
        Seam.INSIDE_TOOL,
        Seam.INSIDE_BATCH,
        Seam.AFTER_TOOL_RESULT,  # stored with the commit
        Seam.AFTER_COMMIT,
        Seam.AFTER_LIFECYCLE_EVENT,
    ]


async def test_a_crash_before_the_model_message_stores_none_of_it(
    any_transport: Transport,
) -> None:
    transport = any_transport
    task = make_task(uid())
    model, starts = ScriptedModel([REPLY, REPLY]), {}
    with install_hook(kill_at(Seam.INSIDE_BATCH)):
        j = await open_journal(transport, task)
        with pytest.raises(HolderKilled):
            await paired_turn(j, model, starts)
    assert await stored(transport, task) == [("claim", None)]
    j2 = await open_journal(transport, task)
    await paired_turn(j2, model, starts)
    # the response was lost with its batch: asked again; the unsafe tool started once
    assert model.requests == 2 and starts == {"send_message": 1}
    assert [k for k, _ in await stored(transport, task)] == [
        "claim", "claim", "model+tool.intent", "tool.result+commit"
    ]  # fmt: skip
    await audit_ok(transport, task)


async def test_a_crash_before_the_commit_message_leaves_the_intent_open(
    any_transport: Transport,
) -> None:
    transport = any_transport
    task = make_task(uid())
    model, starts = ScriptedModel([REPLY]), {}
    with install_hook(kill_at(Seam.INSIDE_BATCH, nth=2)):
        j = await open_journal(transport, task)
        with pytest.raises(HolderKilled):
            await paired_turn(j, model, starts)
    assert [k for k, _ in await stored(transport, task)] == ["claim", "model+tool.intent"]
    j2 = await open_journal(transport, task)
    result = await paired_turn(j2, model, starts)
    # the model answer is reused; the unsafe intent without a result is answered interrupted
    assert model.requests == 1 and starts == {"send_message": 1} and result.interrupted
    await audit_ok(transport, task)


async def test_a_message_stored_whole_is_found_whole(any_transport: Transport) -> None:
    """Killed right after the model + intent message was stored: the successor finds both."""
    transport = any_transport
    task = make_task(uid())
    model, starts = ScriptedModel([REPLY]), {}
    with install_hook(kill_at(Seam.AFTER_TOOL_INTENT)):
        j = await open_journal(transport, task)
        with pytest.raises(HolderKilled):
            await paired_turn(j, model, starts)
    assert [k for k, _ in await stored(transport, task)] == ["claim", "model+tool.intent"]
    j2 = await open_journal(transport, task)
    result = await paired_turn(j2, model, starts)
    assert model.requests == 1 and starts == {} and result.interrupted
    await audit_ok(transport, task)


async def test_a_zombies_pair_is_fenced_whole(transport: Transport) -> None:
    task = make_task(uid())
    model, starts = ScriptedModel([REPLY]), {}
    holder = DeliveryState(TaskIdentity.of(task))
    zombie = await open_journal(transport, task, holder=holder)
    await zombie.model(model, then_tool=then_tool)
    successor = await open_journal(transport, task)  # claims: the zombie lost the tail
    with pytest.raises(Fenced):
        await zombie.tool(CALL, Replay.UNSAFE, counting(starts), then_continue=state_of)
    # The zombie ran its tool (the spec allows that); its result and commit stored nothing.
    assert starts == {"send_message": 1} and holder.fenced
    assert [k for k, _ in await stored(transport, task)] == [
        "claim", "model+tool.intent", "claim"
    ]  # fmt: skip
    result = await paired_turn(successor, model, starts)  # the response is reused
    assert result.interrupted and starts == {"send_message": 1} and model.requests == 1
    await audit_ok(transport, task)


@pytest.mark.parametrize("pad", [0, MAX_GROUP_MESSAGE_BYTES], ids=["message", "batch"])
async def test_a_zombies_group_is_fenced_whole(transport: Transport, pad: int) -> None:
    """A holder overtaken by a successor's claim appends a group: as one message (small) or an
    atomic batch (too big for one message), it stores nothing and the holder is fenced."""
    task = make_task(uid())
    holder = DeliveryState(TaskIdentity.of(task))
    zombie = await open_journal(transport, task, holder=holder)
    subject = journal_subject(task.run_id, task.step_id)
    writer = FencedWriter(transport=transport, subject=subject, holder=holder,
                          claim_id=zombie.claim_id, last_seq=zombie.last_seq)  # fmt: skip
    await open_journal(transport, task)  # the successor claims
    ident = TaskIdentity.of(task)
    group: list[JournalRecord] = [
        ModelRecord(ident.iteration, ident.attempt, zombie.claim_id, 0, {"pad": "x" * pad}),
        ToolIntentRecord(
            ident.iteration, ident.attempt, zombie.claim_id, 1, CALL.name, None, Replay.UNSAFE, "k"
        ),
    ]
    with pytest.raises(Fenced):
        await writer.append_batch(group)
    assert holder.fenced
    assert await stored(transport, task) == [("claim", None), ("claim", None)]


async def test_a_batch_cut_short_on_the_wire_is_never_stored(
    trio_transport: TrioNatsTransport,
) -> None:
    """A holder that dies while its batch is on the wire: the first message reached the server,
    the commit never did. The server stores nothing; the successor asks the model again."""
    t = trio_transport
    task = make_task(uid())
    model, starts = ScriptedModel([REPLY, REPLY]), {}
    j = await open_journal(t, task)
    ident = TaskIdentity.of(task)
    record = ModelRecord(ident.iteration, ident.attempt, j.claim_id, 0, REPLY)
    # What the dead holder sent: message 1 of 2 of its batch (ADR-50 headers), no commit.
    headers: Headers = {
        **record_headers(record),
        BATCH_HEADER: "1/2",
        "Nats-Batch-Id": uid("b"),
        "Nats-Batch-Sequence": "1",
        "Nats-Expected-Last-Subject-Sequence": str(j.last_seq),
    }
    subject = journal_subject(task.run_id, task.step_id)
    await t.core_publish(subject, encode_record(record), headers)
    # A stored publish to the same stream after it, on the same connection: once it is
    # acknowledged, the stream has handled the batch's first message.
    probe = await t.publish(journal_subject(task.run_id, "probe"), b"{}")
    assert probe > j.last_seq
    tail = await t.get_last_msg(JOURNAL_STREAM, subject)
    assert tail is not None and tail.seq == j.last_seq
    j2 = await open_journal(t, task)
    await paired_turn(j2, model, starts)
    assert model.requests == 1 and starts == {"send_message": 1}
    kinds = await stored(t, task)
    assert [k for k, _ in kinds] == ["claim", "claim", "model+tool.intent", "tool.result+commit"]
    records, _, _ = await read_journal_for_audit(t, task.run_id, task.step_id)
    assert [r.claim_id for _, r in records[2:]] == [j2.claim_id] * 4
    await audit_ok(t, task)


async def test_the_next_tool_must_be_the_paired_intent(transport: Transport) -> None:
    task = make_task(uid())
    j = await open_journal(transport, task)
    await j.model(ScriptedModel([REPLY]), then_tool=then_tool)
    with pytest.raises(ReplayMismatch):
        await j.model(ScriptedModel([REPLY]))
    with pytest.raises(ReplayMismatch):
        await j.tool(ToolCall("other"), Replay.SAFE, counting({}))
    await transport_settle(j)
    records, _, _ = await read_journal_for_audit(transport, task.run_id, task.step_id)
    # the intent never ran: the commit's message answers it, interrupted
    result = [r for _, r in records if isinstance(r, ToolResultRecord)]
    assert len(result) == 1 and result[0].interrupted and result[0].error
    assert [type(r) for _, r in records][-2:] == [ToolResultRecord, CommitRecord]
    await audit_ok(transport, task)


async def transport_settle(j: Journal) -> None:
    await j.settle(CommitAction.FAIL, error="gave up", retriable=True)


async def test_no_pairing_when_the_rules_answer_from_the_journal(transport: Transport) -> None:
    """A retry honours an earlier attempt's unsafe start: the model's response is stored alone,
    and ``tool`` records the honoured result, as without ``then_tool``."""
    run = uid()
    first = make_task(run, attempt=1)
    starts: dict[str, int] = {}
    with install_hook(kill_at(Seam.INSIDE_TOOL)):
        j = await open_journal(transport, first)
        with pytest.raises(HolderKilled):
            await paired_turn(j, ScriptedModel([REPLY]), starts)
    retry = make_task(run, attempt=2)
    j2 = await open_journal(transport, retry)
    result = await paired_turn(j2, ScriptedModel([REPLY]), starts)
    assert result.interrupted and starts == {"send_message": 1}
    marks = await stored(transport, retry)
    assert marks[-3:] == [("model", None), ("tool.intent", None), ("tool.result+commit", None)]
    intents = [r for _, r in (await read_journal_for_audit(transport, run, "agent"))[0]
               if isinstance(r, ToolIntentRecord)]  # fmt: skip
    assert [i.attempt for i in intents] == [1, 2]
    await audit_ok(transport, retry)


async def test_a_paired_tool_input_is_spelled_once(
    transport: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tool input ``then_tool`` names is turned into canonical JSON once, when the intent is
    planned; ``tool`` handed the same input object reuses that text (it was spelled twice). An
    equal input in another object is spelled again, and the pair still holds."""
    spelled: list[Any] = []
    real = calls_module.canonical_json

    def counted(value: Any) -> str:
        spelled.append(value)
        return real(value)

    monkeypatch.setattr(calls_module, "canonical_json", counted)
    task = make_task(uid())
    j = await open_journal(transport, task)
    starts: dict[str, int] = {}
    result = await paired_turn(j, ScriptedModel([REPLY]), starts)
    assert spelled == [CALL.input] and starts == {"send_message": 1}
    assert not result.interrupted
    # the same input in a new object: spelled by tool() too, and still the paired intent
    spelled.clear()
    other = make_task(uid())
    j2 = await open_journal(transport, other)
    await j2.model(ScriptedModel([REPLY]), then_tool=then_tool)
    copy = ToolCall(CALL.name, dict(CALL.input))  # type: ignore[arg-type]
    result = await j2.tool(copy, Replay.UNSAFE, counting(starts), then_continue=state_of)
    assert spelled == [CALL.input, CALL.input] and starts == {"send_message": 2}
    assert await stored(transport, other) == [
        ("claim", None),
        ("model+tool.intent", None),
        ("tool.result+commit", None),
    ]
    await audit_ok(transport, task)
    await audit_ok(transport, other)
