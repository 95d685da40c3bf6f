"""One cattrs converter for every wire shape, and a decoder that never crashes its reader."""

from __future__ import annotations

import json
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.strategies import configure_tagged_union

T = TypeVar("T")

#: A JSON value as Python holds it (dict, list, str, int, float, bool, None).
JsonValue = Any

TAG_FIELD = "type"


class DecodeError(ValueError):
    """A message on the wire is not valid JSON or not the expected shape."""


def _make_converter() -> cattrs.Converter:
    return cattrs.Converter(omit_if_default=False, forbid_extra_keys=False)


converter = _make_converter()


def register_union(union: Any) -> None:
    """Tag every member of ``union`` by its ``TYPE`` class attribute, under the key ``type``."""
    configure_tagged_union(
        union,
        converter,
        tag_generator=lambda cls: str(getattr(cls, "TYPE")),  # noqa: B009
        tag_name=TAG_FIELD,
    )


def to_json(value: Any, cls: Any = None) -> bytes:
    """Encode an attrs instance (or union member, when ``cls`` names the union) as JSON bytes."""
    raw = (
        converter.unstructure(value, unstructure_as=cls)
        if cls is not None
        else (converter.unstructure(value))
    )
    return json.dumps(raw, separators=(",", ":"), ensure_ascii=False).encode()


def from_json(data: bytes | str, cls: type[T] | Any, what: str | None = None) -> T:
    """Decode ``data`` as ``cls``; any problem becomes a readable :class:`DecodeError`."""
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DecodeError(f"not valid JSON: {exc}") from None
    result: T = from_obj(raw, cls, what)
    return result


def from_obj(raw: Any, cls: type[T] | Any, what: str | None = None) -> T:
    """Structure an already-parsed JSON value as ``cls``; problems become :class:`DecodeError`."""
    if (not isinstance(raw, dict) and attrs.has(cls)) or (
        what is not None and not isinstance(raw, dict)
    ):
        raise DecodeError(f"not a valid {what or cls.__name__}: expected a JSON object")
    try:
        return converter.structure(raw, cls)  # type: ignore[no-any-return]
    except Exception as exc:  # cattrs raises ClassValidationError, KeyError, TypeError, ...
        raise DecodeError(f"not a valid {what or _name(cls)}: {_describe(exc)}") from None


def _name(cls: Any) -> str:
    return getattr(cls, "__name__", None) or str(cls)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, cattrs.ClassValidationError | cattrs.IterableValidationError):
        parts = cattrs.transform_error(exc)
        return "; ".join(parts)
    if isinstance(exc, KeyError):
        return f"missing or unknown {exc}"
    return str(exc) or type(exc).__name__
