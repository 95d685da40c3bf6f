"""The spec's "A handler": one turn of a tool-using agent, durable through the journal.

Each delivery of the ``agent`` task runs one turn: place the inputs that arrived, ask the model,
run the one tool it asks for (or take its final answer), save the history, continue. After an
answer the step waits (holding no worker) for a follow-up, or an hour.

Try it::

    dagnats dev --worker examples.agent_turn:handlers
    # register WORKFLOW, start a run with input "a question" (or {"text": ...}, or a history),
    # then POST steer or follow_up inputs to /runs/$RUN/steps/agent/inputs

The model here is a deterministic stand-in (a function of the history), and the one tool is a fake
search; swap in your own ``call_model`` and ``run_tool`` with :func:`make_agent_turn`.

The history is a list of messages, each a JSON object with a ``role``:
``user`` (the prompt or a placed input), ``assistant`` (the model's raw turn) or ``tool``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import attrs
import trio

from dagnats_trio.inputs import Mode, PlacedInput
from dagnats_trio.journal import Replay, ToolCall, ToolResult
from dagnats_trio.protocol import JsonValue
from dagnats_trio.worker import Delay, Handler, InputsQueued, TaskContext, UntilInput

TASK_TYPE: Final = "agent"
STEP_ID: Final = "agent"
WORKFLOW_NAME: Final = "agent-turn"
#: Generous: one iteration per turn, and an answered agent wakes at least hourly.
MAX_ITERATIONS: Final = 10_000
#: How long an answered agent waits for a follow-up before it takes another turn.
FOLLOW_UP_WAIT_HOURS: Final = 1.0

History = list[dict[str, Any]]
CallModel = Callable[[History], Awaitable[JsonValue]]
#: ``(name, input, key) -> output``; ``key`` is the call's idempotency key.
RunTool = Callable[[str, JsonValue, str], Awaitable[JsonValue]]


def workflow(name: str = WORKFLOW_NAME, task: str = TASK_TYPE) -> dict[str, JsonValue]:
    """One agent_loop step and no timeout: a step that waits for a person must not time out."""
    return {
        "name": name,
        "steps": [
            {
                "id": STEP_ID,
                "task": task,
                "type": "agent_loop",
                "agent_loop": {"max_iterations": MAX_ITERATIONS},
            }
        ],
    }


WORKFLOW: Final = workflow()


# --- the decoded model reply ------------------------------------------------------------------


@attrs.frozen
class Turn:
    """What the model asked for: a tool call (``tool``, ``input``) or, when ``done``, an answer."""

    done: bool
    tool: str = ""
    input: JsonValue = None
    text: str = ""


def decode_turn(raw: JsonValue) -> Turn:
    if not isinstance(raw, dict) or not isinstance(raw.get("done"), bool):
        raise ValueError(f"the model reply is not a turn: {raw!r}")
    if not raw["done"] and not isinstance(raw.get("tool"), str):
        raise ValueError(f"the model asked for a tool without naming it: {raw!r}")
    return Turn(
        done=raw["done"],
        tool=raw.get("tool", ""),
        input=raw.get("input"),
        text=str(raw.get("text", "")),
    )


# --- your own code: the model, the tools, the history -----------------------------------------


def text_of(content: JsonValue) -> str:
    text = content.get("text") if isinstance(content, dict) else None
    return text if isinstance(text, str) else str(content)


async def call_model(history: History) -> JsonValue:
    """A deterministic stand-in for a model: search for the newest user message, then answer it
    from what the search found."""
    await trio.lowlevel.checkpoint()
    last_user = max(i for i, m in enumerate(history) if m["role"] == "user")
    question = text_of(history[last_user]["content"])
    found = [m for m in history[last_user + 1 :] if m["role"] == "tool"]
    if not found:
        return {"done": False, "tool": "search", "input": {"query": question}}
    return {"done": True, "text": f"{question}: {found[-1]['output']}"}


async def run_tool(name: str, input: JsonValue, key: str) -> JsonValue:
    """The tools. ``key`` is the same on every delivery: pass it to systems that deduplicate."""
    await trio.lowlevel.checkpoint()
    if name == "search":
        return {"results": [f"top result for {text_of(input.get('query'))!r}"]}
    raise ValueError(f"no tool named {name!r}")  # recorded as the tool's error, not a crash


def initial_history(run_input: JsonValue) -> History:
    """The run's input as a history: a prompt (text, or ``{"text": ...}`` / ``{"task": ...}``),
    or a list of messages each with a ``role``. Anything else is refused with a clear message
    (:class:`ValueError`), before any model call."""
    if isinstance(run_input, str) and run_input.strip():
        return [{"role": "user", "content": {"text": run_input}}]
    if isinstance(run_input, dict):
        for field in ("text", "task"):
            value = run_input.get(field)
            if isinstance(value, str) and value.strip():
                return [{"role": "user", "content": {"text": value}}]
    messages = run_input if isinstance(run_input, list) else []
    if all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages) and any(
        isinstance(m, dict) and m.get("role") == "user" for m in messages
    ):
        return [dict(m) for m in messages if isinstance(m, dict)]
    raise ValueError(
        'the agent\'s input must be a prompt: a non-empty string, {"text": "..."}, or a '
        f'list of messages with a role, one of them "user"; got {run_input!r}'
    )


def append_inputs(history: History, placed: list[PlacedInput]) -> History:
    return [
        *history,
        *(
            {"role": "user", "content": p.content, "mode": p.mode.value, "id": p.request_id}
            for p in placed
        ),
    ]


def append_turn(history: History, raw: JsonValue, result: ToolResult | None) -> History:
    out = [*history, {"role": "assistant", "turn": raw}]
    if result is not None:
        out.append(
            {
                "role": "tool",
                "output": result.output,
                "error": result.error,
                "interrupted": result.interrupted,
            }
        )
    return out


def answered(history: History) -> bool:
    """Does the history end in a final answer?"""
    last = history[-1] if history else None
    return bool(last and last["role"] == "assistant" and last["turn"].get("done"))


# --- the handler --------------------------------------------------------------------------------


def make_agent_turn(call_model: CallModel = call_model, run_tool: RunTool = run_tool) -> Handler:
    """The handler, with the model and the tools it uses."""

    async def agent_turn(tc: TaskContext) -> None:
        j = await tc.journal()  # stale, fenced, committed or restart limit: already settled
        history: History | None = await tc.load_checkpoint()
        if history is None:
            try:
                history = initial_history(tc.input)
            except ValueError as err:
                await tc.fail_permanent(err)
                return
        placed = await tc.place_inputs(Mode.STEER)
        # A turn after a final answer was woken by a follow-up, and the follow-up is what this
        # turn answers.
        if answered(history):
            placed += await tc.place_inputs(Mode.FOLLOW_UP)
        history = append_inputs(history, placed)

        raw = await j.model(lambda: call_model(history))
        try:
            turn = decode_turn(raw)
        except ValueError as err:
            await tc.fail_permanent(err)
            return
        if not turn.done:
            replay = Replay.SAFE if turn.tool == "search" else Replay.UNSAFE
            result = await j.tool(
                ToolCall(turn.tool, turn.input),
                replay,
                lambda call: run_tool(call.name, call.input, call.key),
            )
            await tc.checkpoint(append_turn(history, raw, result))
            await tc.continue_()
            return

        await tc.checkpoint(append_turn(history, raw, None))
        try:
            await tc.continue_(wait=(UntilInput(), Delay(hours=FOLLOW_UP_WAIT_HOURS)))
        except InputsQueued:
            await tc.continue_()  # the next turn places what was queued

    return agent_turn


handlers: Final[dict[str, Handler]] = {TASK_TYPE: make_agent_turn()}
