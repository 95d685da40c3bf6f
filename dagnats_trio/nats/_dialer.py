"""Finding a server: one round over the server list, the first connection, and after a loss the
rounds with a capped, jittered backoff until one answers (or the rounds run out).

It says once per outage, as a warning, that NATS is unreachable and once that it is back: an
operator sees the outage and its end, not every attempt.
"""

from __future__ import annotations

import itertools
import logging
import random
from typing import final

import attrs
import trio

from ._backoff import backoff_s
from ._defaults import RECONNECT_BACKOFF_MAX_S
from ._errors import ProtocolError
from ._handshake import ClientSettings, handshake
from ._protocol import ClientProtocol
from ._servers import ServerAddress, ServerList
from ._shell_errors import (
    AuthorizationError,
    ConnectionLostError,
    NoServersError,
    describe,
)

_log = logging.getLogger(__name__)

#: Errors that end one socket's session or one attempt to reach a server (then: the next).
SOCKET_ERRORS = (
    OSError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    ProtocolError,
    ConnectionLostError,
)


@final
@attrs.frozen
class Reached:
    """A server that completed the handshake, its stream and the protocol state on it."""

    server: ServerAddress
    stream: trio.abc.Stream
    protocol: ClientProtocol


@final
class Dialer:
    """Reaches a server of ``servers``; :attr:`last_error` holds why the last attempt (or the
    last session, as the connection records it) failed."""

    def __init__(
        self,
        servers: ServerList,
        settings: ClientSettings,
        *,
        connect_timeout_s: float,
        max_rounds: int,
        rng: random.Random,
    ) -> None:
        self._servers = servers
        self._settings = settings
        self._connect_timeout_s = connect_timeout_s
        self._max_rounds = max_rounds
        self._rng = rng
        self.last_error: BaseException | None = None

    async def round(self) -> Reached | None:
        """Every server once, in order; the first that answers, or ``None``."""
        for server in self._servers:
            try:
                with trio.fail_after(self._connect_timeout_s):
                    stream, protocol = await handshake(server, self._settings)
            except (*SOCKET_ERRORS, AuthorizationError, trio.TooSlowError) as exc:
                self.last_error = exc
                continue
            return Reached(server, stream, protocol)
        return None

    async def first(self) -> Reached:
        """The first connection: one round; :class:`NoServersError` (or
        :class:`AuthorizationError`) if no server takes us."""
        reached = await self.round()
        if reached is None:
            error = self.last_error
            if isinstance(error, AuthorizationError):
                raise error
            urls = ", ".join(self._servers.urls)
            raise NoServersError(f"no server answered ({urls}): {describe(error)}") from error
        return reached

    async def again(self) -> Reached | None:
        """After a loss: rounds with backoff until a server answers; ``None`` once
        ``max_rounds`` rounds failed (-1: never)."""
        down_since = trio.current_time()
        _log.warning(
            "NATS is unreachable (%s): reconnecting, with rounds up to %.0f s apart, "
            "%s; calls fail meanwhile",
            ", ".join(self._servers.urls),
            RECONNECT_BACKOFF_MAX_S,
            "for as long as it takes" if self._max_rounds < 0 else f"for {self._max_rounds} rounds",
        )
        rounds = itertools.count() if self._max_rounds < 0 else range(self._max_rounds)
        for round_index in rounds:
            reached = await self.round()
            if reached is not None:
                _log.warning(
                    "NATS is back (%s) after %.1f s unreachable",
                    reached.server.url,
                    trio.current_time() - down_since,
                )
                return reached
            await trio.sleep(backoff_s(round_index, self._rng))
        return None
