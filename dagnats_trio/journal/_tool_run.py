"""Running tool functions for a journal: one call or a group at once, and recording results.

What a tool call does once the replay rules have decided it must run: tell the tool-start
observer, run the function with its position known to ``tool_output``, turn its exception or
non-JSON output into a result, and append that result. The decisions stay in the handle.
"""

from __future__ import annotations

import contextvars
from typing import final

import trio

from dagnats_trio._seams import Seam, ToolStart, current_hook, tool_start_observer
from dagnats_trio.protocol import JsonValue, Replay, ToolOutputRecord, ToolResultRecord

from ._calls import (
    GroupCall,
    ToolCall,
    ToolFn,
    call_maybe_async,
    group_leaf,
    require_json_value,
    tool_result,
)
from ._errors import HolderKilled, JournalSettled
from ._fencing import FencedWriter
from ._holder import DeliveryState
from ._replay import TaskIdentity, ToolResult

#: The runner and call position of the tool function running in this task (group members run
#: in tasks of their own, so ``tool_output`` finds its call without a shared attribute).
_RUNNING: contextvars.ContextVar[tuple[object, int] | None] = contextvars.ContextVar(
    "dagnats_running_tool", default=None
)


@final
class ToolRunner:
    """Runs the tool functions of one journal handle and records what they return."""

    def __init__(self, *, task: TaskIdentity, holder: DeliveryState, writer: FencedWriter) -> None:
        self._task = task
        self._holder = holder
        self._writer = writer
        self._chunks: dict[int, list[JsonValue]] = {}

    async def run(self, pos: int, call: ToolCall, fn: ToolFn, replay: Replay) -> ToolResult:
        """Run ``fn(call)`` at ``pos``: its output, or its exception as the result's error."""
        self._holder.check_writable()
        observer = tool_start_observer()
        if observer is not None:
            t = self._task
            observer(
                ToolStart(
                    t.run_id,
                    t.step_id,
                    t.iteration,
                    t.attempt,
                    pos,
                    call.name,
                    replay is Replay.UNSAFE,
                    self._holder.worker_id,
                )
            )
        token = _RUNNING.set((self, pos))
        try:
            output = await call_maybe_async(fn, call)
        except (JournalSettled, HolderKilled):
            raise
        except Exception as exc:
            result = ToolResult(error=f"{type(exc).__name__}: {exc}")
        else:
            result = tool_result(output)
        finally:
            _RUNNING.reset(token)
        # The tool has run and its effect has happened, but its result is not recorded: the
        # crash a successor can only see as an intent without a result.
        if current_hook() is not None:
            await self._holder.seam(Seam.INSIDE_TOOL)
        return result

    def result_record(self, pos: int, result: ToolResult) -> ToolResultRecord:
        """The ``tool.result`` record of the call at ``pos``."""
        t = self._task
        return ToolResultRecord(
            t.iteration,
            t.attempt,
            self._writer.claim_id,
            pos,
            output=result.output,
            error=result.error,
            interrupted=result.interrupted,
            partial=list(result.partial),
            cancelled_by=result.cancelled_by,
        )

    async def record_result(self, pos: int, result: ToolResult) -> None:
        """Append the ``tool.result`` record of the call at ``pos``."""
        await self._writer.append(self.result_record(pos, result))
        if current_hook() is not None:
            await self._holder.seam(Seam.AFTER_TOOL_RESULT)

    async def output(self, chunk: JsonValue) -> None:
        """Append a ``tool.output`` chunk for the tool function running in this task."""
        running = _RUNNING.get()
        if running is None or running[0] is not self:
            raise RuntimeError("tool_output is only valid while a tool function runs")
        pos = running[1]
        require_json_value("tool output chunk", chunk)
        t = self._task
        await self._writer.append(
            ToolOutputRecord(t.iteration, t.attempt, self._writer.claim_id, pos, chunk)
        )
        self._chunks.setdefault(pos, []).append(chunk)

    async def run_group(
        self,
        first: int,
        members: list[GroupCall],
        keys: list[str],
        to_run: list[int],
        results: list[ToolResult | None],
        cancel_on_error: bool,
    ) -> None:
        """Run the members ``to_run`` at once, each result recorded as it finishes; with
        ``cancel_on_error`` the first failure cancels the others (interrupted results)."""
        scopes = {k: trio.CancelScope() for k in to_run}
        failed: list[int] = []

        async def member(k: int) -> None:
            call, replay, fn = members[k]
            pos = first + k
            result: ToolResult | None = None
            with scopes[k]:
                result = await self.run(pos, call.with_key(keys[k]), fn, replay)
            if result is None:  # cancelled because another member failed
                cause = failed[0]
                result = ToolResult(
                    error=f"cancelled: call {cause} of the group failed",
                    interrupted=True,
                    partial=tuple(self._chunks.get(pos, ())),
                    cancelled_by=cause,
                )
            await self.record_result(pos, result)
            results[k] = result
            first_failure = result.error is not None and result.cancelled_by is None and not failed
            if cancel_on_error and first_failure:
                failed.append(pos)
                for other, scope in scopes.items():
                    if other != k and results[other] is None:
                        scope.cancel()

        try:
            async with trio.open_nursery() as nursery:
                for k in to_run:
                    nursery.start_soon(member, k)
        except BaseExceptionGroup as group:
            raise group_leaf(group) from None
