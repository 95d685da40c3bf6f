"""The demo's scripted tool-using agent: the spec's example handler, in Trio.

One model call per turn (a :class:`ScriptedModel`), then one tool call or a final answer. Tools
count their starts and effects in :class:`Counters`, outside the journal, so the demo can show
that the unsafe tool started once even though its worker died in the middle of it.
"""

from __future__ import annotations

from typing import Any, Final

import attrs
import trio

from ...inputs import Mode
from ...journal import Replay, ScriptedModel, ToolCall
from ...protocol import JsonValue
from ...worker import Delay, Handler, InputsQueued, TaskContext, UntilInput

TASK_TYPE: Final = "demo_agent"
STEP_ID: Final = "agent"
WORKFLOW_NAME: Final = "demo-agent"
SAFE_TOOLS: Final = frozenset({"search", "lookup"})
UNSAFE_TOOL: Final = "send_message"
#: The longest an answered agent waits for a follow-up before it gives up and finishes.
FOLLOW_UP_WAIT_H: Final = 1.0

#: What the model "says", turn by turn: a safe tool, the unsafe one, a safe one, the answer,
#: and the answer to the follow-up.
SCRIPT: Final[tuple[dict[str, JsonValue], ...]] = (
    {"tool": "search", "input": {"query": "flights Lisbon to Porto, Friday"}},
    {"tool": UNSAFE_TOOL, "input": {"to": "alice", "text": "Booking TP1944 on Friday."}},
    {"tool": "lookup", "input": {"flight": "TP1944"}},
    {"answer": "Booked TP1944 (Fri 09:40, aisle seat) and told Alice."},
    {"answer": "The return is TP1951, Sunday 18:10; also an aisle seat."},
)

TOOL_OUTPUTS: Final[dict[str, JsonValue]] = {
    "search": {"flights": ["TP1944 09:40", "TP1950 17:25"]},
    UNSAFE_TOOL: {"sent": True},
    "lookup": {"flight": "TP1944", "seat": "14C", "on_time": True},
}


@attrs.define
class Counters:
    """Kept outside the journal: what really happened, whatever the journal says."""

    starts: dict[str, int] = attrs.field(factory=dict)
    messages_sent: list[str] = attrs.field(factory=list)
    model_calls: int = 0


@attrs.define
class Crash:
    """Where the first worker dies: inside ``send_message``, after the message went out and
    before its result is recorded. ``reached`` tells the demo to kill that worker."""

    worker_id: str
    reached: trio.Event = attrs.field(factory=trio.Event)


def _answered(history: list[Any]) -> bool:
    return bool(history) and isinstance(history[-1], dict) and "answer" in history[-1]


def make_agent(model: ScriptedModel, counters: Counters, crash: Crash) -> Handler:
    """The handler of :data:`TASK_TYPE`: one turn per iteration, as in the spec's example."""

    async def agent_turn(tc: TaskContext) -> None:
        j = await tc.journal()  # Stale/Committed/RestartLimit/Fenced: let them through
        saved = await tc.load_checkpoint()
        history: list[Any] = list(saved) if isinstance(saved, list) else [{"task": tc.input}]
        placed = await tc.place_inputs(Mode.STEER)
        if _answered(history):
            # A turn after a final answer was woken by a follow-up: that is what it answers.
            placed += await tc.place_inputs(Mode.FOLLOW_UP)
        history += [{"input": p.mode.value, "content": p.content} for p in placed]

        counters.model_calls += 1
        reply = await j.model(lambda: model(list(history)))
        if not isinstance(reply, dict):
            await tc.fail_permanent(f"the model answered {reply!r}, not an object")
            return
        if "tool" in reply:
            name = str(reply["tool"])
            replay = Replay.SAFE if name in SAFE_TOOLS else Replay.UNSAFE

            async def run_tool(call: ToolCall) -> JsonValue:
                counters.starts[call.name] = counters.starts.get(call.name, 0) + 1
                if call.name == UNSAFE_TOOL:
                    counters.messages_sent.append(call.key)
                    if tc.worker_id == crash.worker_id:
                        crash.reached.set()
                        await trio.sleep_forever()  # killed here, before the result is recorded
                return TOOL_OUTPUTS.get(call.name, None)

            result = await j.tool(ToolCall(name, reply.get("input")), replay, run_tool)
            history.append(
                {"tool": name, "output": result.output, "interrupted": result.interrupted}
            )
            await tc.checkpoint(history)
            await tc.continue_()
            return

        history.append({"answer": reply.get("answer")})
        await tc.checkpoint(history)
        follow_ups = tc.input.get("follow_ups", 0) if isinstance(tc.input, dict) else 0
        answers = sum(1 for h in history if isinstance(h, dict) and "answer" in h)
        if isinstance(follow_ups, int) and answers > follow_ups:
            await tc.complete({"answer": reply.get("answer"), "answers": answers})
            return
        try:
            await tc.continue_(wait=(UntilInput(), Delay(hours=FOLLOW_UP_WAIT_H)))
        except InputsQueued:
            await tc.continue_()  # the next turn places what was queued

    return agent_turn


def workflow_definition(loop_delay: str) -> dict[str, JsonValue]:
    """One ``agent_loop`` step; ``loop_delay`` leaves a person time to steer between turns."""
    return {
        "name": WORKFLOW_NAME,
        "steps": [
            {
                "id": STEP_ID,
                "task": TASK_TYPE,
                "type": "agent_loop",
                "agent_loop": {"max_iterations": 20, "loop_delay": loop_delay},
                "retry": {"max_attempts": 3, "initial_delay": "1s"},
            }
        ],
    }
