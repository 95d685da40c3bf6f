"""The handlers the golden-replay tests record and replay (imported as MODULE:HANDLER by
``dagnats dev --worker`` and ``dagnats journal replay``, from this directory)."""

from __future__ import annotations

from typing import Any

import attrs

from dagnats_trio.protocol import JsonValue
from dagnats_trio.testing import DEFAULT_SCRIPT, ScriptedAgent
from dagnats_trio.worker import Handler

#: The code that recorded the journal.
agent = ScriptedAgent()
turn = agent.turn
handlers: dict[str, Handler] = agent.handlers

#: A deploy that changes what the unsafe tool is sent: not the call that was recorded.
_sent = DEFAULT_SCRIPT[1]
_changed = attrs.evolve(_sent, input={"to": "ops", "text": "deploying v2"})
changed_input = ScriptedAgent((DEFAULT_SCRIPT[0], _changed, *DEFAULT_SCRIPT[2:])).turn


class _Versioned:
    """The task context as the handler sees it, with a step output that now names a version."""

    def __init__(self, tc: Any) -> None:
        self._tc = tc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tc, name)

    async def complete(self, output: JsonValue = None) -> None:
        await self._tc.complete({"v": 2, "result": output})


#: The same agent settling through ``tc`` (each record alone): its answer goes through
#: ``tc.complete``, which ``_Versioned`` changes (paired, the journal completes the step).
_settling_through_tc = ScriptedAgent(paired=False).turn


async def changed_answer(tc: Any) -> None:
    """A deploy that answers differently: the same calls, another commit."""
    await _settling_through_tc(_Versioned(tc))
