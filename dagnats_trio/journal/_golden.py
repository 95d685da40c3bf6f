"""Golden-journal replay, the journal's side: which recorded deliveries to replay, the view each
had when it claimed (``plan_claim``), and a journal whose calls are answered from the records
(``decide_model`` / ``decide_tool``) and never run. The runner and the task context a replayed
handler sees live with the worker SDK (``dagnats_trio.worker.replay_golden``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, final

import attrs
import trio

from dagnats_trio.protocol import (
    CommitAction,
    CommitRecord,
    JsonValue,
    Replay,
    Wait,
    to_json,
)

from .._defaults import MAX_RESTART_LIMIT
from ._calls import (
    Completion,
    ThenComplete,
    ThenContinue,
    ThenTool,
    ToolCall,
    ToolFn,
    next_of,
)
from ._replay import (
    RESTART_LIMIT_REASON,
    Entry,
    GroupMember,
    ModelAction,
    PlanKind,
    RecordedModel,
    RecordedTool,
    ReplayView,
    TaskIdentity,
    ToolAction,
    ToolResult,
    canonical_json,
    decide_group,
    decide_model,
    decide_tool,
    plan_claim,
)

#: Characters of a JSON value shown in one finding.
FINDING_VALUE_MAX_CHARS: Final = 120
#: Fields of a commit the handler decides (claim ids and nonces differ by construction).
COMPARED_COMMIT_FIELDS: Final = (
    "action",
    "state",
    "output",
    "wait",
    "error",
    "retriable",
    "pause_ms",
)


@final
@attrs.frozen
class Finding:
    """One difference between the recording and the new code, at a position of a delivery."""

    iteration: int
    attempt: int
    #: The call position (None for a finding about the commit).
    position: int | None
    kind: str
    recorded: str
    new: str

    def __str__(self) -> str:
        where = f"iteration {self.iteration} attempt {self.attempt}"
        if self.position is not None:
            where += f" position {self.position}"
        return f"{where}: {self.kind}: recorded {self.recorded}; new {self.new}"


@final
class ReplayStopped(Exception):
    """The new code went where the recording cannot answer: its delivery stops here."""


def short_json(value: Any) -> str:
    try:
        text = canonical_json(value)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > FINDING_VALUE_MAX_CHARS:
        return text[: FINDING_VALUE_MAX_CHARS - 1] + "…"
    return text


def describe_recorded(view: ReplayView, pos: int) -> str:
    rec = view.calls.get(pos)
    if isinstance(rec, RecordedModel):
        return f"model call -> {short_json(rec.response)}"
    if isinstance(rec, RecordedTool):
        i = rec.intent
        return f"tool {i.name!r} {i.replay.value} input {short_json(i.input)}"
    return "no call"


@final
@attrs.frozen
class GoldenDelivery:
    """A recorded delivery that wrote a commit: the view it claimed with, and that commit."""

    task: TaskIdentity
    view: ReplayView
    base_state: JsonValue
    commit: CommitRecord


def golden_deliveries(entries: Sequence[Entry], run_id: str, step_id: str) -> list[GoldenDelivery]:
    """Each delivery whose handler wrote a commit, in journal order. A commit written by the
    runtime (the restart limit's failure) or republished for another dispatch is not one."""
    out: list[GoldenDelivery] = []
    listed = list(entries)
    for idx, (_, rec) in enumerate(listed):
        if not isinstance(rec, CommitRecord) or rec.reason == RESTART_LIMIT_REASON:
            continue
        task = TaskIdentity(run_id, step_id, rec.iteration, rec.attempt, rec.nonce)
        plan = plan_claim(listed[:idx], task, MAX_RESTART_LIMIT, full=True)
        if plan.kind is not PlanKind.PROCEED or plan.view is None:
            continue
        base = plan.view.base
        state = base[1].state if base is not None and isinstance(base[1], CommitRecord) else None
        out.append(GoldenDelivery(task, plan.view, state, rec))
    return out


def commit_changes(recorded: CommitRecord, new: CommitRecord) -> list[tuple[str, str, str]]:
    """``(field, recorded, new)`` for each field of :data:`COMPARED_COMMIT_FIELDS` that differs."""
    out: list[tuple[str, str, str]] = []
    for name in COMPARED_COMMIT_FIELDS:
        a, b = getattr(recorded, name), getattr(new, name)
        ja = json.loads(to_json(a)) if a is not None else None
        jb = json.loads(to_json(b)) if b is not None else None
        if ja != jb:
            out.append((name, short_json(ja), short_json(jb)))
    return out


@final
class GoldenJournal:
    """The journal of one replayed delivery: calls answered from the records, never run. What
    the recording cannot answer is appended to ``findings`` and raised as :class:`ReplayStopped`.
    """

    def __init__(self, delivery: GoldenDelivery) -> None:
        self._d = delivery
        self._next_call = delivery.view.call_offset
        self._consumed: frozenset[int] = frozenset()
        self._state: JsonValue = delivery.base_state
        self.findings: list[Finding] = []
        self.committed: CommitRecord | None = None

    @property
    def run_id(self) -> str:
        return self._d.task.run_id

    @property
    def step_id(self) -> str:
        return self._d.task.step_id

    @property
    def iteration(self) -> int:
        return self._d.task.iteration

    @property
    def attempt(self) -> int:
        return self._d.task.attempt

    @property
    def next_call(self) -> int:
        return self._next_call

    def _find(self, position: int | None, kind: str, recorded: str, new: str) -> ReplayStopped:
        t = self._d.task
        self.findings.append(Finding(t.iteration, t.attempt, position, kind, recorded, new))
        return ReplayStopped(kind)

    async def load_state(self) -> JsonValue:
        await trio.lowlevel.checkpoint()
        return self._state

    def set_state(self, state: JsonValue) -> None:
        canonical_json(state)
        self._state = state

    async def model(
        self,
        fn: Callable[[], Awaitable[JsonValue]],
        *,
        then_tool: ThenTool | None = None,
        then_complete: ThenComplete | None = None,
    ) -> JsonValue:
        """The recorded response (``then_tool`` changes nothing on replay: the intent it would
        have paired is the next recorded call, answered by ``tool``); with ``then_complete``,
        a final answer then commits the completion it gives, as the live journal does."""
        await trio.lowlevel.checkpoint()
        pos = self._next_call
        decision = decide_model(self._d.view, pos)
        if decision.action is ModelAction.MISMATCH:
            raise self._find(
                pos, "ReplayMismatch", describe_recorded(self._d.view, pos), "model call"
            )
        if decision.action is ModelAction.RUN:
            raise self._find(pos, "new call", "no call", "model call")
        self._next_call = pos + 1
        if then_complete is not None:
            done = next_of(then_tool, then_complete, decision.response)
            if isinstance(done, Completion):
                self.set_state(done.state)
                await self.settle(CommitAction.COMPLETE, output=done.output)
        return decision.response

    async def tool(
        self,
        call: ToolCall,
        replay: Replay,
        fn: ToolFn,
        *,
        then_continue: ThenContinue | None = None,
    ) -> ToolResult:
        """The recorded result; with ``then_continue``, the iteration then commits a continue
        with the state it gives, as the live journal does."""
        result = await self._tool(call, replay)
        if then_continue is not None:
            self.set_state(then_continue(result))
            await self.settle(CommitAction.CONTINUE)
        return result

    async def _tool(self, call: ToolCall, replay: Replay) -> ToolResult:
        await trio.lowlevel.checkpoint()
        pos = self._next_call
        input_json = canonical_json(call.input)
        new = f"tool {call.name!r} {replay.value} input {short_json(call.input)}"
        decision, consumed = decide_tool(
            self._d.view, self._consumed, pos, call.name, input_json, replay
        )
        if decision.action is ToolAction.MISMATCH:
            raise self._find(pos, "ReplayMismatch", describe_recorded(self._d.view, pos), new)
        if decision.action is not ToolAction.REUSE or decision.result is None:
            raise self._find(pos, "new call", describe_recorded(self._d.view, pos), new)
        self._consumed = consumed
        self._next_call = pos + 1
        return decision.result

    async def tools(
        self, calls: Sequence[tuple[ToolCall, Replay, ToolFn]], *, cancel_on_error: bool = False
    ) -> list[ToolResult]:
        """A parallel group answered from the records: each member at its position."""
        await trio.lowlevel.checkpoint()
        first = self._next_call
        members = [GroupMember(c.name, canonical_json(c.input), r, c.call_id) for c, r, _ in calls]
        decisions, consumed = decide_group(self._d.view, self._consumed, first, members)
        for k, decision in enumerate(decisions):
            pos = first + k
            c, r, _ = calls[k]
            new = f"tool {c.name!r} {r.value} input {short_json(c.input)} (group member {k})"
            if decision.action is ToolAction.MISMATCH:
                raise self._find(pos, "ReplayMismatch", "", decision.reason)
            if decision.action is not ToolAction.REUSE or decision.result is None:
                raise self._find(pos, "new call", describe_recorded(self._d.view, pos), new)
        self._consumed = consumed
        self._next_call = first + len(calls)
        return [d.result for d in decisions if d.result is not None]

    async def tool_output(self, chunk: JsonValue) -> None:
        await trio.lowlevel.checkpoint()

    def placed_inputs(self) -> list[Any]:
        return list(self._d.view.placed)

    async def settle(
        self,
        action: CommitAction,
        *,
        output: JsonValue = None,
        wait: Wait | None = None,
        error: str | None = None,
        retriable: bool = True,
        reason: str | None = None,
        pause_ms: int | None = None,
    ) -> int:
        await trio.lowlevel.checkpoint()
        t = self._d.task
        self.committed = CommitRecord(
            t.iteration,
            t.attempt,
            "",
            t.nonce,
            action,
            state=self._state,
            output=output,
            wait=wait,
            error=error,
            retriable=retriable,
            reason=reason,
            pause_ms=pause_ms,
        )
        return 0

    def unmade_calls(self) -> list[Finding]:
        """Recorded calls at or after the next position: the new code did not make them."""
        t, view = self._d.task, self._d.view
        return [
            Finding(
                t.iteration,
                t.attempt,
                pos,
                "call not made",
                describe_recorded(view, pos),
                "no call",
            )
            for pos in sorted(p for p in view.calls if p >= self._next_call)
        ]
