"""Events to wire bytes, checking every field that would otherwise corrupt the stream."""

from __future__ import annotations

from collections.abc import Mapping

from ._errors import ProtocolError, utf8
from ._events import (
    Connect,
    Err,
    Event,
    Info,
    Msg,
    Ok,
    Ping,
    Pong,
    Pub,
    Sub,
    Unsub,
    connect_json,
    info_json,
)
from ._headers import Headers, as_headers, encode_headers
from ._limits import DEFAULT_MAX_PAYLOAD_BYTES, MAX_CONTROL_LINE_BYTES, MAX_JSON_LINE_BYTES

_CRLF = b"\r\n"
#: ASCII whitespace: what the parser splits arguments on.
_FORBIDDEN_IN_TOKEN = frozenset(b" \t\r\n\x0b\x0c")

PING_BYTES = b"PING\r\n"
PONG_BYTES = b"PONG\r\n"
OK_BYTES = b"+OK\r\n"


def _token(op: str, name: str, value: str) -> bytes:
    raw = utf8(value, f"{op}: {name}")
    if not raw:
        raise ProtocolError(f"{op}: {name} is empty")
    if not _FORBIDDEN_IN_TOKEN.isdisjoint(raw):
        raise ProtocolError(f"{op}: {name} {value!r:.64} contains whitespace")
    return raw


def _line(op: str, parts: list[bytes]) -> bytes:
    line = b" ".join(parts)
    if len(line) > MAX_CONTROL_LINE_BYTES:
        raise ProtocolError(
            f"{op}: control line of {len(line)} bytes, over {MAX_CONTROL_LINE_BYTES}"
        )
    return line + _CRLF


def _message(
    op: str,
    head: list[bytes],
    payload: bytes,
    headers_block: bytes | None,
    max_payload_bytes: int,
) -> bytes:
    total = len(payload) + (0 if headers_block is None else len(headers_block))
    if total > max_payload_bytes:
        raise ProtocolError(f"{op}: {total} bytes of payload, over max_payload {max_payload_bytes}")
    if headers_block is None:
        return _line(op, [*head, b"%d" % total]) + payload + _CRLF
    line = _line("H" + op, [*head, b"%d" % len(headers_block), b"%d" % total])
    return line + headers_block + payload + _CRLF


def encode_pub(
    subject: str,
    payload: bytes,
    reply: str | None,
    headers: Headers | Mapping[str, str] | None,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> bytes:
    """The bytes of a PUB/HPUB, from its fields (no :class:`Pub` made: this is every request's
    path); ``headers`` a block or a mapping of fields (see :func:`encode_headers`). Plain
    tokens are framed in one pass; anything else goes through :func:`encode`'s field-by-field
    checks, which raise the errors (so the fast path only skips work, never a check)."""
    # Subject and reply are tested together (one string, one test of each kind) and encoded
    # together; each on its own has no space and is not empty.
    head = subject if reply is None else subject + " " + reply
    if (
        head.isascii()
        and head.isprintable()
        and subject
        and " " not in subject
        and (reply is None or (reply and " " not in reply))
    ):
        if headers is None:
            total = len(payload)
            line = f"PUB {head} {total}\r\n"
            if total <= max_payload_bytes and len(line) <= MAX_CONTROL_LINE_BYTES + 2:
                return line.encode() + payload + _CRLF
        else:
            block = encode_headers(headers)
            size = len(block)
            total = size + len(payload)
            line = f"HPUB {head} {size} {total}\r\n"
            if total <= max_payload_bytes and len(line) <= MAX_CONTROL_LINE_BYTES + 2:
                return line.encode() + block + payload + _CRLF
    pub = Pub(subject, payload, reply, None if headers is None else as_headers(headers))
    return _encode_checked(pub, max_payload_bytes)


def encode(event: Event, *, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> bytes:
    """The bytes of ``event``; :class:`ProtocolError` names a field that cannot be sent."""
    if type(event) is Pub:
        return encode_pub(
            event.subject, event.payload, event.reply, event.headers, max_payload_bytes
        )
    return _encode_checked(event, max_payload_bytes)


def _encode_checked(event: Event, max_payload_bytes: int) -> bytes:
    """:func:`encode`, every field checked one by one (naming the one that cannot be sent)."""
    if isinstance(event, Pub):
        head = [b"PUB", _token("PUB", "subject", event.subject)]
        if event.reply is not None:
            head.append(_token("PUB", "reply", event.reply))
        block = None if event.headers is None else encode_headers(event.headers)
        if block is not None:
            head[0] = b"HPUB"
        return _message("PUB", head, event.payload, block, max_payload_bytes)
    if isinstance(event, Msg):
        head = [b"MSG", _token("MSG", "subject", event.subject), _token("MSG", "sid", event.sid)]
        if event.reply is not None:
            head.append(_token("MSG", "reply", event.reply))
        block = None if event.headers is None else encode_headers(event.headers)
        if block is not None:
            head[0] = b"HMSG"
        return _message("MSG", head, event.payload, block, max_payload_bytes)
    if isinstance(event, Sub):
        parts = [b"SUB", _token("SUB", "subject", event.subject)]
        if event.queue is not None:
            parts.append(_token("SUB", "queue", event.queue))
        parts.append(_token("SUB", "sid", event.sid))
        return _line("SUB", parts)
    if isinstance(event, Unsub):
        parts = [b"UNSUB", _token("UNSUB", "sid", event.sid)]
        if event.max_msgs is not None:
            if event.max_msgs < 0:
                raise ProtocolError(f"UNSUB: max_msgs {event.max_msgs} is negative")
            parts.append(b"%d" % event.max_msgs)
        return _line("UNSUB", parts)
    if isinstance(event, Ping):
        return PING_BYTES
    if isinstance(event, Pong):
        return PONG_BYTES
    if isinstance(event, Ok):
        return OK_BYTES
    if isinstance(event, Err):
        if "\r" in event.message or "\n" in event.message:
            raise ProtocolError(f"-ERR: message {event.message!r:.64} contains CR or LF")
        return _line("-ERR", [b"-ERR", b"'" + utf8(event.message, "-ERR: message") + b"'"])
    if isinstance(event, Info | Connect):
        op = "INFO" if isinstance(event, Info) else "CONNECT"
        body = info_json(event) if isinstance(event, Info) else connect_json(event)
        line = op.encode() + b" " + body
        if len(line) > MAX_JSON_LINE_BYTES:
            raise ProtocolError(f"{op}: {len(line)} bytes, over {MAX_JSON_LINE_BYTES}")
        return line + _CRLF
    raise ProtocolError(f"cannot encode {event!r:.64}")  # pragma: no cover - Event is closed
