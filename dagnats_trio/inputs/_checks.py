"""The checks every inputs operation makes on what it is given: ids, mode and content, each a
:class:`~.errors.BadRequestError` (or 413) naming the field."""

from __future__ import annotations

from typing import Final

from dagnats_trio.protocol import (
    InvalidId,
    JsonPolicyError,
    JsonValue,
    check_id,
    check_request_id,
    encode_json,
)

from .errors import BadRequestError, ContentTooLargeError
from .submission import Mode

#: Largest accepted content, measured as compact UTF-8 JSON.
MAX_CONTENT_BYTES: Final = 64 * 1024


def parse_mode(mode: Mode | str) -> Mode:
    if isinstance(mode, Mode):
        return mode
    try:
        return Mode(mode)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in Mode)
        raise BadRequestError(
            f"mode {mode!r} is not one of {allowed}", code="invalid_mode"
        ) from None


def check_ids(run_id: str, step_id: str, request_id: str | None = None) -> None:
    """:class:`BadRequestError` (code ``invalid_<field>``) naming the first bad id."""
    try:
        check_id("run_id", run_id)
        check_id("step_id", step_id)
        if request_id is not None:
            check_request_id(request_id)
    except InvalidId as exc:
        if exc.value == "":
            raise BadRequestError(f"{exc.field} is required", code=exc.code) from None
        raise BadRequestError(str(exc), code=exc.code) from None


def check_content(content: JsonValue) -> None:
    try:
        encoded = encode_json(content, where="content")
    except JsonPolicyError as exc:
        raise BadRequestError(str(exc), code="invalid_content") from None
    if len(encoded) > MAX_CONTENT_BYTES:
        raise ContentTooLargeError(
            f"content is {len(encoded)} bytes encoded; the limit is {MAX_CONTENT_BYTES}"
        )
