"""NATS message headers (ADR-4): a ``NATS/1.0`` line with an optional status, then fields.

A status line is ``NATS/1.0 503`` or ``NATS/1.0 408 Request Timeout``: three digits and an
optional description. Keys may repeat, so fields are an ordered tuple of pairs, not a dict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import final

import attrs

from ._errors import ProtocolError, utf8
from ._limits import MAX_HEADER_BYTES

#: The version line every header block starts with.
HEADER_VERSION = b"NATS/1.0"

#: Status of a control message sent on idle subscriptions (JetStream consumers).
IDLE_HEARTBEAT_STATUS = 100
#: End of a batch direct get.
END_OF_BATCH_STATUS = 204
#: A pull request expired or was not satisfied.
REQUEST_TIMEOUT_STATUS = 408
#: Conflict (for example a pull consumer's limits were exceeded).
CONFLICT_STATUS = 409
#: A request found no subscriber on its subject.
NO_RESPONDERS_STATUS = 503

_CRLF = b"\r\n"
#: Bytes a header name may hold: printable ASCII (33-126) but ':'.
_NAME_BYTES = frozenset(range(33, 127)) - {ord(":")}


def _check_key(key: str, where: str) -> None:
    if not key:
        raise ProtocolError(f"{where}: empty header name")
    # Printable ASCII (33-126) without ':'; tested whole first (it is on every request's path),
    # character by character only to name the bad one.
    if key.isascii() and key.isprintable() and " " not in key and ":" not in key:
        return
    for ch in key:
        code = ord(ch)
        if code < 33 or code > 126 or ch == ":":
            raise ProtocolError(f"{where}: header name {key!r} has invalid character {ch!r}")


def _check_value(value: str, where: str) -> None:
    if "\r" in value or "\n" in value:
        raise ProtocolError(f"{where}: header value {value!r} contains CR or LF")
    if value != value.strip(" \t"):
        raise ProtocolError(f"{where}: header value {value!r} has surrounding whitespace")


@final
@attrs.frozen
class Headers:
    """A header block: status (``None`` for a plain block), its description, ordered fields."""

    fields: tuple[tuple[str, str], ...] = ()
    status: int | None = None
    description: str = ""

    def get(self, key: str) -> str | None:
        """The first value of ``key`` (names compare case-insensitively), or ``None``."""
        folded = key.lower()
        for name, value in self.fields:
            if name.lower() == folded:
                return value
        return None

    def get_all(self, key: str) -> tuple[str, ...]:
        """Every value of ``key``, in order."""
        folded = key.lower()
        return tuple(value for name, value in self.fields if name.lower() == folded)

    @classmethod
    def of(cls, mapping: Mapping[str, str] | None = None, /, **fields: str) -> Headers:
        """Build a plain (status-less) block from a mapping."""
        items = dict(mapping or {}, **fields)
        return cls(fields=tuple(items.items()))


def as_headers(headers: Headers | Mapping[str, str]) -> Headers:
    """``headers`` as a :class:`Headers` block (a mapping's fields in its order)."""
    return headers if type(headers) is Headers else Headers.of(headers)


#: The version line of a block without a status.
_PLAIN_VERSION_LINE = HEADER_VERSION.decode() + "\r\n"


def encode_headers(headers: Headers | Mapping[str, str]) -> bytes:
    """The wire bytes of ``headers``, ending with the blank line: a :class:`Headers` block, or
    a mapping of fields (a plain block, in the mapping's order: what a caller holding its
    headers as a dict sends without building a :class:`Headers` per message).

    A block without a status (every request's) is spelled as text and encoded once; a name
    is tested whole in this frame (printable ASCII, no space, no ``:``: two string methods, no
    call of ours; no process-wide memo of names seen), and a value with ``in`` and indexing (no
    calls). Anything else, and a block that is not UTF-8 (a lone surrogate), goes through
    :func:`_encode_headers_checked`, which names what cannot be sent."""
    if type(headers) is Headers:
        if headers.status is not None or headers.description:
            return _encode_headers_checked(headers)
        fields: Iterable[tuple[str, str]] = headers.fields
    else:
        fields = headers.items()
    text = _PLAIN_VERSION_LINE
    try:
        for key, value in fields:
            if not (
                key and key.isascii() and key.isprintable() and " " not in key and ":" not in key
            ):
                _check_key(key, "headers")  # raises: an empty name, or which character
            if (
                "\r" in value
                or "\n" in value
                or (value and (value[0] in " \t" or value[-1] in " \t"))
            ):
                _check_value(value, "headers")
            text += f"{key}: {value}\r\n"
        block = (text + "\r\n").encode()
    except (ProtocolError, UnicodeEncodeError):
        # The part-by-part encoding raises the error of the first part that is wrong.
        return _encode_headers_checked(as_headers(headers))
    if len(block) > MAX_HEADER_BYTES:
        raise ProtocolError(f"headers: {len(block)} bytes, more than {MAX_HEADER_BYTES}")
    return block


def _encode_headers_checked(headers: Headers) -> bytes:
    """:func:`encode_headers` part by part, naming the part that cannot be sent."""
    parts = [HEADER_VERSION]
    if headers.status is not None:
        if not 100 <= headers.status <= 999:
            raise ProtocolError(f"headers: status {headers.status} is not three digits")
        parts.append(b" %d" % headers.status)
        if headers.description:
            _check_value(headers.description, "headers status description")
            parts.append(b" " + utf8(headers.description, "headers: status description"))
    elif headers.description:
        raise ProtocolError("headers: a description needs a status")
    parts.append(_CRLF)
    for key, value in headers.fields:
        # The common case tested inline (on every request's path); the helpers name what is
        # wrong otherwise.
        if not (key and key.isascii() and key.isprintable() and " " not in key and ":" not in key):
            _check_key(key, "headers")
        if "\r" in value or "\n" in value or value != value.strip(" \t"):
            _check_value(value, "headers")
        parts.append(utf8(f"{key}: {value}\r\n", "headers: field"))
    parts.append(_CRLF)
    block = b"".join(parts)
    if len(block) > MAX_HEADER_BYTES:
        raise ProtocolError(f"headers: {len(block)} bytes, more than {MAX_HEADER_BYTES}")
    return block


def _decode(raw: bytes, what: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"HMSG headers: {what} is not UTF-8 ({exc.reason})") from None


#: A header block as a server writes one: the version line, with a status written ``NATS/1.0
#: 404`` or ``NATS/1.0 404 No Messages`` (one space before the code and before a description,
#: none around it), then field lines ``name:value`` with a printable ASCII name (no ``:``) and
#: a value without CR or LF. Groups: the code, the description, the field lines. Such a block
#: is parsed with one match, one decode and one ``findall``; any other block, or one that is
#: not UTF-8, goes through the line-by-line parse, which names what is wrong.
_PLAIN_BLOCK = re.compile(
    rb"NATS/1\.0(?: ([0-9]{3})(?: ([^ \t\r\n](?:[^\r\n]*[^ \t\r\n])?))?)?\r\n"
    rb"((?:[!-9;-~]+:[^\r\n]*\r\n)*)\r\n"
)
#: One field line of such a block: the name, and the value without the spaces and tabs around
#: it (what ``strip(b" \t")`` leaves).
_PLAIN_FIELD = re.compile(r"([!-9;-~]+):[ \t]*((?:[^\r\n]*[^ \t\r\n])?)[ \t]*\r\n")


def parse_headers(block: bytes) -> Headers:
    """Parse one header block (as counted by HMSG's header size, blank line included)."""
    if len(block) > MAX_HEADER_BYTES:
        raise ProtocolError(f"HMSG headers: {len(block)} bytes, more than {MAX_HEADER_BYTES}")
    plain = _PLAIN_BLOCK.fullmatch(block)
    if plain is not None:
        code, description, lines = plain[1], plain[2], plain[3]  # no call, unlike groups()
        try:
            found = tuple(_PLAIN_FIELD.findall(lines.decode())) if lines else ()
            if code is None:
                return Headers(fields=found)
            return Headers(
                fields=found,
                status=int(code),
                description="" if description is None else description.decode(),
            )
        except UnicodeDecodeError:
            pass  # the line-by-line parse names the part that is not UTF-8
    if not block.endswith(b"\r\n\r\n"):
        raise ProtocolError("HMSG headers: block does not end with an empty line (CRLF CRLF)")
    lines = block[:-4].split(_CRLF)
    first = lines[0]
    if not first.startswith(HEADER_VERSION):
        raise ProtocolError(f"HMSG headers: version line {first[:32]!r} is not NATS/1.0")
    status: int | None = None
    description = ""
    rest = first[len(HEADER_VERSION) :]
    if rest:
        if rest[:1] not in (b" ", b"\t"):
            raise ProtocolError(f"HMSG headers: version line {first[:32]!r} is not NATS/1.0")
        rest = rest.strip(b" \t")
        code, _, desc = rest.partition(b" ")
        if len(code) != 3 or not code.isdigit():
            raise ProtocolError(f"HMSG headers: status {code[:16]!r} is not three digits")
        status = int(code)
        description = _decode(desc.strip(b" \t"), "status description")
    fields: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            raise ProtocolError(f"HMSG headers: line {line[:32]!r} has no colon")
        # The common case (a printable ASCII name, UTF-8 text) tested inline, on every
        # reply's path; the helpers name what is wrong otherwise.
        if name and _NAME_BYTES.issuperset(name):
            key = name.decode()
        else:
            key = _decode(name, "header name")
            _check_key(key, "HMSG headers")
        value = value.strip(b" \t")
        fields.append((key, value.decode() if value.isascii() else _decode(value, "header value")))
    return Headers(fields=tuple(fields), status=status, description=description)
