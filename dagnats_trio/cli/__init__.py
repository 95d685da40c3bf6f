"""The ``dagnats`` command line: processes (dev, serve, worker, demo) and verbs over the API.

Verbs exit 0 on success, 1 when a check or run failed (or the API refused: a conflict),
2 on a usage or input error, 3 when a run, step, workflow or input is not found, and 4 when the
API (or NATS) cannot be reached.
"""

from ._app import app, main
from ._client import (
    DEFAULT_API_URL,
    EXIT_CANNOT_CONNECT,
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    ApiClient,
    ApiFailure,
    CannotConnect,
    ClientError,
)

__all__ = [
    "DEFAULT_API_URL",
    "EXIT_CANNOT_CONNECT",
    "EXIT_FAILED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "ApiClient",
    "ApiFailure",
    "CannotConnect",
    "ClientError",
    "app",
    "main",
]
