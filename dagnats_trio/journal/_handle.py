"""The journal handle: what a handler calls after its claim (``await tc.journal()``).

Model and tool calls and a parallel tool group, each decided by the pure replay rules of
``_replay`` and written through the claim's :class:`FencedWriter`. The handle's identity, state,
appends and commit are ``_handle_state``; opening (the claim protocol) is ``_open``; running
tool functions is ``_tool_run``; reads are ``_reads``.
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import Any, final

import trio

from dagnats_trio._seams import Seam, current_hook
from dagnats_trio.protocol import (
    CommitAction,
    JsonValue,
    ModelRecord,
    Replay,
)

from ._calls import (
    Completion,
    GroupCall,
    ModelFn,
    ThenComplete,
    ThenContinue,
    ThenTool,
    ToolCall,
    ToolFn,
    call_maybe_async,
    check_group_call,
    check_tool_args,
    next_of,
    require_json,
    require_json_value,
)
from ._errors import CallLimitExceeded, ReplayMismatch
from ._group import check_group_size, run_decided_group
from ._handle_state import HandleState
from ._pairs import intent_record, plan_response
from ._replay import (
    MAX_CALLS_PER_ITERATION,
    GroupMember,
    ModelAction,
    ToolAction,
    ToolResult,
    decide_group,
    decide_model,
    decide_tool,
)


@final
class Journal(HandleState):
    """The journal of one task delivery, after its claim. Single owner (one task at a time)."""

    # --- calls --------------------------------------------------------------------------------

    def _position(self) -> int:
        pos = self._next_call
        if pos >= MAX_CALLS_PER_ITERATION:
            raise CallLimitExceeded(
                f"an iteration may make at most {MAX_CALLS_PER_ITERATION} model and tool calls; "
                "a step that needs more has outgrown a per-step journal"
            )
        return pos

    async def model(
        self,
        fn: ModelFn,
        *,
        then_tool: ThenTool | None = None,
        then_complete: ThenComplete | None = None,
    ) -> JsonValue:
        """The response this attempt recorded at this position, else a new request, recorded.

        A failed request records nothing and does not use up the position. ``then_tool`` (see
        ``_pairs``) stores a new response with the intent of the call it leads to, one message.
        ``then_complete`` (asked when ``then_tool`` names no call) ends the step on a final
        answer: the response and a complete commit with the :class:`Completion`'s output and
        state, one message, then the event (as ``tc.complete``; the handle is closed after).
        """
        with self._guard:
            self._check_open()
            self._pairs.check_none_planned("model")
            pos = self._position()
            decision = decide_model(self._view, pos)
            if decision.action is ModelAction.MISMATCH:
                raise ReplayMismatch(decision.reason)
            if decision.action is ModelAction.REUSE:
                # Replay does no I/O; without this a replay of many calls would never yield.
                await trio.lowlevel.checkpoint()
                self._next_call = pos + 1
                done = (
                    next_of(then_tool, then_complete, decision.response) if then_complete else None
                )
                if isinstance(done, Completion):  # its commit alone: the response is stored
                    self.set_state(done.state)
                    await self._settle(CommitAction.COMPLETE, output=done.output)
                return decision.response
            await self._writer.check_tail()
            response = await call_maybe_async(fn)
            require_json_value("model response", response)
            t = self._task
            rec = ModelRecord(t.iteration, t.attempt, self._claim_id, pos, response)
            await self._pairs.store_response(
                rec,
                lambda: plan_response(self._view, self._consumed, t, rec, then_tool, then_complete),
                stored=lambda: self._took(pos),
                set_state=self.set_state,
                complete=lambda output: self._settle(CommitAction.COMPLETE, output=output),
            )
            return response

    def _took(self, pos: int) -> None:
        """The call at ``pos`` is recorded: the next call takes the position after it."""
        self._next_call = pos + 1

    async def tool(
        self,
        call: ToolCall,
        replay: Replay,
        fn: ToolFn,
        *,
        then_continue: ThenContinue | None = None,
    ) -> ToolResult:
        """Run a tool call durably: intent before ``fn``, result after; see ``decide_tool``.

        The tool's own exception is its result's ``error``. Output that is not JSON is recorded
        as an error result and raised as :class:`ToolOutputNotJson` (on replay too).
        ``then_continue`` (see ``_pairs``) ends the iteration: the result and a continue commit
        carrying the state it gives, one message, then the event (as ``tc.continue_()``).
        """
        check_tool_args(call, replay)
        with self._guard:
            self._check_open()
            planned = self._pairs.take_same(call, replay, self._next_call)
            if planned is not None:
                # Decided (RUN) and stored with the model response: it only runs now.
                self._next_call = planned.call + 1
                result = await self._tools.run(planned.call, call.with_key(planned.key), fn, replay)
                return await self._then(planned.call, result, then_continue, write=True)
            input_json = self._pairs.input_json(call)
            pos = self._position()
            decision, consumed = decide_tool(
                self._view, self._consumed, pos, call.name, input_json, replay
            )
            if decision.action is ToolAction.MISMATCH:
                raise ReplayMismatch(decision.reason)
            intent = intent_record(self._task, self._claim_id, pos, call, replay)
            paired = self._pairs.take(intent, decision.action)
            if decision.action is ToolAction.REUSE:
                await trio.lowlevel.checkpoint()  # as in model(): a reuse does no I/O
            self._consumed = consumed
            self._next_call = pos + 1
            if decision.action is ToolAction.REUSE:
                assert decision.result is not None
                return await self._then(pos, decision.result, then_continue, write=False)
            if decision.action is ToolAction.RECORD:
                assert decision.result is not None
                if decision.write_intent:
                    await self._writer.append(intent)
                return await self._then(pos, decision.result, then_continue, write=True)
            if decision.action is ToolAction.RUN and not paired:
                await self._writer.append(intent)
                if current_hook() is not None:
                    await self._holder.seam(Seam.AFTER_TOOL_INTENT)
            result = await self._tools.run(pos, call.with_key(intent.key), fn, replay)
            return await self._then(pos, result, then_continue, write=True)

    def _then(
        self, pos: int, result: ToolResult, then_continue: ThenContinue | None, *, write: bool
    ) -> Coroutine[Any, Any, ToolResult]:
        """:meth:`Pairing.then`'s coroutine (awaited at once), with no frame of this method in
        between: one frame fewer passed through when the result's append wakes the call."""
        return self._pairs.then(
            pos,
            result,
            then_continue,
            write=write,
            set_state=self.set_state,
            commit=lambda: self._settle(CommitAction.CONTINUE),
        )

    async def tools(
        self, calls: Sequence[GroupCall], *, cancel_on_error: bool = False
    ) -> list[ToolResult]:
        """Run a group of tool calls at once, each still at most once (the model's parallel tool
        calls). Returns their results in the order of ``calls``.

        The group takes ``len(calls)`` consecutive positions. Every intent is recorded before
        any function starts, all in one message fenced on the tail (an atomic batch when too big
        for one; stored whole or not at all: a crash before it is stored leaves no intent of the
        group), so a group holds at most
        :data:`MAX_GROUP_CALLS` calls (ValueError, writing nothing, past it); then the functions
        run in a nursery, each result recorded as it finishes, in completion order. Replay
        matches each member by its position in the group and its name and input (and the
        model's call id when both have one): see ``decide_group``. With ``cancel_on_error``, the
        first member whose function raises cancels the ones still running; each is recorded as
        an interrupted result naming that member in ``cancelled_by``. A member whose output is not
        JSON gets an error result (the group does not raise for it). The handle's guard is held
        for the whole group; members write through it.
        """
        members = [check_group_call(c) for c in calls]
        check_group_size(len(members))
        with self._guard:
            self._check_open()
            self._pairs.check_none_planned("tools")
            n = len(members)
            first = self._position()
            if first + n > MAX_CALLS_PER_ITERATION:
                raise CallLimitExceeded(
                    f"a group of {n} calls from position {first} passes the limit of "
                    f"{MAX_CALLS_PER_ITERATION} calls per iteration"
                )
            rules = [
                GroupMember(c.name, require_json("tool input", c.input), r, c.call_id)
                for c, r, _ in members
            ]
            decisions, consumed = decide_group(self._view, self._consumed, first, rules)
            if decisions and decisions[-1].action is ToolAction.MISMATCH:
                raise ReplayMismatch(decisions[-1].reason)
            self._consumed = consumed
            self._next_call = first + n
            return await run_decided_group(
                task=self._task,
                writer=self._writer,
                holder=self._holder,
                tools=self._tools,
                first=first,
                members=members,
                decisions=decisions,
                cancel_on_error=cancel_on_error,
            )

    async def tool_output(self, chunk: JsonValue) -> None:
        """Record partial output of the tool function now running (a ``tool.output`` record);
        an interrupted result carries it to the model.

        Not guarded, on purpose: it is only valid while a tool function runs, and that function
        runs inside :meth:`tool`, which holds the guard. The chunks carry the running call's
        position, not one of their own, so their order is not part of replay; the writer's
        lock still writes them one at a time, in the order they come.
        """
        await self._tools.output(chunk)
