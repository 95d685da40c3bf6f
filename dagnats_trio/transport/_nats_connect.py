"""Opening a ``NatsTransport``: nats-py's connection, its reconnect pacing and its loop.

nats-py runs on an asyncio loop that trio-asyncio drives inside the Trio run; the loop must
outlive the connection, so :func:`open_nats_py_transport` owns both. Reconnects go on for as
long as an outage lasts, paced by a capped, jittered backoff, and each outage is logged once
when it starts and once when it ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, final

import nats
import trio
import trio_asyncio
from nats.aio.client import Client as NatsClient

from dagnats_trio._env import DEFAULT_ENV, backoff_delay_s

from ._errors import TemporarilyUnavailable, TransportError, TransportTimeout
from ._nats import NatsTransport
from ._nats_hop import run_shielded
from ._values import DEFAULT_REQUEST_TIMEOUT_S

_log = logging.getLogger(__name__)

#: Reconnect attempts before nats-py gives the connection up: never (-1). A process rides out
#: an outage of any length; calls fail (TemporarilyUnavailable, TransportTimeout) meanwhile.
MAX_RECONNECT_ATTEMPTS = -1
#: Pause before the first reconnect attempt of an outage; it doubles per failed attempt...
RECONNECT_FIRST_WAIT_S = 0.25
#: ...up to this cap, each pause jittered (see ``backoff_delay_s``).
RECONNECT_MAX_WAIT_S = 5.0
#: Bound on establishing the first connection.
CONNECT_TIMEOUT_S = 5.0
#: Bound on closing (drain is not used: pending requests are abandoned on close).


async def _log_error(exc: Exception) -> None:
    _log.debug("nats connection: %r", exc)


@final
class _Reachability:
    """Says once that NATS is unreachable and once that it is back, per outage (nats-py calls
    ``disconnected`` once when it starts reconnecting, ``reconnected`` once when it is done,
    and logs every failed attempt only through ``_log_error``, at DEBUG); and paces the
    reconnect attempts with a capped, jittered backoff drawn from ``random``."""

    def __init__(self, servers: Sequence[str], random: Callable[[], float]) -> None:
        self._servers = ", ".join(servers)
        self._random = random
        self.client: NatsClient | None = None
        self._down_since: float | None = None

    def pace(self, servers: list[Any], info: dict[str, Any]) -> tuple[Any, float]:
        """nats-py's ``reconnect_to_server_handler``: any server of the pool, after a pause
        that grows with the failed attempts in a row (``Server.reconnects``)."""
        failures = min((srv.reconnects for srv in servers), default=0)
        delay = backoff_delay_s(
            failures, RECONNECT_FIRST_WAIT_S, RECONNECT_MAX_WAIT_S, self._random()
        )
        return None, delay

    async def disconnected(self) -> None:
        nc = self.client
        if nc is None or not nc.is_reconnecting:  # a close, not an outage
            return
        self._down_since = time.monotonic()
        _log.warning(
            "NATS is unreachable (%s): reconnecting, with attempts up to %.0f s apart, for as "
            "long as it takes; calls fail meanwhile",
            self._servers,
            RECONNECT_MAX_WAIT_S,
        )

    async def reconnected(self) -> None:
        down = 0.0 if self._down_since is None else time.monotonic() - self._down_since
        self._down_since = None
        _log.warning("NATS is back (%s) after %.1f s unreachable", self._servers, down)


def _single(exc: BaseException) -> BaseException:
    """The lone exception inside (nested) one-member groups, else ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@asynccontextmanager
async def open_nats_py_transport(
    url_or_urls: str | Sequence[str],
    *,
    name: str | None = None,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    random: Callable[[], float] = DEFAULT_ENV.random,
) -> AsyncIterator[NatsTransport]:
    """A connected :class:`NatsTransport`; its asyncio loop lives exactly as long as the block.

    trio-asyncio's loop runs in nurseries, which wrap whatever the block raises in exception
    groups; a lone exception is unwrapped so ``except WrongLastSequence`` around the block works.
    ``random`` (uniform in [0, 1)) jitters the reconnect backoff.
    """
    servers = [url_or_urls] if isinstance(url_or_urls, str) else list(url_or_urls)
    if not servers:
        raise ValueError("open_nats_py_transport needs at least one server URL")
    try:
        async with trio_asyncio.open_loop() as loop:
            nc = await _connect(loop, servers, name, connect_timeout_s, random)
            transport = NatsTransport(loop, nc, request_timeout_s)
            try:
                yield transport
            finally:
                await transport.aclose()
    except BaseExceptionGroup as group:
        lone = _single(group)
        if lone is group:
            raise
        raise lone from None


async def _close_client(nc: NatsClient) -> None:
    await nc.close()


async def _connect(
    loop: Any,
    servers: list[str],
    name: str | None,
    connect_timeout_s: float,
    random: Callable[[], float],
) -> NatsClient:
    reach = _Reachability(servers, random)
    with trio.move_on_after(connect_timeout_s):
        try:
            nc: NatsClient = await run_shielded(
                loop,
                nats.connect(
                    servers,
                    name=name,
                    connect_timeout=max(1, int(connect_timeout_s)),
                    allow_reconnect=True,
                    max_reconnect_attempts=MAX_RECONNECT_ATTEMPTS,
                    reconnect_to_server_handler=reach.pace,
                    error_cb=_log_error,
                    disconnected_cb=reach.disconnected,
                    reconnected_cb=reach.reconnected,
                ),
                "connect",
                _close_client,
            )
        except (TransportError, OSError) as exc:
            raise TemporarilyUnavailable(f"cannot connect to {servers}: {exc}") from None
        reach.client = nc
        return nc
    raise TransportTimeout(f"cannot connect to {servers} within {connect_timeout_s}s")
