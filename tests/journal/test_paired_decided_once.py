"""A tool call stored with the model response (``then_tool``) is decided by the replay rules,
and its intent built, once: when the response is stored. ``tool`` handed that very call runs it
without deciding or building it again (issue 12 goal 3); any other call is still decided and
compared with the intent, and refused when it is not the intent."""

from __future__ import annotations

from typing import Any

import pytest

from dagnats_trio.journal import Replay, ReplayMismatch, ScriptedModel, ToolCall, open_journal
from dagnats_trio.journal import _handle as handle_module
from dagnats_trio.journal import _pairs as pairs_module
from dagnats_trio.transport import Transport

from ._helpers import make_task, uid
from ._pairs import audit_ok, stored
from .test_batched_pairs import CALL, REPLY, counting, paired_turn, state_of, then_tool


def _count_decisions(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    decided: list[tuple[int, str]] = []
    real = pairs_module.decide_tool

    def counted(view: Any, consumed: Any, call: int, name: str, *rest: Any) -> Any:
        decided.append((call, name))
        return real(view, consumed, call, name, *rest)

    monkeypatch.setattr(pairs_module, "decide_tool", counted)
    monkeypatch.setattr(handle_module, "decide_tool", counted)
    return decided


async def test_the_paired_call_is_decided_once(
    transport: Transport, monkeypatch: pytest.MonkeyPatch
) -> None:
    decided = _count_decisions(monkeypatch)
    task = make_task(uid())
    j = await open_journal(transport, task)
    starts: dict[str, int] = {}
    result = await paired_turn(j, ScriptedModel([REPLY]), starts)
    assert decided == [(1, CALL.name)]
    assert starts == {"send_message": 1} and result.output == {"sent": f"{task.run_id}.agent.0.1"}
    assert await stored(transport, task) == [
        ("claim", None),
        ("model+tool.intent", None),
        ("tool.result+commit", None),
    ]
    await audit_ok(transport, task)


@pytest.mark.parametrize(
    ("call", "replay"),
    [
        (CALL, Replay.SAFE),  # the same call, declared otherwise
        (ToolCall(CALL.name, CALL.input, call_id="m1"), Replay.UNSAFE),  # another model id
        (ToolCall(CALL.name, {"to": "dev"}), Replay.UNSAFE),  # another input
    ],
)
async def test_another_call_is_decided_and_refused(
    transport: Transport, monkeypatch: pytest.MonkeyPatch, call: ToolCall, replay: Replay
) -> None:
    decided = _count_decisions(monkeypatch)
    task = make_task(uid())
    j = await open_journal(transport, task)
    await j.model(ScriptedModel([REPLY]), then_tool=then_tool)
    starts: dict[str, int] = {}
    with pytest.raises(ReplayMismatch):
        await j.tool(call, replay, counting(starts), then_continue=state_of)
    assert decided == [(1, CALL.name), (1, CALL.name)] and starts == {}
    assert await stored(transport, task) == [("claim", None), ("model+tool.intent", None)]
