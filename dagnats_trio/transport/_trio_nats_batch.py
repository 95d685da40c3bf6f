"""The native client's gathering of a direct get's several answers (a batch's messages go out
with its commit request: ``Connection.request(preceding=...)``).

A direct get is answered by many messages on one reply subject, which the connection's request
mux (one answer per request) does not hold; so each gather subscribes a fresh inbox for its
duration. The SUB is queued before the request on the same connection, so the server knows the
inbox before it answers; leaving the block (an answer, a deadline, a cancellation at any await)
unsubscribes, and a late answer then finds nobody.
"""

from __future__ import annotations

import trio

from ..nats import Connection, Msg
from ._errors import Closed, TransportError, TransportTimeout
from ._jetstream_batch import DirectReply
from ._trio_nats_msgs import headers_dict


def direct_reply(msg: Msg) -> DirectReply:
    """A wire message as a :class:`DirectReply` (its status from the header line)."""
    headers = msg.headers
    return DirectReply(
        data=msg.payload,
        headers=headers_dict(headers),
        status=msg.status,
        description=headers.description if headers is not None else "",
    )


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
