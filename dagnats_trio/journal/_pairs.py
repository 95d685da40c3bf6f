"""Records stored in pairs, as one message: what the handle needs to pair them.

A model response is stored with the intent of the tool call it leads to (``then_tool``), so
the two cost one durable write; a final answer is stored with the complete commit that ends
the step (``then_complete``); a tool's result is stored with the continue commit that ends
its iteration (``then_continue``). A response leads to a tool call or to the step's end, never
both: ``then_complete`` is asked only when ``then_tool`` names no call. Each pair is made
without handler code between the two records (the ``then_`` functions are plain functions the
journal calls), so a crash leaves the journal exactly as it would have without the pairing:
before the message, nothing of it; after, both (``FencedWriter`` stores a pair as one message,
or an atomic batch when too big). The replay rules see the same records in the same order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import final

from dagnats_trio._seams import Seam, current_hook
from dagnats_trio.protocol import JsonValue, ModelRecord, Replay, ToolIntentRecord

from ._calls import (
    Completion,
    NextTool,
    ThenComplete,
    ThenContinue,
    ThenTool,
    ToolCall,
    check_tool_args,
    next_of,
    not_json,
    raise_if_not_json,
    require_json,
)
from ._errors import ReplayMismatch
from ._fencing import FencedWriter
from ._holder import DeliveryState
from ._replay import (
    MAX_CALLS_PER_ITERATION,
    ReplayView,
    TaskIdentity,
    ToolAction,
    ToolResult,
    call_key,
    decide_tool,
)
from ._tool_run import ToolRunner

#: The error of a tool call whose intent was stored with the model response and that the
#: handler never ran before the iteration ended.
UNRUN_ERROR = "not run: the handler ended the iteration without calling tool() for this intent"


#: What a new model response is stored with: the intent of the call it leads to (and that
#: input's canonical JSON), the completion it leads to, or nothing (the response alone).
ResponsePlan = tuple[ToolIntentRecord, str] | Completion | None


def plan_response(
    view: ReplayView,
    consumed: frozenset[int],
    task: TaskIdentity,
    record: ModelRecord,
    then_tool: ThenTool | None,
    then_complete: ThenComplete | None,
) -> ResponsePlan:
    """What the new response ``record`` is stored with (see :func:`~._calls.next_of`): for a
    call it leads to, the intent :func:`plan_intent` plans at the next position; for a final
    answer, the :class:`Completion`. Raises what a ``then_`` function raised (the response
    is then stored alone)."""
    nxt = next_of(then_tool, then_complete, record.response)
    if isinstance(nxt, NextTool):
        return plan_intent(view, consumed, task, record.claim_id, record.call + 1, nxt)
    return nxt


def plan_intent(
    view: ReplayView,
    consumed: frozenset[int],
    task: TaskIdentity,
    claim_id: str,
    pos: int,
    nxt: NextTool,
) -> tuple[ToolIntentRecord, str] | None:
    """The intent to store with a new model response: the call ``nxt`` names (what
    ``then_tool`` gave, see ``_calls.next_of``), at ``pos``, when the replay rules would run it
    (a call they would answer from the journal, an honoured start of an earlier attempt say, is
    left to ``tool`` as before), with its input's canonical JSON (``tool`` reuses it for the
    same input: see :meth:`Pairing.input_json`); else None."""
    check_tool_args(nxt.call, nxt.replay)
    if pos >= MAX_CALLS_PER_ITERATION:
        return None  # tool() raises CallLimitExceeded, as without the pairing
    input_json = require_json("tool input", nxt.call.input)
    decision, _ = decide_tool(view, consumed, pos, nxt.call.name, input_json, nxt.replay)
    if decision.action is not ToolAction.RUN:
        return None
    return intent_record(task, claim_id, pos, nxt.call, nxt.replay), input_json


def intent_record(
    task: TaskIdentity,
    claim_id: str,
    pos: int,
    call: ToolCall,
    replay: Replay,
    *,
    group: int | None = None,
    group_size: int | None = None,
) -> ToolIntentRecord:
    """The ``tool.intent`` record of ``call`` at ``pos`` (the one shape every path writes)."""
    return ToolIntentRecord(
        task.iteration,
        task.attempt,
        claim_id,
        pos,
        call.name,
        call.input,
        replay,
        call_key(task.run_id, task.step_id, task.iteration, pos),
        group=group,
        group_size=group_size,
        call_id=call.call_id,
    )


def unrun_result() -> ToolResult:
    """The result recorded, with the commit, for a paired intent the handler never ran."""
    return ToolResult(error=UNRUN_ERROR, interrupted=True)


@final
class Pairing:
    """The pairs of one journal handle: a new model response stored with what it leads to, the
    intent stored with the last one and not yet run, and whether a tool result waits to be
    stored with the commit."""

    def __init__(self, writer: FencedWriter, tools: ToolRunner, holder: DeliveryState) -> None:
        self._writer = writer
        self._tools = tools
        self._holder = holder
        self.planned: ToolIntentRecord | None = None
        #: The canonical JSON of ``planned``'s input, spelled once by :func:`plan_intent`.
        self.planned_input_json: str | None = None
        #: A result held for the commit's message: its seam is reached once the commit is stored.
        self.result_held = False

    def check_none_planned(self, what: str) -> None:
        if self.planned is not None:
            raise ReplayMismatch(
                f"the intent of {self.planned.name!r} was recorded at position "
                f"{self.planned.call} with the model response; run it with tool() before "
                f"{what}()"
            )

    async def store_response(
        self,
        record: ModelRecord,
        plan: Callable[[], ResponsePlan],
        *,
        stored: Callable[[], None],
        set_state: Callable[[JsonValue], None],
        complete: Callable[[JsonValue], Awaitable[int]],
    ) -> None:
        """Store a new model response ``record`` with what ``plan`` says it leads to: the
        intent of a call (which ``tool`` then runs without writing it again), the complete
        commit of a :class:`Completion` (its state set, then ``complete`` commits its output
        and publishes the event), or nothing. ``stored`` is told once the response is stored.
        A plan that raises, or a completion whose state is not JSON: the response is stored
        alone and the error raised."""
        try:
            planned = plan()
            if isinstance(planned, Completion):
                set_state(planned.state)
        except BaseException:
            await self._writer.append(record)  # the response is kept whatever the plan did
            stored()
            raise
        if planned is None:
            await self._writer.append(record)
            stored()
            return
        self._writer.hold(record)  # stored with what it leads to: one message
        if isinstance(planned, Completion):
            await complete(planned.output)
            stored()
            return
        intent, input_json = planned
        await self._writer.append(intent)
        stored()
        self.planned, self.planned_input_json = intent, input_json
        if current_hook() is not None:
            await self._holder.seam(Seam.AFTER_TOOL_INTENT)

    def take_same(self, call: ToolCall, replay: Replay, pos: int) -> ToolIntentRecord | None:
        """The intent stored with the model response, taken, when ``call`` at ``pos`` is that
        very call: the same name, replay declaration and call id, and the very input object
        the intent holds (the record stored with the response holds that object too). That
        call was decided (RUN, nothing consumed) and its intent built by :func:`plan_intent` at
        this position, and no call can run in between (``check_none_planned``), so ``tool``
        runs it without deciding or building it again. None otherwise (``tool`` decides, and
        :meth:`take` compares)."""
        planned = self.planned
        if (
            planned is None
            or planned.call != pos
            or call.input is not planned.input
            or call.name != planned.name
            or replay is not planned.replay
            or call.call_id != planned.call_id
        ):
            return None
        self.planned = self.planned_input_json = None
        return planned

    def input_json(self, call: ToolCall) -> str:
        """The canonical JSON of ``call``'s input, with :func:`require_json`'s error: the text
        :func:`plan_intent` spelled when ``call`` hands on the very input object the planned
        intent holds (the record stored with the model response holds that object too), else
        spelled now."""
        planned, text = self.planned, self.planned_input_json
        if planned is not None and text is not None and call.input is planned.input:
            return text
        return require_json("tool input", call.input)

    def take(self, intent: ToolIntentRecord, action: ToolAction) -> bool:
        """True when ``intent`` was stored with the model response (it runs without being
        written again); :class:`ReplayMismatch`, writing nothing, when another call was."""
        planned = self.planned
        if planned is None:
            return False
        if action is not ToolAction.RUN or planned != intent:
            raise ReplayMismatch(
                f"the intent recorded with the model response at position {planned.call} is "
                f"{planned.name!r} with another input or declaration; this call is "
                f"{intent.name!r} at position {intent.call}"
            )
        self.planned = self.planned_input_json = None
        return True

    def hold_unrun(self) -> None:
        """Before a commit: a paired intent the handler never ran is answered, interrupted, in
        the commit's message, so no committed attempt leaves an intent open."""
        if self.planned is not None:
            self._writer.hold(self._tools.result_record(self.planned.call, unrun_result()))
            self.planned = self.planned_input_json = None

    async def then(
        self,
        pos: int,
        result: ToolResult,
        then_continue: ThenContinue | None,
        *,
        write: bool,
        set_state: Callable[[JsonValue], None],
        commit: Callable[[], Awaitable[int]],
    ) -> ToolResult:
        """Record ``result`` (when ``write``) and, with ``then_continue``, commit a continue in
        the same message. Output that is not JSON, or a ``then_continue`` that raises, gets the
        result stored alone and no commit: the handler decides what follows."""
        if then_continue is None or not_json(result):
            if write:
                await self._tools.record_result(pos, result)
            return raise_if_not_json(result)
        try:
            set_state(then_continue(result))
        except BaseException:
            if write:
                await self._tools.record_result(pos, result)
            raise
        if write:
            self._writer.hold(self._tools.result_record(pos, result))
            self.result_held = True
        await commit()
        return result
