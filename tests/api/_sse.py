"""A small reader of server-sent events over an httpx streaming response."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import attrs
import httpx


@attrs.frozen
class SseEvent:
    id: str | None
    event: str
    data: str

    def json(self) -> Any:
        return json.loads(self.data)


async def sse_events(response: httpx.Response) -> AsyncIterator[SseEvent]:
    """Events in arrival order; comment lines (keep-alives) are skipped."""
    event_id: str | None = None
    event = "message"
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield SseEvent(event_id, event, "\n".join(data))
            event_id, event, data = None, "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            event_id = value
        elif name == "event":
            event = value
        elif name == "data":
            data.append(value)
