"""A server-sent event response must say what it streams: the base class and the step stream
are abstract (no ``NotImplementedError`` stub left to reach at request time), and the two
concrete streams of the API are complete."""

from __future__ import annotations

from typing import Any

import pytest

from dagnats_trio.api._rest_journal import JournalFollowResponse
from dagnats_trio.api._rest_preview import PreviewFollowResponse
from dagnats_trio.api._rest_sse import EventSink, EventStreamResponse, StepStreamResponse


def test_the_base_stream_cannot_be_built() -> None:
    with pytest.raises(TypeError, match="abstract"):
        EventStreamResponse(what="x", keepalive_s=1.0, max_follow_s=1.0)  # type: ignore[abstract]


def test_a_subclass_without_stream_cannot_be_built() -> None:
    class Silent(EventStreamResponse):
        pass

    with pytest.raises(TypeError, match="stream"):
        Silent(what="x", keepalive_s=1.0, max_follow_s=1.0)  # type: ignore[abstract]
    with pytest.raises(TypeError, match="stream"):
        StepStreamResponse(  # type: ignore[abstract]
            object(),  # type: ignore[arg-type]
            object(),  # type: ignore[arg-type]
            "r",
            "s",
            kind="x",
            poll_interval_s=1.0,
            keepalive_s=1.0,
            max_follow_s=1.0,
        )


def test_a_subclass_with_stream_is_built() -> None:
    class One(EventStreamResponse):
        async def stream(self, sink: EventSink) -> None:
            await sink.start()

    response = One(what="one", keepalive_s=1.0, max_follow_s=1.0)
    assert response.media_type == "text/event-stream"
    assert "content-length" not in response.headers


@pytest.mark.parametrize("cls", [JournalFollowResponse, PreviewFollowResponse])
def test_the_api_streams_are_concrete(cls: Any) -> None:
    assert not getattr(cls, "__abstractmethods__", frozenset())
    assert issubclass(cls, StepStreamResponse)
