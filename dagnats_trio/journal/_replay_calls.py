"""The rules for a call at a position: reuse what is recorded, honour an earlier attempt's
unsafe start, run again, or refuse a mismatch (tools, parallel groups of tools, model calls).

Pure (no I/O, no clock, no randomness); the terms are those of :mod:`._replay`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import final

import attrs

from dagnats_trio.protocol import JsonValue, Replay, ToolResultRecord

from ._replay_claim import RecordedModel, RecordedTool, ReplayView, _first_match, _input_json

# ---------------------------------------------------------------------------------------------
# Calls at a position.
# ---------------------------------------------------------------------------------------------


@final
@attrs.frozen
class ToolResult:
    """What ``Journal.tool`` returns: the tool's output, or its own error, or an interruption."""

    output: JsonValue = None
    error: str | None = None
    interrupted: bool = False
    partial: tuple[JsonValue, ...] = ()
    #: In a group with cancel-on-error: the position of the member whose failure cancelled this.
    cancelled_by: int | None = None

    @classmethod
    def of(cls, rec: ToolResultRecord) -> ToolResult:
        return cls(rec.output, rec.error, rec.interrupted, tuple(rec.partial), rec.cancelled_by)


class ToolAction(enum.Enum):
    REUSE = "reuse"  # a recorded result: return it, write nothing
    RECORD = "record"  # write ``result`` (after the intent when ``write_intent``) and return it
    RERUN = "rerun"  # a safe intent without a result: run fn again under the recorded intent
    RUN = "run"  # write the intent, run fn, write the result
    MISMATCH = "mismatch"  # a different call was recorded here: write nothing, raise


@attrs.frozen
class ToolDecision:
    action: ToolAction
    result: ToolResult | None = None
    write_intent: bool = False
    reason: str = ""


class ModelAction(enum.Enum):
    REUSE = "reuse"
    RUN = "run"
    MISMATCH = "mismatch"


@attrs.frozen
class ModelDecision:
    action: ModelAction
    response: JsonValue = None
    reason: str = ""


def decide_tool(
    view: ReplayView,
    consumed: frozenset[int],
    call: int,
    name: str,
    input_json: str,
    replay: Replay,
) -> tuple[ToolDecision, frozenset[int]]:
    """The spec's recovery rules for a tool call at position ``call``, in order:

    1. a different call recorded here in this attempt -> MISMATCH (nothing consumed or written);
    2. an unsafe start of an earlier attempt with the same name and input is honoured (consumed,
       at most once);
    3. a result recorded here in this attempt is reused, whatever the declarations say;
    4. an honoured start: its result is recorded here, or an interrupted result with its partial
       output when it has none;
    5. an intent here without a result runs again only if both declarations say safe, otherwise
       an interrupted result is recorded with the partial output written here;
    6. otherwise the call runs.
    """
    rec = view.calls.get(call)
    if isinstance(rec, RecordedModel):
        return ToolDecision(
            ToolAction.MISMATCH, reason=f"a model call is recorded at position {call}"
        ), consumed
    if isinstance(rec, RecordedTool) and (
        rec.intent.name != name or _input_json(rec.intent.input) != input_json
    ):
        return ToolDecision(
            ToolAction.MISMATCH,
            reason=(
                f"tool {rec.intent.name!r} with input {_input_json(rec.intent.input)} is "
                f"recorded at position {call}, not {name!r} with input {input_json}"
            ),
        ), consumed
    match = _first_match(view.origins, consumed, call, name, input_json, replay)
    if match is not None:
        consumed = consumed | {match}
    if rec is not None and rec.result is not None:
        return ToolDecision(ToolAction.REUSE, ToolResult.of(rec.result)), consumed
    if match is not None:
        origin = view.origins[match]
        result = (
            ToolResult.of(origin.result)
            if origin.result is not None
            else ToolResult(interrupted=True, partial=origin.partial)
        )
        return ToolDecision(ToolAction.RECORD, result, write_intent=rec is None), consumed
    if rec is not None:
        if rec.intent.replay is Replay.SAFE and replay is Replay.SAFE:
            return ToolDecision(ToolAction.RERUN), consumed
        return ToolDecision(
            ToolAction.RECORD, ToolResult(interrupted=True, partial=rec.partial)
        ), consumed
    return ToolDecision(ToolAction.RUN), consumed


@final
@attrs.frozen
class GroupMember:
    """One call of a parallel group as the rules see it."""

    name: str
    input_json: str
    replay: Replay
    call_id: str | None = None


def decide_group(
    view: ReplayView, consumed: frozenset[int], first: int, members: Sequence[GroupMember]
) -> tuple[list[ToolDecision], frozenset[int]]:
    """A parallel group is ``len(members)`` consecutive positions from ``first``: each member is
    decided at its own position by :func:`decide_tool` (so a finished call is reused, an
    unfinished unsafe one comes back interrupted, an unfinished safe one runs again, and an
    earlier attempt's unsafe start is honoured at most once). A recorded intent whose model call
    id differs from the member's (both given) is a mismatch too. On a mismatch the decisions end
    with it, at that member's index, and nothing is consumed."""
    out: list[ToolDecision] = []
    taken = consumed
    for k, m in enumerate(members):
        pos = first + k
        rec = view.calls.get(pos)
        if (
            isinstance(rec, RecordedTool)
            and rec.intent.call_id is not None
            and m.call_id is not None
            and rec.intent.call_id != m.call_id
        ):
            reason = (
                f"call id {rec.intent.call_id!r} is recorded at position {pos} (member {k} of "
                f"the group), not {m.call_id!r}"
            )
            return [*out, ToolDecision(ToolAction.MISMATCH, reason=reason)], consumed
        decision, taken = decide_tool(view, taken, pos, m.name, m.input_json, m.replay)
        if decision.action is ToolAction.MISMATCH:
            reason = f"member {k} of the group: {decision.reason}"
            return [*out, ToolDecision(ToolAction.MISMATCH, reason=reason)], consumed
        out.append(decision)
    return out, taken


def decide_model(view: ReplayView, call: int) -> ModelDecision:
    """Reuse the response this attempt recorded at ``call``; a tool there is a mismatch."""
    rec = view.calls.get(call)
    if isinstance(rec, RecordedModel):
        return ModelDecision(ModelAction.REUSE, rec.response)
    if isinstance(rec, RecordedTool):
        return ModelDecision(
            ModelAction.MISMATCH,
            reason=f"tool {rec.intent.name!r} is recorded at position {call}, not a model call",
        )
    return ModelDecision(ModelAction.RUN)
