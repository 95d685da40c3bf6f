"""The scripted tool-using agent every verification harness shares.

The model is a pure function of the conversation (which turn it is), so a reused response and a
fresh request give the same reply, and a crash-free run and a recovered run end with the same
answer. The tools count in :class:`AgentCounters`, which lives outside the journal: that is how a
harness sees whether an unsafe tool started twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

import attrs

from ..journal import Completion, Journal, NextTool, Replay, ToolCall, ToolResult
from ..protocol import JsonValue
from ..worker import Handler, TaskContext

AGENT_TASK = "scripted-agent"
AGENT_STEP_ID = "agent"
#: Iterations the scripted workflow allows: the script needs four; the rest is headroom.
AGENT_MAX_ITERATIONS = 20


@final
@attrs.frozen
class Turn:
    """One scripted model reply: a tool call (``tool`` set) or the final ``answer``."""

    tool: str | None = None
    replay: Replay = Replay.SAFE
    input: JsonValue = None
    answer: str | None = None

    def reply(self) -> JsonValue:
        if self.tool is None:
            return {"done": True, "answer": self.answer}
        return {"done": False, "tool": self.tool, "input": self.input}


DEFAULT_SCRIPT: tuple[Turn, ...] = (
    Turn(tool="search", replay=Replay.SAFE, input={"q": "who is on call"}),
    Turn(tool="send_message", replay=Replay.UNSAFE, input={"to": "ops", "text": "deploying"}),
    Turn(tool="lookup", replay=Replay.SAFE, input={"id": "deploy-42"}),
    Turn(answer="deployed; ops notified"),
)


def expected_answer(script: tuple[Turn, ...] = DEFAULT_SCRIPT) -> JsonValue:
    """The output of a run of ``script``, with or without crashes."""
    tools = [t.tool for t in script if t.tool is not None]
    return {"answer": script[-1].answer, "tools": tools}


def agent_workflow(name: str = "scripted-agent", *, task: str = AGENT_TASK) -> dict[str, Any]:
    """A workflow with one ``agent_loop`` step running the scripted agent."""
    return {
        "name": name,
        "version": 1,
        "steps": [
            {
                "id": AGENT_STEP_ID,
                "task": task,
                "type": "agent_loop",
                "retry": {"max_attempts": 5, "strategy": "fixed", "initial_delay": 100},
                "agent_loop": {"max_iterations": AGENT_MAX_ITERATIONS},
            }
        ],
    }


@final
@attrs.define
class AgentCounters:
    """Counts kept outside the journal, per run id."""

    model_requests: dict[str, int] = attrs.field(factory=dict)
    tool_starts: dict[tuple[str, str], int] = attrs.field(factory=dict)
    tool_effects: dict[tuple[str, str], int] = attrs.field(factory=dict)
    answers: dict[str, JsonValue] = attrs.field(factory=dict)

    def starts(self, run_id: str, tool: str) -> int:
        return self.tool_starts.get((run_id, tool), 0)

    def effects(self, run_id: str, tool: str) -> int:
        return self.tool_effects.get((run_id, tool), 0)

    def _bump(self, table: dict[Any, int], key: Any) -> None:
        table[key] = table.get(key, 0) + 1


@final
class ScriptedAgent:
    """One turn per iteration: ask the model, run the tool it names, checkpoint, continue.

    A harness kills or stalls a holder with the crash seams (``INSIDE_TOOL`` is reached after the
    tool function has run, so its start and effect are counted, and before its result is recorded).
    """

    def __init__(
        self,
        script: tuple[Turn, ...] = DEFAULT_SCRIPT,
        *,
        task: str = AGENT_TASK,
        counters: AgentCounters | None = None,
        paired: bool = True,
    ) -> None:
        if not script or script[-1].tool is not None:
            raise ValueError("a script must end with an answer")
        self.script = script
        self.task = task
        self.counters = counters if counters is not None else AgentCounters()
        #: Store the model response with the tool intent (or, for the answer, with the complete
        #: commit), and the tool result with the commit, as one message each (``then_tool``,
        #: ``then_complete`` / ``then_continue``); False writes each alone.
        self.paired = paired

    @property
    def handlers(self) -> dict[str, Handler]:
        return {self.task: self.turn}

    async def turn(self, tc: TaskContext) -> None:
        j = await tc.journal()
        history = await tc.load_checkpoint()
        if history is None:
            history = [{"role": "user", "content": tc.input}]
        if self.paired:
            # A tool call's intent, or the answer's complete commit, stored with the reply.
            reply = await j.model(
                lambda: self._model(tc.run_id, history),
                then_tool=self._next,
                then_complete=lambda r: self._completion(tc.run_id, history, r),
            )
        else:
            reply = await j.model(lambda: self._model(tc.run_id, history))
        turn = self._turn_of(reply)
        if turn.tool is None:
            if self.paired:
                return  # the journal completed the step with the reply (then_complete)
            done = self._completion(tc.run_id, history, reply)
            assert done is not None
            await tc.checkpoint(done.state)
            await tc.complete(done.output)
            return
        said = [*history, {"role": "assistant", "content": reply}]
        if self.paired:
            # The result and the continue commit carrying the new history: one message.
            await self._tool(j, tc.run_id, turn, then=lambda r: [*said, self._entry(turn, r)])
            return
        result = await self._tool(j, tc.run_id, turn)
        await tc.checkpoint([*said, self._entry(turn, result)])
        await tc.continue_()

    def _entry(self, turn: Turn, result: ToolResult) -> JsonValue:
        return {
            "role": "tool",
            "name": turn.tool,
            "output": result.output,
            "error": result.error,
            "interrupted": result.interrupted,
        }

    def _completion(
        self, run_id: str, history: list[JsonValue], reply: JsonValue
    ) -> Completion | None:
        """The step's end a final-answer reply leads to: the answer and the tools it used, and
        the history with the reply as the state of record (None for a tool call). The answer
        is counted as given here, before the commit, so a crash after it still shows it."""
        turn = self._turn_of(reply)
        if turn.tool is not None:
            return None
        tools = [h["name"] for h in history if h.get("role") == "tool"]
        answer = {"answer": turn.answer, "tools": tools}
        self.counters.answers[run_id] = answer
        return Completion(answer, [*history, {"role": "assistant", "content": reply}])

    def _next(self, reply: JsonValue) -> NextTool | None:
        """The tool call a reply leads to: its intent is stored with the reply (one message)."""
        turn = self._turn_of(reply)
        if turn.tool is None:
            return None
        return NextTool(ToolCall(turn.tool, turn.input), turn.replay)

    async def _model(self, run_id: str, history: list[JsonValue]) -> JsonValue:
        """The scripted reply. It does not yield: ``Journal.model`` checkpoints around it (its
        record's append waits on the server), and a yield here would be a scheduler pass per
        model call that the bench charged to the runtime."""
        self.counters._bump(self.counters.model_requests, run_id)
        asked = sum(1 for h in history if h.get("role") == "assistant")
        return self.script[min(asked, len(self.script) - 1)].reply()

    def _turn_of(self, reply: JsonValue) -> Turn:
        if reply.get("done"):
            return Turn(answer=reply["answer"])
        for t in self.script:
            if t.tool == reply["tool"]:
                return t
        raise ValueError(f"the model named an unknown tool {reply['tool']!r}")

    async def _tool(
        self,
        j: Journal,
        run_id: str,
        turn: Turn,
        then: Callable[[ToolResult], JsonValue] | None = None,
    ) -> ToolResult:
        assert turn.tool is not None
        name = turn.tool

        async def run(call: ToolCall) -> JsonValue:
            # No yield between start and effect: as _model, the journal's writes around it wait.
            self.counters._bump(self.counters.tool_starts, (run_id, name))
            self.counters._bump(self.counters.tool_effects, (run_id, name))
            return {"tool": name, "key": call.key, "ok": True}

        return await j.tool(ToolCall(name, turn.input), turn.replay, run, then_continue=then)
