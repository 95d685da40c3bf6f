"""nats-py's side of batches (asyncio coroutines, run through the one hop): send a batch and
wait for its commit's answer, gather a direct get's several answers.

Each is one asyncio task for the whole exchange, so a batch of N messages still crosses from
Trio once. A Trio caller cancelled midway leaves the task running to its end (bounded by the
request timeout), as every ``NatsTransport`` call does: a batch whose commit was sent is then
stored whole or not at all, never in part.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from ._jetstream_batch import DirectReply, WireMsg
from ._max_payload import check_max_payload
from ._nats_hop import headers_of

#: Where nats-py puts a message's status line among its headers.
_STATUS = "Status"
_DESCRIPTION = "Description"


def direct_reply(msg: Msg) -> DirectReply:
    """A nats-py message as a :class:`DirectReply` (its status out of the headers)."""
    headers = headers_of(msg)
    status = headers.pop(_STATUS, None)
    description = headers.pop(_DESCRIPTION, "") if status is not None else ""
    return DirectReply(
        data=msg.data,
        headers=headers,
        status=int(status) if status is not None and status.isdigit() else None,
        description=description,
    )


async def send_batch(nc: NatsClient, wire: Sequence[WireMsg], timeout_s: float) -> Msg:
    """asyncio side: the messages before the commit without a reply, then the commit as a
    request; the commit's answer. Every message is checked before the first is sent (nats-py
    bounds the payload alone; one over the bound would make the server close the connection)."""
    for msg in wire:
        check_max_payload(nc.max_payload, msg.data, msg.headers, f"batch to {msg.subject!r}")
    for msg in wire[:-1]:
        await nc.publish(msg.subject, msg.data, headers=msg.headers)
    commit = wire[-1]
    return await nc.request(commit.subject, commit.data, timeout=timeout_s, headers=commit.headers)


async def gather(
    nc: NatsClient,
    subscribe: Callable[..., Awaitable[Any]],
    unsubscribe: Callable[[Any], Awaitable[None]],
    subject: str,
    payload: bytes,
    *,
    max_replies: int,
    timeout_s: float,
) -> list[DirectReply]:
    """asyncio side: every answer to one request up to and with the first carrying a status
    (or ``max_replies`` of them); TimeoutError when the answers do not end in time."""
    replies: list[DirectReply] = []
    done = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        if done.is_set():
            return
        reply = direct_reply(msg)
        replies.append(reply)
        if reply.status is not None or len(replies) >= max_replies:
            done.set()

    sub = await subscribe(nc.new_inbox(), cb=on_msg)
    try:
        await nc.publish(subject, payload, reply=sub.subject)
        await asyncio.wait_for(done.wait(), timeout_s)
    finally:
        await unsubscribe(sub)
    return replies
