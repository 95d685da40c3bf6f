"""The journal handle: what a handler calls after its claim (``await tc.journal()``).

Model and tool calls, a parallel tool group, appends and the commit, each decided by the pure
replay rules of ``_replay`` and written through the claim's :class:`FencedWriter`. Opening (the
claim protocol) is ``_open``; running tool functions is ``_tool_run``; reads are ``_reads``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

import attrs
import trio

from dagnats_trio._seams import Seam
from dagnats_trio.protocol import (
    CommitAction,
    CommitRecord,
    InputPlacedRecord,
    JournalRecord,
    JsonValue,
    ModelRecord,
    Replay,
    Wait,
)
from dagnats_trio.transport import Transport

from ._calls import (
    CallGuard,
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
from ._committed import OnCommitted, notify_committed
from ._errors import CallLimitExceeded, ReplayMismatch
from ._events import publish_lifecycle
from ._fencing import FencedWriter
from ._group import check_group_size, run_decided_group
from ._holder import DeliveryState, Settlement
from ._pairs import Pairing, intent_record, plan_response
from ._reads import load_commit_state
from ._replay import (
    MAX_CALLS_PER_ITERATION,
    GroupMember,
    ModelAction,
    ReplayView,
    TaskIdentity,
    ToolAction,
    ToolResult,
    decide_group,
    decide_model,
    decide_tool,
    event_for_commit,
)
from ._tool_run import ToolRunner

_UNSET: Any = object()


@final
class Journal:
    """The journal of one task delivery, after its claim. Single owner (one task at a time)."""

    def __init__(
        self,
        *,
        transport: Transport,
        task: TaskIdentity,
        holder: DeliveryState,
        writer: FencedWriter,
        view: ReplayView,
        on_committed: OnCommitted | None,
    ) -> None:
        self._transport = transport
        self._task = task
        self._holder = holder
        self._writer = writer
        self._claim_id = writer.claim_id
        self._view = view
        self._on_committed = on_committed
        self._tools = ToolRunner(task=task, holder=holder, writer=writer)
        self._guard = CallGuard("another task is using this journal handle")
        self._next_call = view.call_offset
        self._consumed: frozenset[int] = frozenset()
        self._placed: list[InputPlacedRecord] = list(view.placed)
        self._pending_state: JsonValue = _UNSET
        self._base_state: JsonValue = _UNSET
        if view.base is not None and isinstance(view.base[1], CommitRecord):
            self._base_state = view.base[1].state
        elif task.journal_seq is None:
            self._base_state = None
        self._closed = False
        self._pairs = Pairing(writer, self._tools, holder)

    # --- identity (the inputs service's JournalWriter protocol) ------------------------------

    @property
    def run_id(self) -> str:
        return self._task.run_id

    @property
    def step_id(self) -> str:
        return self._task.step_id

    @property
    def iteration(self) -> int:
        return self._task.iteration

    @property
    def attempt(self) -> int:
        return self._task.attempt

    @property
    def claim_id(self) -> str:
        return self._claim_id

    @property
    def last_seq(self) -> int:
        """The last sequence this writer saw (its claim, then each of its appends)."""
        return self._writer.last_seq

    @property
    def next_call(self) -> int:
        """The position the next model or tool call takes."""
        return self._next_call

    def placed_inputs(self) -> list[InputPlacedRecord]:
        """input.placed records of this iteration since its last pause (all deliveries and
        attempts), then the ones this delivery appended; each request id once."""
        return list(self._placed)

    # --- state --------------------------------------------------------------------------------

    async def load_state(self) -> JsonValue:
        """The state of record: the last ``set_state`` of this delivery, else the state of the
        commit this iteration started from (one get by sequence at most, then cached)."""
        if self._pending_state is not _UNSET or self._base_state is not _UNSET:
            await trio.lowlevel.checkpoint()  # known: no read, so no other scheduler pass
        return await self._state_of_record()

    async def _state_of_record(self) -> JsonValue:
        """:meth:`load_state` without a checkpoint: the commit's append right after yields."""
        if self._pending_state is not _UNSET:
            return self._pending_state
        if self._base_state is _UNSET:
            self._base_state = await load_commit_state(self._transport, self._task)
        return self._base_state

    def set_state(self, state: JsonValue) -> None:
        """The state the next commit carries (no size cap: the journal is the state of record)."""
        require_json_value("checkpoint state", state)
        self._pending_state = state

    # --- appends ------------------------------------------------------------------------------

    async def append(self, record: JournalRecord) -> int:
        """Fenced append of a record of this writer (raises :class:`Fenced` on a lost tail).

        Guarded like the calls: an append from a second task while a call runs would take a
        position out of the order replay relies on. ``place_inputs`` appends through here, so
        each of its records is guarded too.
        """
        with self._guard:
            return await self._append_checked(record)

    async def _append_checked(self, record: JournalRecord) -> int:
        t = self._task
        if (record.iteration, record.attempt) != (t.iteration, t.attempt) or (
            record.claim_id != self._claim_id
        ):
            raise ValueError(
                "a record appended through this handle must carry its iteration, attempt and "
                f"claim_id ({t.iteration}, {t.attempt}, {self._claim_id!r})"
            )
        self._check_open()
        seq = await self._writer.append(record)
        if isinstance(record, InputPlacedRecord) and all(
            p.request_id != record.request_id for p in self._placed
        ):
            self._placed.append(record)
        return seq

    def _check_open(self) -> None:
        self._holder.check_writable()
        if self._closed:
            raise RuntimeError("this iteration is committed: the journal handle is closed")

    def _position(self) -> int:
        pos = self._next_call
        if pos >= MAX_CALLS_PER_ITERATION:
            raise CallLimitExceeded(
                f"an iteration may make at most {MAX_CALLS_PER_ITERATION} model and tool calls; "
                "a step that needs more has outgrown a per-step journal"
            )
        return pos

    # --- calls --------------------------------------------------------------------------------

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
                await self._holder.seam(Seam.AFTER_TOOL_INTENT)
            result = await self._tools.run(pos, attrs.evolve(call, key=intent.key), fn, replay)
            return await self._then(pos, result, then_continue, write=True)

    async def _then(
        self, pos: int, result: ToolResult, then_continue: ThenContinue | None, *, write: bool
    ) -> ToolResult:
        return await self._pairs.then(
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

    # --- commit -------------------------------------------------------------------------------

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
        """Commit the iteration (action, state, output, wait, ...), then publish the lifecycle
        event with the commit's sequence as ``journal_seq``. Returns that sequence."""
        with self._guard:
            self._check_open()
            require_json_value("step output", output)
            return await self._settle(
                action,
                output=output,
                wait=wait,
                error=error,
                retriable=retriable,
                reason=reason,
                pause_ms=pause_ms,
            )

    async def _settle(
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
        t = self._task
        self._pairs.hold_unrun()
        state = await self._state_of_record()
        commit = CommitRecord(
            t.iteration,
            t.attempt,
            self._claim_id,
            t.nonce,
            action,
            state=state,
            output=output,
            wait=wait,
            error=error,
            retriable=retriable,
            reason=reason,
            pause_ms=pause_ms,
        )
        seq = await self._writer.append(commit)
        self._closed = True
        if self._pairs.result_held:
            await self._holder.seam(Seam.AFTER_TOOL_RESULT)  # stored with the commit
        await self._holder.seam(Seam.AFTER_COMMIT)
        if action is not CommitAction.FAIL:
            ids = tuple(p.request_id for p in self._placed)
            await notify_committed(self._on_committed, t, commit, seq, ids)
        await publish_lifecycle(self._transport, event_for_commit(commit, t, seq))
        self._holder.settlement = Settlement.ACK
        await self._holder.seam(Seam.AFTER_LIFECYCLE_EVENT)
        return seq
