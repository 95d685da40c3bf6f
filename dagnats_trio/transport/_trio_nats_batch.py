"""The native client's two primitives for batches: send a batch's messages, gather a direct
get's several answers.

A direct get is answered by many messages on one reply subject, which the connection's request
mux (one answer per request) does not hold; so each gather subscribes a fresh inbox for its
duration. The SUB is queued before the request on the same connection, so the server knows the
inbox before it answers; leaving the block (an answer, a deadline, a cancellation at any await)
unsubscribes, and a late answer then finds nobody.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from ..nats import Connection, Msg
from ._interface import Closed, TransportError, TransportTimeout
from ._jetstream_batch import DirectReply, WireMsg
from ._trio_nats_msgs import headers_dict, wire_headers


def direct_reply(msg: Msg) -> DirectReply:
    """A wire message as a :class:`DirectReply` (its status from the header line)."""
    headers = msg.headers
    return DirectReply(
        data=msg.payload,
        headers=headers_dict(headers),
        status=msg.status,
        description=headers.description if headers is not None else "",
    )


async def send_uncommitted(conn: Connection, wire: Sequence[WireMsg]) -> None:
    """Queue the messages of a batch before its commit, with no reply subject: the server
    answers none of them, and holds them until the commit (or abandons them). The commit, a
    request, is the checkpoint: a message goes out without one of its own unless the outbox is
    full. A cancelled caller sends nothing."""
    await trio.lowlevel.checkpoint_if_cancelled()
    for msg in wire:
        headers = wire_headers(msg.headers)
        if not conn.try_publish(msg.subject, msg.data, headers=headers):
            await conn.publish(msg.subject, msg.data, headers=headers)


async def gather(
    conn: Connection,
    subject: str,
    payload: bytes,
    *,
    max_replies: int,
    timeout_s: float,
    what: str,
) -> list[DirectReply]:
    """Every answer to one request, up to and with the first carrying a status."""
    replies: list[DirectReply] = []
    async with conn.subscribe(conn.new_inbox(), max_buffered_msgs=max_replies) as sub:
        await conn.publish(subject, payload, reply=sub.subject)
        with trio.move_on_after(timeout_s):
            while True:
                try:
                    msg = await sub.next_msg()
                except trio.EndOfChannel:
                    raise Closed(f"{what}: connection closed") from None
                replies.append(direct_reply(msg))
                if sub.dropped or (msg.status is None and len(replies) >= max_replies):
                    raise TransportError(f"{what}: more than {max_replies} answers")
                if msg.status is not None:
                    return replies
    raise TransportTimeout(f"{what}: the answers did not end within {timeout_s} s")
