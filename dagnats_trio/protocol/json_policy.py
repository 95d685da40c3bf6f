"""The one JSON policy: what counts as a JSON value anywhere a value enters or leaves the system.

Python's ``json`` module is more lenient than JSON (RFC 8259) and than the other readers of our
data: it reads ``NaN`` and ``Infinity``, turns ``1e400`` into ``inf``, decodes bytes with
``surrogatepass`` and lets ``"\\ud800"`` through as a lone surrogate, which then cannot be
encoded as UTF-8. A value like that was stored and served back as invalid JSON, or failed later
with a 500. Every door therefore goes through this module: REST and bridge bodies, the NATS
``api.*`` requests, inputs, checkpoints, run inputs, signal payloads, journal values (through
``canonical_json``), the CLI's JSON arguments. What the runtime reads back from NATS was written
through these doors, so :func:`~dagnats_trio.protocol.from_json` reads it without the walk.

The rules:

- bytes are UTF-8, strictly (no surrogates, no overlongs, no BOM);
- numbers are finite: no ``NaN``, ``Infinity``, ``-Infinity``, no float literal beyond the
  double range (``1e400``), and no integer outside the signed 64-bit range (what the Go
  reference and most JSON readers can hold);
- strings and object keys hold no lone surrogate; object keys are strings;
- nesting is at most :data:`MAX_JSON_DEPTH` levels.

Errors name where the value broke the rule, as a path from the value's name (``input.a[2]``).
Pure: no I/O.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final, final

__all__ = [
    "JSON_INT_MAX",
    "JSON_INT_MIN",
    "MAX_JSON_DEPTH",
    "JsonPolicyError",
    "canonical_json_text",
    "check_json",
    "decode_json",
    "encode_json",
]

#: Nesting depth beyond which a value is refused (the stdlib parser recurses).
MAX_JSON_DEPTH: Final = 64
#: The integer range accepted: a signed 64-bit integer.
JSON_INT_MIN: Final = -(2**63)
JSON_INT_MAX: Final = 2**63 - 1

#: Most steps of a path shown in an error (a path may be as deep as the nesting).
PATH_SHOWN_MAX_PARTS: Final = 12
#: Longest object key quoted in an error's path (a key may be as long as the body).
KEY_SHOWN_MAX_CHARS: Final = 40

_SURROGATE = re.compile("[\ud800-\udfff]")
#: Both encoders write only values :func:`check_json` passed: nested at most
#: :data:`MAX_JSON_DEPTH` levels, so without a cycle, and their own circular-reference check
#: (an insert and a delete in a dict of ids per container written) is left off.
_ENCODER = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, check_circular=False
)
#: The one spelling per value: :data:`_ENCODER`'s, keys sorted.
_CANONICAL = json.JSONEncoder(
    separators=(",", ":"),
    ensure_ascii=False,
    allow_nan=False,
    sort_keys=True,
    check_circular=False,
)


@final
class JsonPolicyError(ValueError):
    """A value that is not JSON by the policy. ``where`` names the place (``body.input[0]``),
    ``reason`` what is wrong with it."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


class _Rejected:
    """What the tolerant second parse puts where the strict one refused a number."""

    def __init__(self, text: str) -> None:
        self.text = text


def _reject_constant(text: str) -> Any:
    raise _NotFinite(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(text)
    return value


class _NotFinite(Exception):
    pass


def _marked_float(text: str) -> float | _Rejected:
    value = float(text)
    return value if math.isfinite(value) else _Rejected(text)


#: Decoders are built once (``json.loads`` with options builds one per call).
_STRICT = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
_MARKING = json.JSONDecoder(parse_constant=_Rejected, parse_float=_marked_float)


def decode_json(data: bytes | str, *, where: str = "body") -> Any:
    """The JSON value of ``data``, or :class:`JsonPolicyError` naming what and where."""
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonPolicyError(where, f"not valid UTF-8 (at byte {exc.start})") from None
    else:
        text = data
    try:
        value = _STRICT.decode(text)
    except _NotFinite:
        # Parse again, marking the refused numbers, to say where the first one is.
        marked = _MARKING.decode(text)
        check_json(marked, where=where)
        raise JsonPolicyError(where, "a number is not finite") from None  # pragma: no cover
    except RecursionError:
        raise JsonPolicyError(where, f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise JsonPolicyError(where, f"not valid JSON: {exc}") from None
    # Text given as ``str`` (not bytes) may also hold a raw lone surrogate.
    raw_surrogate = text is data and not text.isascii() and _SURROGATE.search(text) is not None
    if raw_surrogate or _needs_walk(text):
        check_json(value, where=where)
    return value


#: A ``\uD800``-``\uDFFF`` escape (the only way a lone surrogate gets into decoded text), and a
#: run of digits long enough to leave the 64-bit range.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONG_DIGITS = re.compile(r"[0-9]{19}")


def _needs_walk(text: str) -> bool:
    """Whether the JSON ``text`` (or the encoding of a value) may break a rule the parser or the
    encoder does not check itself. Cheap scans of the text, so the walk over every node of
    :func:`check_json` runs only for the few values that could fail it; the bracket count is a
    bound on the depth (brackets inside strings only make it larger)."""
    return (
        text.count("[") + text.count("{") > MAX_JSON_DEPTH
        or ("\\u" in text and _SURROGATE_ESCAPE.search(text) is not None)
        or _LONG_DIGITS.search(text) is not None
    )


def check_json(value: Any, *, where: str = "value") -> None:
    """Raise :class:`JsonPolicyError` unless ``value`` (as Python holds it: dict, list or tuple,
    str, int, float, bool, None; object keys strings) is JSON by the policy."""
    # Containers only: each with its depth and its path as (parent path, key) links, turned
    # into text only when something is wrong. The exact built-in kinds are told apart by
    # ``type(...) is``, without a call; ``isinstance`` only for anything else (a subclass).
    kind = type(value)
    if kind is not dict and kind is not list:
        _check_scalar(value, where, None)
        if not isinstance(value, dict | list | tuple):
            return
    stack: list[tuple[Any, int, Any]] = [(value, 1, None)]
    while stack:
        item, depth, path = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise JsonPolicyError(
                _where(where, path), f"nested deeper than {MAX_JSON_DEPTH} levels"
            )
        pairs: Any
        kind = type(item)
        if kind is dict or (kind is not list and isinstance(item, dict)):
            for key in item:
                if type(key) is not str:
                    raise JsonPolicyError(
                        _where(where, path), f"object key {key!r} is not a string"
                    )
                if not key.isascii() and _SURROGATE.search(key):
                    raise JsonPolicyError(
                        _where(where, path), "an object key holds a lone surrogate"
                    )
            pairs = item.items()
        else:
            pairs = enumerate(item)
        for key, child in pairs:
            kind = type(child)
            # The common kinds are settled here without a call; the rest by _check_scalar.
            if kind is str:
                if child.isascii():
                    continue
            elif kind is dict or kind is list or kind is tuple:
                stack.append((child, depth + 1, (path, key)))
                continue
            elif kind is bool or child is None:
                continue
            elif kind is int:
                if JSON_INT_MIN <= child <= JSON_INT_MAX:
                    continue
            elif kind is float:
                if child - child == 0.0:  # finite (inf - inf and nan - nan are nan)
                    continue
            elif isinstance(child, dict | list | tuple):
                # A subclass of a container (an OrderedDict, a named tuple) is walked too.
                stack.append((child, depth + 1, (path, key)))
                continue
            _check_scalar(child, where, (path, key))


def _check_scalar(item: Any, where: str, path: Any) -> None:
    if item is None or isinstance(item, bool | dict | list | tuple):
        return
    if isinstance(item, str):
        if not item.isascii() and _SURROGATE.search(item):
            raise JsonPolicyError(_where(where, path), "a string holds a lone surrogate")
    elif isinstance(item, int):
        if not JSON_INT_MIN <= item <= JSON_INT_MAX:
            raise JsonPolicyError(
                _where(where, path), "an integer is outside the signed 64-bit range"
            )
    elif isinstance(item, float):
        if not math.isfinite(item):
            raise JsonPolicyError(
                _where(where, path), f"{item!r} is not a JSON number (finite numbers only)"
            )
    elif isinstance(item, _Rejected):
        raise JsonPolicyError(
            _where(where, path), f"{item.text} is not a JSON number (finite numbers only)"
        )
    else:
        raise JsonPolicyError(_where(where, path), f"a {type(item).__name__} is not a JSON value")


def _where(root: str, path: Any) -> str:
    parts: list[str] = []
    while path is not None:
        path, key = path
        if isinstance(key, int):
            parts.append(f"[{key}]")
        else:
            shown = key if len(key) <= KEY_SHOWN_MAX_CHARS else key[:KEY_SHOWN_MAX_CHARS] + "..."
            parts.append(f".{shown}")
    parts.reverse()
    if len(parts) > PATH_SHOWN_MAX_PARTS:
        parts[PATH_SHOWN_MAX_PARTS:] = ["..."]
    return root + "".join(parts)


def encode_json(value: Any, *, where: str = "value") -> bytes:
    """Compact UTF-8 JSON of ``value``, which must pass :func:`check_json` (one spelling of what
    is stored: no spaces, non-ASCII kept as is)."""
    check_json(value, where=where)
    return _ENCODER.encode(value).encode("utf-8")


def canonical_json_text(value: Any, *, where: str = "value") -> str:
    """One spelling per JSON value (keys sorted, compact, non-ASCII kept as is), so values
    compare as JSON, not as Python (where ``True == 1``); :class:`JsonPolicyError` unless
    ``value`` passes :func:`check_json`."""
    check_json(value, where=where)
    return _CANONICAL.encode(value)
