"""Reading request bodies: bounded while reading, strict about shape, decoded into attrs classes.

Shared by the REST API and the worker bridge (both serve HTTP on one Starlette app).

The size bound is enforced chunk by chunk as the body arrives (and up front from
``Content-Length``), so an oversized body is refused without being held in memory. The JSON is
read by the one JSON policy (:mod:`dagnats_trio.protocol.json_policy`), as everywhere. The protocol
converter is lenient on purpose (it turns ``5`` into ``"5"`` for a ``str`` field and ignores
unknown keys, which suits reading our own stored data); a client's body gets the strict check
below first, so a typo or a wrong type is a 400 that names the field.
"""

from __future__ import annotations

import types
import typing
from typing import TYPE_CHECKING, Any, TypeVar, Union

import attrs

if TYPE_CHECKING:
    from starlette.requests import Request

from ..protocol import (
    DecodeError,
    JsonPolicyError,
    JsonValue,
    decode_json,
    from_obj,
    parse_decimal,
)
from .errors import ApiError, bad_request

T = TypeVar("T")

#: Largest ``Content-Length`` read as a number (any larger is refused as too large anyway).
CONTENT_LENGTH_MAX = 2**63 - 1
#: Unknown field names a 400 quotes; the rest are counted. A body of 60,000 unknown keys was
#: answered with every name (found from outside).
UNKNOWN_FIELDS_LISTED_MAX = 20
#: Longest a request's body may take to arrive once its headers have: a client that stops
#: sending mid-body is answered 408 ``body_timeout`` instead of holding its request open for
#: ever (found from outside: 64 such clients held every place the API works in, and every
#: other request waited behind them).
BODY_READ_TIMEOUT_S = 30.0
#: Where :func:`read_body` keeps a body it has read on the request (``request.state``), so the
#: app can read it before the endpoint does and the endpoint gets the same bytes.
BODY_STATE_ATTR = "dagnats_body"


def listed_names(names: list[str]) -> str:
    """``a, b, c``, at most :data:`UNKNOWN_FIELDS_LISTED_MAX` of them, then how many more."""
    shown = ", ".join(names[:UNKNOWN_FIELDS_LISTED_MAX])
    more = len(names) - UNKNOWN_FIELDS_LISTED_MAX
    return f"{shown} and {more} more" if more > 0 else shown


def too_large(limit_bytes: int) -> ApiError:
    return ApiError(413, "body_too_large", f"request body is larger than {limit_bytes} bytes")


async def read_body(request: Request, limit_bytes: int) -> bytes:
    """The raw body; 413 as soon as it is known to exceed ``limit_bytes``, 408 when it has not
    arrived within :data:`BODY_READ_TIMEOUT_S`. Read once per request: a second call returns
    the bytes the first read."""
    # Here, not at the top: the API's views import this package, and a worker-only host that
    # creates the API's service serves no HTTP (it loads no starlette).
    import trio

    kept: bytes | None = getattr(request.state, BODY_STATE_ATTR, None)
    if kept is not None:
        return kept
    with trio.move_on_after(BODY_READ_TIMEOUT_S):
        body = await _read_body(request, limit_bytes)
        setattr(request.state, BODY_STATE_ATTR, body)
        return body
    raise ApiError(
        408, "body_timeout", f"the request body did not arrive within {BODY_READ_TIMEOUT_S:g} s"
    )


async def _read_body(request: Request, limit_bytes: int) -> bytes:
    from starlette.requests import ClientDisconnect

    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = parse_decimal(declared, low=0, high=CONTENT_LENGTH_MAX)
        except ValueError:
            raise bad_request("Content-Length is not a number") from None
        if size > limit_bytes:
            raise too_large(limit_bytes)
    chunks: list[bytes] = []
    total = 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit_bytes:
                raise too_large(limit_bytes)
            chunks.append(chunk)
    except ClientDisconnect:
        raise bad_request("client disconnected while sending the body") from None
    return b"".join(chunks)


def parse_json(body: bytes, *, optional: bool = False) -> JsonValue:
    """The JSON value of ``body`` by the one JSON policy (:mod:`dagnats_trio.protocol.json_policy`:
    UTF-8, finite numbers, no lone surrogates, bounded nesting), or a 400 ``invalid_json`` that
    says where. An empty body is ``{}`` when ``optional`` (routes whose body fields all have
    defaults), else a 400."""
    if not body.strip():
        if not optional:
            raise bad_request("a JSON body is required", code="invalid_json")
        return {}
    try:
        return decode_json(body, where="body")
    except JsonPolicyError as exc:
        raise bad_request(str(exc), code="invalid_json") from None


def decode_body(raw: JsonValue, cls: type[T]) -> T:
    """``raw`` as an instance of the attrs class ``cls``, or a 400 naming what is wrong."""
    name = cls.__name__
    if not isinstance(raw, dict):
        raise bad_request("body must be a JSON object", code="invalid_body")
    fields = attrs.fields_dict(cls)  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    unknown = sorted(str(k) for k in raw if k not in fields)
    if unknown:
        allowed = ", ".join(sorted(fields))
        raise bad_request(
            f"unknown field(s) {listed_names(unknown)}; allowed: {allowed}", code="invalid_body"
        )
    for field_name, field in fields.items():
        if field_name not in raw:
            if field.default is attrs.NOTHING:
                raise bad_request(f"field {field_name!r} is required", code="invalid_body")
            continue
        expected = hints.get(field_name, Any)
        if not _matches(raw[field_name], expected):
            raise bad_request(
                f"field {field_name!r} must be {_describe(expected)}", code="invalid_body"
            )
    try:
        return from_obj(raw, cls, name)
    except DecodeError as exc:
        raise bad_request(str(exc), code="invalid_body") from None


def _members(tp: Any) -> tuple[Any, ...]:
    origin = typing.get_origin(tp)
    if origin is Union or isinstance(tp, types.UnionType):
        return typing.get_args(tp)
    return (tp,)


def _matches(value: Any, tp: Any) -> bool:
    for member in _members(tp):
        if member is Any:
            return True
        if member is type(None) and value is None:
            return True
        if member is str and isinstance(value, str):
            return True
        if member is bool and isinstance(value, bool):
            return True
        if member is int and isinstance(value, int) and not isinstance(value, bool):
            return True
    return False


def _describe(tp: Any) -> str:
    names = {str: "a string", int: "an integer", bool: "true or false", type(None): "null"}
    return " or ".join(names.get(m, "a JSON value") for m in _members(tp))
