"""Which NATS client a process talks through: the native Trio client by default, nats-py
(on trio-asyncio) when asked for (``client="nats-py"``, ``--client nats-py``, ``DAGNATS_CLIENT``).

Both transports implement one interface and pass one conformance suite; the choice is made
here once, so the host, the CLI and user code open a transport the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final

from .._defaults import DEFAULT_CLIENT, Client, parse_client
from ._interface import Transport
from ._values import DEFAULT_REQUEST_TIMEOUT_S

#: Bound on the first connection to a server.
CONNECT_TIMEOUT_S: Final = 5.0


@asynccontextmanager
async def open_nats_transport(
    url_or_urls: str | Sequence[str],
    *,
    name: str | None = None,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    client: Client = DEFAULT_CLIENT,
) -> AsyncIterator[Transport]:
    """A connected transport on ``client`` (the native Trio client unless ``"nats-py"``);
    closed when the block ends. Both reconnect for as long as an outage lasts."""
    chosen = parse_client(client)
    if chosen == "nats-py":
        from ._nats_connect import open_nats_py_transport

        async with open_nats_py_transport(
            url_or_urls,
            name=name,
            request_timeout_s=request_timeout_s,
            connect_timeout_s=connect_timeout_s,
        ) as transport:
            yield transport
        return
    from ._trio_nats_connect import open_trio_nats_transport

    async with open_trio_nats_transport(
        url_or_urls,
        name=name,
        request_timeout_s=request_timeout_s,
        connect_timeout_s=connect_timeout_s,
    ) as native:
        yield native
