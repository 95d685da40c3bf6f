"""A client connection whose requests on one subject a second connection answers with their own
payload: what the wire client's cost and coalescing tests measure a request against."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from dagnats_trio.nats import Connection, Headers, Subscription, open_connection


async def _echo(conn: Connection, sub: Subscription, headers: Headers | None) -> None:
    async for msg in sub:
        if msg.reply:
            await conn.publish(msg.reply, msg.payload, headers=headers)


@asynccontextmanager
async def echo_client(
    nats_url: str, subject: str, *, reply_headers: Headers | None = None
) -> AsyncIterator[Connection]:
    """The client; each request on ``subject`` is answered with its payload (and
    ``reply_headers``) by a responder subscribed, and flushed, before this yields."""
    async with (
        open_connection(nats_url) as server_side,
        server_side.subscribe(subject) as sub,
        open_connection(nats_url) as client,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(_echo, server_side, sub, reply_headers)
        await server_side.flush()
        yield client
        nursery.cancel_scope.cancel()
