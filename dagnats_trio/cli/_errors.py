"""The failures of the API client, with the exit code each gives the command.

Apart from :mod:`._client` so that what every command shares (:mod:`._common`: turning a failure
into an exit code) loads no HTTP stack: ``dev``, ``serve`` and ``worker`` never build a client.
"""

from __future__ import annotations

from typing import final

from ._contract import EXIT_CANNOT_CONNECT, EXIT_FAILED, EXIT_NOT_FOUND, EXIT_USAGE


class ClientError(Exception):
    """A failure a CLI user can act on; ``exit_code`` is what the command exits with."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


@final
class CannotConnect(ClientError):
    exit_code = EXIT_CANNOT_CONNECT


class UsageError(ClientError):
    """Bad input given on the command line (detected before any request)."""

    exit_code = EXIT_USAGE


@final
class ApiFailure(ClientError):
    """The API answered with an error: ``status``, ``code`` and its readable message."""

    def __init__(self, status: int, code: str, message: str, detail: tuple[str, ...] = ()) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        super().__init__(message)

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        if self.status == 404:
            return EXIT_NOT_FOUND
        if self.status in (400, 401, 403, 413, 422):
            return EXIT_USAGE
        return EXIT_FAILED


__all__ = ["ApiFailure", "CannotConnect", "ClientError", "UsageError"]
