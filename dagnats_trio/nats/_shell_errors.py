"""Errors of the Trio connection (the sans-IO core has only :class:`ProtocolError`)."""

from __future__ import annotations

from typing import final

#: Links of an error's ``__cause__`` chain that :func:`describe` shows.
_DESCRIBED_CAUSES = 4


class NatsError(Exception):
    """Base class of every error the connection raises."""


@final
class ConnectionClosedError(NatsError):
    """The connection is closed: by its owner, or after it gave up reconnecting."""


@final
class NoServersError(NatsError):
    """No server of the list could be reached (the message holds the last error)."""


@final
class AuthorizationError(NatsError):
    """The server refused the credentials (its -ERR text is the message)."""


@final
class NoRespondersError(NatsError):
    """A request found nobody subscribed to its subject (status 503)."""


@final
class NatsTimeoutError(NatsError, TimeoutError):
    """A request, flush or publish waited longer than its deadline."""


@final
class ConnectionLostError(NatsError):
    """The socket failed, the server closed it or stopped answering pings; the shell reconnects."""


def describe(error: BaseException | None) -> str:
    """An error and its causes on one line (a TLS failure hides under BrokenResourceError)."""
    parts: list[str] = []
    while error is not None and len(parts) < _DESCRIBED_CAUSES:
        parts.append(repr(error))
        error = error.__cause__
    return " <- ".join(parts) or "no error recorded"


@final
class CredentialsError(NatsError, ValueError):
    """A credentials or nkey seed file that cannot be used (the message names the file and
    what is wrong with it, never the secret)."""
