"""Typed errors of the inputs service.

Each carries an HTTP-style ``status`` and a stable ``code`` so the REST layer and the NATS
endpoints can answer ``{"error": {"code", "message"}}`` without knowing which error it was.
"""

from __future__ import annotations

from typing import final


class InputError(Exception):
    """Base of every error the inputs service raises on purpose."""

    status: int = 400
    code: str = "bad_request"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


@final
class BadRequestError(InputError):
    """The request itself is malformed: bad id, bad mode, content that is not JSON."""

    status = 400
    code = "bad_request"


@final
class UnauthorizedError(InputError):
    """A token is configured and the request did not carry it."""

    status = 401
    code = "unauthorized"


@final
class NotFoundError(InputError):
    """Unknown run, step or submission."""

    status = 404
    code = "not_found"


class ConflictError(InputError):
    """The request is well formed but the state forbids it (finished step, placed input)."""

    status = 409
    code = "conflict"


@final
class ContentTooLargeError(InputError):
    """The content is over the size bound."""

    status = 413
    code = "content_too_large"


@final
class ContentionError(InputError):
    """A compare-and-set loop lost too many times in a row; the caller may retry."""

    status = 503
    code = "contention"
