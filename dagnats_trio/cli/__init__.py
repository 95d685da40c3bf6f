"""The ``dagnats`` command line: processes (dev, serve, worker, demo) and verbs over the API.

Verbs exit 0 on success, 1 when a check or run failed (or the API refused: a conflict),
2 on a usage or input error, 3 when a run, step, workflow or input is not found, and 4 when the
API (or NATS) cannot be reached.

The API client loads on first use (``dagnats_trio._lazy``): the console script imports this
package, and ``dagnats --help`` must not pay for httpx and the API's views.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._app import app, main
from ._contract import (
    DEFAULT_API_URL,
    EXIT_CANNOT_CONNECT,
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
)

if TYPE_CHECKING:
    from ._client import ApiClient
    from ._errors import ApiFailure, CannotConnect, ClientError
else:
    # mypy sees the imports above instead, so a misspelt name is an error, not ``object``.
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._client": ("ApiClient",),
            "._errors": ("ApiFailure", "CannotConnect", "ClientError"),
        },
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
