"""The defaults a user sees by name: in ``dagnats --help`` and in the config classes.

Why a leaf module of their own: ``dagnats --help`` names them (the AckWait, the restart limit,
the listen address...) and must not load Trio, NATS or the HTTP stack to do it (issue 13: the
help answers in well under 0.3 s). The packages that own each figure import it from here and
re-export it under the same name, so there is still one copy of each. The checks of the
figures a user types (:func:`check_restart_limit`, :func:`parse_client`, :func:`check_backlog`)
live here for the same reason: ``dagnats worker --restart-limit 0`` is refused before the host
is imported, and a worker-only host checks its config without loading the HTTP server.
"""

from __future__ import annotations

from typing import Final, Literal

#: The AckWait of a task message's first delivery: how long a dead worker's task waits.
DEFAULT_ACK_WAIT_S: Final = 0.8

#: A journal step fails (reason ``restart_limit``) after this many claims in a row without
#: progress, unless the worker is given another figure in this range.
DEFAULT_RESTART_LIMIT: Final = 5
MIN_RESTART_LIMIT: Final = 1
MAX_RESTART_LIMIT: Final = 1000

#: Where ``dagnats dev`` serves the REST API unless told otherwise.
DEFAULT_LISTEN_HOST: Final = "127.0.0.1"
DEFAULT_LISTEN_PORT: Final = 8080
#: Connections the kernel may queue before the server accepts them. hypercorn's own default
#: (100) overflowed under a burst of a few hundred requests (the kernel dropped the rest and
#: they came in again a second later, or were reset); Linux caps the figure at
#: ``net.core.somaxconn`` (docs/operations.md).
DEFAULT_LISTEN_BACKLOG: Final = 2048
#: Largest backlog accepted (``listen(2)`` takes an int; no kernel queues more than this).
MAX_LISTEN_BACKLOG: Final = 65_535

#: The clients a transport can run on.
Client = Literal["native", "nats-py"]
#: Their names, in the order the CLI lists them.
CLIENTS: Final[tuple[Client, ...]] = ("native", "nats-py")
#: The client used unless another is asked for.
DEFAULT_CLIENT: Final[Client] = "native"
#: The environment variable the CLI reads the client from.
CLIENT_ENV: Final = "DAGNATS_CLIENT"


def check_backlog(backlog: int) -> None:
    """ValueError unless ``backlog`` is a listen backlog (1 to :data:`MAX_LISTEN_BACKLOG`)."""
    if isinstance(backlog, bool) or not isinstance(backlog, int):
        raise ValueError(f"backlog must be an integer, got {backlog!r}")
    if not 1 <= backlog <= MAX_LISTEN_BACKLOG:
        raise ValueError(f"backlog must be from 1 to {MAX_LISTEN_BACKLOG}, got {backlog}")


def check_restart_limit(value: int) -> int:
    """``value`` if it is a restart limit (an int from the bounds above), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"restart_limit must be an integer, got {value!r}")
    if not MIN_RESTART_LIMIT <= value <= MAX_RESTART_LIMIT:
        raise ValueError(
            f"restart_limit must be from {MIN_RESTART_LIMIT} to {MAX_RESTART_LIMIT}, got {value}"
        )
    return value


def parse_client(text: str) -> Client:
    """``native`` or ``nats-py`` (case and surrounding blanks ignored); else ValueError naming
    the accepted values."""
    value = text.strip().lower()
    for client in CLIENTS:
        if value == client:
            return client
    raise ValueError(f"client must be one of {', '.join(CLIENTS)}, got {text!r}")


__all__ = [
    "CLIENTS",
    "CLIENT_ENV",
    "DEFAULT_ACK_WAIT_S",
    "DEFAULT_CLIENT",
    "DEFAULT_LISTEN_BACKLOG",
    "DEFAULT_LISTEN_HOST",
    "DEFAULT_LISTEN_PORT",
    "DEFAULT_RESTART_LIMIT",
    "MAX_LISTEN_BACKLOG",
    "MAX_RESTART_LIMIT",
    "MIN_RESTART_LIMIT",
    "Client",
    "check_backlog",
    "check_restart_limit",
    "parse_client",
]
