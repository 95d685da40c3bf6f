"""Handlers a ``dagnats dev --worker _workers:handlers`` of the CLI tests runs (loaded from the
current directory, as a user's module would be)."""

from __future__ import annotations

from dagnats_trio.journal import NextTool, Replay, ToolCall
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


async def paired(tc: TaskContext) -> None:
    """Records stored together, each group one message: the model response with the intent
    it leads to, then a parallel group's two intents."""
    j = await tc.journal()

    async def double(call: ToolCall) -> JsonValue:
        return 2 * int(call.input) if isinstance(call.input, int) else None

    call = ToolCall("double", tc.input)
    await j.model(lambda: {"call": "double"}, then_tool=lambda _: NextTool(call, Replay.SAFE))
    first = await j.tool(call, Replay.SAFE, double)
    both = await j.tools([(ToolCall("double", first.output), Replay.SAFE, double),
                          (ToolCall("double", 1), Replay.SAFE, double)])  # fmt: skip
    await tc.complete([r.output for r in both])


async def corrupt(tc: TaskContext) -> None:
    """Writes a tool result with no intent: a journal ``journal check`` must reject."""
    j = await tc.journal()
    await j.append(ToolResultRecord(tc.iteration, tc.attempt, j.claim_id, call=7, output=1))
    await tc.complete("corrupt")


handlers: dict[str, Handler] = {
    "cli_echo": echo,
    "cli_journaled": journaled,
    "cli_corrupt": corrupt,
    "cli_paired": paired,
}
