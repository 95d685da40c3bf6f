"""Opening a ``TrioNatsTransport``: the native client's connection to one or more servers,
with TLS and credentials, reconnecting for as long as an outage lasts; the transport is closed
and the connection drained when the block ends.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from ..nats import open_connection
from ._trio_nats import TrioNatsTransport
from ._values import DEFAULT_REQUEST_TIMEOUT_S

#: Deadline of the first connection to a server.
CONNECT_TIMEOUT_S = 5.0


@asynccontextmanager
async def open_trio_nats_transport(
    url_or_urls: str | Sequence[str],
    *,
    name: str | None = None,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    tls: ssl.SSLContext | None = None,
    creds_file: str | os.PathLike[str] | None = None,
    nkey_seed_file: str | os.PathLike[str] | None = None,
) -> AsyncIterator[TrioNatsTransport]:
    """A connected :class:`TrioNatsTransport`; drained and closed when the block ends.
    ``tls``, ``creds_file`` and ``nkey_seed_file`` are :func:`~dagnats_trio.nats.open_connection`'s
    (user and password or a token go in the URLs)."""
    servers = [url_or_urls] if isinstance(url_or_urls, str) else list(url_or_urls)
    if not servers:
        raise ValueError("open_trio_nats_transport needs at least one server URL")
    async with open_connection(
        servers,
        name=name,
        connect_timeout_s=connect_timeout_s,
        max_reconnect_rounds=-1,
        tls=tls,
        creds_file=creds_file,
        nkey_seed_file=nkey_seed_file,
    ) as conn:
        transport = TrioNatsTransport(conn, request_timeout_s)
        try:
            yield transport
        finally:
            await transport.aclose()
