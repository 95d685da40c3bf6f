"""A fake model for tests: scripted responses, and a count of requests actually made."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, final

import trio

from dagnats_trio.protocol import JsonValue


@final
class ScriptExhausted(RuntimeError):
    """The scripted model was asked for more responses than it was given."""


@final
class ScriptedModel:
    """``await j.model(model)`` (or ``lambda: model(prompt)``) returns the next scripted response.

    An exception in ``responses`` is raised for that request (a failed request). ``requests``
    counts every request made, so a test can tell a reused response from a new one; ``prompts``
    keeps the arguments each request was called with.
    """

    def __init__(self, responses: Iterable[JsonValue | BaseException]) -> None:
        self._responses = list(responses)
        self.requests = 0
        self.prompts: list[tuple[Any, ...]] = []

    async def __call__(self, *args: Any) -> JsonValue:
        await trio.lowlevel.checkpoint()
        index = self.requests
        self.requests += 1
        self.prompts.append(args)
        if index >= len(self._responses):
            raise ScriptExhausted(
                f"the scripted model has {len(self._responses)} responses; request {index + 1}"
            )
        item = self._responses[index]
        if isinstance(item, BaseException):
            raise item
        return item
