"""A record group sized for nats-server's default ``max_payload`` would be refused, for good, by
a server configured smaller: there the journal sends the same records as an atomic batch, one
message each (``group_message_max_bytes``, read from what the server announces)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from dagnats_trio.journal import (
    MAX_GROUP_MESSAGE_BYTES,
    NextTool,
    Replay,
    ScriptedModel,
    ToolCall,
    open_journal,
)
from dagnats_trio.journal._fencing import group_message_max_bytes
from dagnats_trio.nats import DEFAULT_MAX_PAYLOAD_BYTES
from dagnats_trio.server import open_nats_server
from dagnats_trio.transport import Transport, open_nats_transport, provision

from ._helpers import make_task, uid
from ._pairs import audit_ok, stored
from .test_batched_pairs import counting, state_of

#: A ``max_payload`` a server may be configured with, an eighth of the default.
SMALL_MAX_PAYLOAD_BYTES = 128 * 1024
#: Each record's share of the pair: together over the small server's bound, each under it.
HALF_PAIR_BYTES = 70 * 1024


def test_the_bound_follows_a_smaller_server_and_keeps_the_default_one() -> None:
    assert group_message_max_bytes(DEFAULT_MAX_PAYLOAD_BYTES) == MAX_GROUP_MESSAGE_BYTES
    assert group_message_max_bytes(8 * DEFAULT_MAX_PAYLOAD_BYTES) == MAX_GROUP_MESSAGE_BYTES
    assert group_message_max_bytes(SMALL_MAX_PAYLOAD_BYTES) == SMALL_MAX_PAYLOAD_BYTES // 4


@pytest.fixture(params=["native", "nats-py"])
async def small(request: pytest.FixtureRequest) -> AsyncIterator[Transport]:
    async with (
        open_nats_server(max_payload_bytes=SMALL_MAX_PAYLOAD_BYTES) as server,
        open_nats_transport(server.url, client=request.param) as transport,
    ):
        await provision(transport)
        yield transport


async def test_a_pair_over_a_small_servers_bound_is_stored_as_a_batch(small: Transport) -> None:
    """The model response and the tool intent, ~140 KiB together, would be one message under
    the default's 256 KiB group bound, which a 128 KiB server refuses: the turn failed. Now the
    pair is an atomic batch, the tool starts once and the journal checks."""
    task = make_task(uid())
    call = ToolCall("send_message", {"body": "b" * HALF_PAIR_BYTES})
    reply = {"tool": "send_message", "text": "t" * HALF_PAIR_BYTES}

    def then_tool(_: Any) -> NextTool:
        return NextTool(call, Replay.UNSAFE)

    model, starts = ScriptedModel([reply]), {}
    j = await open_journal(small, task)
    await j.model(model, then_tool=then_tool)
    result = await j.tool(call, Replay.UNSAFE, counting(starts), then_continue=state_of)
    assert starts == {"send_message": 1} and model.requests == 1 and not result.interrupted
    assert await stored(small, task) == [
        ("claim", None),
        ("model", "1/2"),
        ("tool.intent", "2/2"),
        ("tool.result+commit", None),
    ]
    await audit_ok(small, task)
