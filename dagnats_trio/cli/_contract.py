"""What scripts rely on: the exit codes and the API a verb talks to unless told otherwise.

A leaf module (no imports) so the command declarations, which ``dagnats --help`` loads, can name
them without loading the HTTP client.
"""

from __future__ import annotations

from typing import Final

#: Where the verbs find the REST API unless ``--api`` or ``DAGNATS_API_URL`` says otherwise.
DEFAULT_API_URL: Final = "http://127.0.0.1:8080"

#: Exit codes (the CLI's contract with scripts).
EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_NOT_FOUND: Final = 3
EXIT_CANNOT_CONNECT: Final = 4

__all__ = [
    "DEFAULT_API_URL",
    "EXIT_CANNOT_CONNECT",
    "EXIT_FAILED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
]
