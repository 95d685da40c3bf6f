""":func:`open_connection`: a :class:`~._connection.Connection` opened in a nursery of its own.

The first connection is made before the nursery opens (a server that cannot be reached, or
credentials that cannot be used, raise here); the nursery holds the supervisor that reconnects
and the request mux's deadlines, and leaving it drains the connection and closes it.
"""

from __future__ import annotations

import os
import random as random_module
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio

from ._connection import Connection
from ._defaults import (
    CONNECT_TIMEOUT_S,
    DRAIN_TIMEOUT_S,
    MAX_OUTSTANDING_PINGS,
    MAX_RECONNECT_ROUNDS,
    PING_INTERVAL_S,
)
from ._handshake import load_nkey_auth
from ._lifecycle import ConnectionLifecycle
from ._servers import parse_servers


@asynccontextmanager
async def open_connection(
    servers: str | Sequence[str],
    *,
    name: str | None = None,
    user: str | None = None,
    password: str | None = None,
    token: str | None = None,
    tls: ssl.SSLContext | None = None,
    creds_file: str | os.PathLike[str] | None = None,
    nkey_seed_file: str | os.PathLike[str] | None = None,
    ping_interval_s: float = PING_INTERVAL_S,
    max_outstanding_pings: int = MAX_OUTSTANDING_PINGS,
    max_reconnect_rounds: int = MAX_RECONNECT_ROUNDS,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
    discover_servers: bool = True,
    random: random_module.Random | None = None,
) -> AsyncIterator[Connection]:
    """Connect to the first server of ``servers`` that answers; yield the connection; drain and
    close it on exit. ``tls://`` URLs, a ``tls`` context, or a server that requires TLS turn TLS
    on. ``random`` drives the reconnect jitter (inject a seeded one for repeatable tests).
    ``discover_servers`` adds the cluster's other nodes (from INFO) to the reconnect list.
    ``creds_file`` (a ``.creds`` file: user JWT and nkey seed) or ``nkey_seed_file`` (a user's
    nkey seed) sign the server's nonce; either is read once, here, and a file that cannot be
    used raises :class:`CredentialsError` before any server is tried."""
    nkey = await load_nkey_auth(creds_file=creds_file, nkey_seed_file=nkey_seed_file)
    conn = Connection(
        parse_servers(servers),
        name=name,
        user=user,
        password=password,
        token=token,
        tls=tls,
        nkey=nkey,
        ping_interval_s=ping_interval_s,
        max_outstanding_pings=max_outstanding_pings,
        max_reconnect_rounds=max_reconnect_rounds,
        connect_timeout_s=connect_timeout_s,
        discover_servers=discover_servers,
        rng=random if random is not None else random_module.Random(),
    )
    # The first connection, the supervisor, the request deadlines and closing are the
    # lifecycle's, under the calls the connection adds.
    lifecycle: ConnectionLifecycle = conn
    first = await lifecycle._connect_first()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lifecycle._supervise, first)
            nursery.start_soon(lifecycle._mux.run_deadlines)
            try:
                yield conn
                await conn.drain(timeout_s=drain_timeout_s)
            finally:
                lifecycle._close("the connection is closed")
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The supervisor does not raise; a group of one is the caller's own exception.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
