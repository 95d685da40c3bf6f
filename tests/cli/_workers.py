"""Handlers a ``dagnats dev --worker _workers:handlers`` of the CLI tests runs (loaded from the
current directory, as a user's module would be)."""

from __future__ import annotations

from dagnats_trio.journal import Replay, ToolCall
from dagnats_trio.protocol import JsonValue, ToolResultRecord
from dagnats_trio.worker import Handler, TaskContext


async def echo(tc: TaskContext) -> None:
    await tc.complete({"echo": tc.input})


async def journaled(tc: TaskContext) -> None:
    """One journal iteration with a safe tool call."""
    j = await tc.journal()

    async def double(call: ToolCall) -> JsonValue:
        return 2 * int(call.input) if isinstance(call.input, int) else None

    result = await j.tool(ToolCall("double", tc.input), Replay.SAFE, double)
    await tc.complete(result.output)


async def corrupt(tc: TaskContext) -> None:
    """Writes a tool result with no intent: a journal ``journal check`` must reject."""
    j = await tc.journal()
    await j.append(ToolResultRecord(tc.iteration, tc.attempt, j.claim_id, call=7, output=1))
    await tc.complete("corrupt")


handlers: dict[str, Handler] = {
    "cli_echo": echo,
    "cli_journaled": journaled,
    "cli_corrupt": corrupt,
}
