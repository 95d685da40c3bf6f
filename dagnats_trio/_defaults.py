"""The defaults a user sees by name: in ``dagnats --help`` and in the config classes.

Why a leaf module of their own: ``dagnats --help`` names them (the AckWait, the restart limit,
the listen address...) and must not load Trio, NATS or the HTTP stack to do it (issue 13: the
help answers in well under 0.3 s). The packages that own each figure import it from here and
re-export it under the same name, so there is still one copy of each.
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

#: The clients a transport can run on.
Client = Literal["native", "nats-py"]
#: Their names, in the order the CLI lists them.
CLIENTS: Final[tuple[Client, ...]] = ("native", "nats-py")
#: The client used unless another is asked for.
DEFAULT_CLIENT: Final[Client] = "native"
#: The environment variable the CLI reads the client from.
CLIENT_ENV: Final = "DAGNATS_CLIENT"

__all__ = [
    "CLIENTS",
    "CLIENT_ENV",
    "DEFAULT_ACK_WAIT_S",
    "DEFAULT_CLIENT",
    "DEFAULT_LISTEN_BACKLOG",
    "DEFAULT_LISTEN_HOST",
    "DEFAULT_LISTEN_PORT",
    "DEFAULT_RESTART_LIMIT",
    "MAX_RESTART_LIMIT",
    "MIN_RESTART_LIMIT",
    "Client",
]
