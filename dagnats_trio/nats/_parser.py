"""An incremental parser: bytes in with :meth:`Parser.receive_data`, events out.

It parses every operation of both directions (the role check lives in :mod:`._protocol`), so
tests can round-trip anything the encoder writes. It never buffers more than one control line
(bounded) plus one message (bounded by ``max_payload_bytes``), and after a
:class:`ProtocolError` it stays failed: the stream's framing is lost.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterator
from typing import Final, Literal, final

from ._errors import ProtocolError
from ._events import Err, Event, Msg, Ok, Ping, Pong, Pub, Sub, Unsub, parse_connect, parse_info
from ._headers import parse_headers
from ._limits import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    DELIVERY_MAX_PAYLOAD_FACTOR,
    MAX_CONTROL_LINE_BYTES,
    MAX_HEADER_BYTES,
    MAX_JSON_LINE_BYTES,
)


class NeedData(enum.Enum):
    """``next_event`` has nothing whole to return yet."""

    NEED_DATA = "NEED_DATA"


#: Returned by :meth:`Parser.next_event` until more bytes arrive.
NEED_DATA: Final = NeedData.NEED_DATA

_CRLF = b"\r\n"
_JSON_OPS = (b"INFO", b"CONNECT")
#: Compact the buffer once this many consumed bytes sit at its front.
_COMPACT_AFTER_BYTES = 64 * 1024


def _text(op: str, name: str, raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise ProtocolError(f"{op}: {name} {raw[:64]!r} is not UTF-8") from None


#: Digits a byte count may have (a terabyte is thirteen; max_payload is far below).
_MAX_SIZE_DIGITS = 12

#: A well-formed ``MSG`` / ``HMSG`` control line as the server writes one: upper case, one space
#: between the arguments, tokens cut where ``bytes.split`` cuts (``\\s`` of a bytes pattern is
#: its whitespace: space, tab, CR, LF, VT, FF), byte counts of plain digits, CRLF. ``HMSG``'s
#: reply is told from its header size by the count of arguments, as the slow path tells it.
_MSG_LINE = re.compile(rb"MSG (\S+) (\S+) (?:(\S+) )?([0-9]{1,%d})\r\n" % _MAX_SIZE_DIGITS)
_HMSG_LINE = re.compile(
    rb"HMSG (\S+) (\S+) (?:(\S+) )?([0-9]{1,%d}) ([0-9]{1,%d})\r\n"
    % (_MAX_SIZE_DIGITS, _MAX_SIZE_DIGITS)
)
#: The first byte of ``MSG`` and of ``HMSG``: which expression to try.
_M = ord("M")
_H = ord("H")


def _size(op: str, name: str, raw: bytes) -> int:
    if not raw.isdigit() or len(raw) > _MAX_SIZE_DIGITS:
        raise ProtocolError(f"{op}: {name} {raw[:32]!r} is not a byte count")
    return int(raw)


#: A MSG/HMSG/PUB/HPUB whose control line is parsed and whose payload is awaited:
#: ``(is_msg, subject, sid, reply, header_bytes, total_bytes)``. A plain tuple, made once per
#: message on the hot path, where a class costs an ``__init__`` call.
_Pending = tuple[bool, str, str, str | None, int | None, int]


@final
class Parser:
    """Incremental NATS parser. ``max_payload_bytes`` may be raised or lowered at any time (the
    client protocol sets it from the server's INFO).

    ``on_control``, if given, is called with each event that is not a :class:`Msg` as soon as
    :meth:`next_events` parses it, before it parses on (the client protocol checks the event
    and takes an INFO's limits there); a :class:`ProtocolError` it raises fails the parser like
    its own. Without it :meth:`next_events` stops after such an event."""

    def __init__(
        self,
        *,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        max_control_line_bytes: int = MAX_CONTROL_LINE_BYTES,
        on_control: Callable[[Event], None] | None = None,
    ) -> None:
        self._on_control = on_control
        self.max_payload_bytes = max_payload_bytes
        self.max_control_line_bytes = max_control_line_bytes
        self._buf = bytearray()
        self._pos = 0
        self._pending: _Pending | None = None
        self._error: ProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet returned as events."""
        return len(self._buf) - self._pos

    def receive_data(self, data: bytes | bytearray) -> None:
        """Add bytes read from the peer (:meth:`feed` adds them and parses, in one call)."""
        if self._pos >= _COMPACT_AFTER_BYTES:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def events(self) -> Iterator[Event]:
        """Every whole event buffered, in order."""
        while True:
            event = self.next_event()
            if event is NEED_DATA:
                return
            yield event

    def next_event(self) -> Event | Literal[NeedData.NEED_DATA]:
        """The next whole event, or :data:`NEED_DATA` (``on_control`` is not called: the
        caller acts on the event)."""
        events = self.feed(first_only=True)
        return events[0] if events else NEED_DATA

    def next_events(self) -> list[Event]:
        """The whole events buffered, in order; empty when none is whole. One call per read
        instead of one per event. An event that is not a :class:`Msg` goes to ``on_control``
        before the rest is parsed (an INFO may change the limits); without ``on_control`` the
        list ends with it, for the caller to act on before it calls again."""
        return self.feed()

    def feed(self, data: bytes | bytearray = b"", *, first_only: bool = False) -> list[Event]:
        """Add ``data`` (bytes read from the peer) and return the whole events buffered, as
        :meth:`receive_data` then :meth:`next_events` do: the reader's one call per read, with
        every message of the read parsed in this frame (no call per message). ``first_only``
        returns at most one event, and calls no ``on_control`` (:meth:`next_event`).

        When nothing is buffered (how a read usually starts: the last one ended on a whole
        event), a read given as ``bytes`` is parsed where it lies: no copy into the buffer, and
        each payload is one slice of it (from the buffer it is a slice and a copy). Only what
        is left of it after its last whole event is kept in the buffer."""
        if self._error is not None:
            raise self._error
        own = self._buf
        buf: bytes | bytearray
        read = b""  # the read parsed where it lies (``buf`` itself, typed as bytes)
        if not own and type(data) is bytes:
            if not data:
                return []
            buf = read = data
        else:
            if self._pos >= _COMPACT_AFTER_BYTES:
                del own[: self._pos]
                self._pos = 0
            own += data
            buf = own
        pos = self._pos
        size = len(buf)  # once per call: nothing below adds to or removes from ``buf``
        out: list[Event] = []
        try:
            while True:
                pending = self._pending
                if pending is None:
                    if pos == size:
                        return out  # all consumed: nothing to scan
                    # The hot path, in this frame: a well-formed ``MSG``/``HMSG`` line (every
                    # reply and delivery) matched where it lies, in one regular expression (no
                    # copy of the line, no split). Anything else, or anything odd about it (a
                    # lower-case op, a tab or two spaces between arguments, a wrong argument
                    # count, a size that is no plain count, a bound passed, a token that is not
                    # UTF-8, a line not yet whole), leaves ``pending`` None and
                    # :meth:`_parse_line` parses it, raising its own errors; so this only skips
                    # work, never a check.
                    first = buf[pos]
                    match = None
                    header_bytes: int | None = None
                    total = 0
                    if first == _M:
                        match = _MSG_LINE.match(buf, pos)
                        if match is not None:
                            total = int(match[4])
                    elif first == _H:
                        match = _HMSG_LINE.match(buf, pos)
                        if match is not None:
                            header_bytes = int(match[4])
                            total = int(match[5])
                            if header_bytes > total or header_bytes > MAX_HEADER_BYTES:
                                match = None
                    if match is not None:
                        end = match.end()
                        if (
                            total
                            <= DELIVERY_MAX_PAYLOAD_FACTOR * self.max_payload_bytes
                            + MAX_HEADER_BYTES
                            and end - pos - 2 <= self.max_control_line_bytes
                        ):
                            reply = match[3]  # the groups by subscript: no call, unlike groups()
                            try:
                                pending = (
                                    True,
                                    match[1].decode(),
                                    match[2].decode(),
                                    None if reply is None else reply.decode(),
                                    header_bytes,
                                    total,
                                )
                            except UnicodeDecodeError:
                                pass
                            else:
                                pos = end  # the payload follows
                    if pending is None:
                        end = buf.find(_CRLF, pos)
                        if end < 0:
                            self._check_partial_line(buf, pos)
                            return out
                        line = bytes(buf[pos:end])
                        pos = end + 2
                        event = self._parse_line(line)
                        if event is None:
                            pending = self._pending
                            assert pending is not None
                        else:
                            out.append(event)
                            if first_only or self._on_control is None:
                                return out
                            self._on_control(event)
                            continue
                is_msg, subject, sid, reply_text, header_size, total_bytes = pending
                stop = pos + total_bytes
                if size < stop + 2:
                    self._pending = pending  # the payload is awaited
                    return out
                if buf[stop : stop + 2] != _CRLF:
                    op = ("H" if header_size is not None else "") + ("MSG" if is_msg else "PUB")
                    raise ProtocolError(
                        f"{op}: payload of {total_bytes} bytes not followed by CRLF"
                    )
                headers = None
                if buf is own:  # a slice of a bytearray is one: copied out as bytes
                    if header_size is not None:
                        headers = parse_headers(bytes(buf[pos : pos + header_size]))
                        pos += header_size
                    payload = bytes(buf[pos:stop])
                else:
                    if header_size is not None:
                        headers = parse_headers(read[pos : pos + header_size])
                        pos += header_size
                    payload = read[pos:stop]
                pos = stop + 2
                self._pending = None
                if is_msg:
                    out.append(Msg(subject, sid, payload, reply_text, headers))
                else:
                    pub = Pub(subject, payload, reply_text, headers)
                    out.append(pub)
                    if first_only or self._on_control is None:
                        return out
                    self._on_control(pub)
                if first_only:
                    return out
        except ProtocolError as exc:
            self._error = exc
            raise
        finally:
            # Where parsing stopped. The buffer is emptied once all of it is consumed; of a
            # read parsed where it lay, what is left (an event not yet whole) is kept.
            if buf is own:
                if pos == size:
                    del own[:]  # a statement, not a call: emptied in place
                    pos = 0
            elif pos < size:
                own += buf[pos:]
                pos = 0
            else:
                pos = 0
            self._pos = pos

    # --- internals ------------------------------------------------------------------------

    def _check_partial_line(self, buf: bytes | bytearray, pos: int) -> None:
        waiting = len(buf) - pos
        if waiting <= self.max_control_line_bytes + 1:  # +1: a CR whose LF has not come
            return
        head = bytes(buf[pos : pos + 8]).upper()
        if head.startswith(_JSON_OPS) and waiting <= MAX_JSON_LINE_BYTES + 1:
            return
        raise ProtocolError(
            f"control line {head!r}... over {self.max_control_line_bytes} bytes without CRLF"
        )

    def _parse_line(self, line: bytes) -> Event | None:
        parts = line.split(None, 1)
        op_raw = parts[0] if parts else b""
        rest = parts[1] if len(parts) == 2 else b""
        op = op_raw.upper()
        limit = MAX_JSON_LINE_BYTES if op in _JSON_OPS else self.max_control_line_bytes
        if len(line) > limit:
            raise ProtocolError(f"{op[:16]!r}: control line of {len(line)} bytes, over {limit}")
        if op == b"MSG":
            self._parse_msg(rest.split(), headers=False)
            return None
        if op == b"HMSG":
            self._parse_msg(rest.split(), headers=True)
            return None
        if op == b"PUB":
            self._parse_pub(rest.split(), headers=False)
            return None
        if op == b"HPUB":
            self._parse_pub(rest.split(), headers=True)
            return None
        if op in (b"PING", b"PONG", b"+OK"):
            if rest.strip():
                raise ProtocolError(f"{op.decode()}: takes no arguments, got {rest[:32]!r}")
            return Ping() if op == b"PING" else Pong() if op == b"PONG" else Ok()
        if op == b"-ERR":
            text = rest.strip(b" \t")
            if len(text) >= 2 and text.startswith(b"'") and text.endswith(b"'"):
                text = text[1:-1]
            return Err(_text("-ERR", "message", text))
        if op == b"SUB":
            return self._parse_sub(rest.split())
        if op == b"UNSUB":
            return self._parse_unsub(rest.split())
        if op == b"INFO":
            return parse_info(rest)
        if op == b"CONNECT":
            return parse_connect(rest)
        raise ProtocolError(f"unknown operation {op_raw[:16]!r}")

    def _check_sizes(self, op: str, header_bytes: int | None, total_bytes: int) -> None:
        """A publish within ``max_payload``, as the server bounds it; a delivery within
        :data:`DELIVERY_MAX_PAYLOAD_FACTOR` of it (the server's own headers and envelopes)."""
        if op in ("MSG", "HMSG"):
            bound = DELIVERY_MAX_PAYLOAD_FACTOR * self.max_payload_bytes + MAX_HEADER_BYTES
            if total_bytes > bound:
                raise ProtocolError(
                    f"{op}: {total_bytes} bytes of payload, over {bound} (max_payload "
                    f"{self.max_payload_bytes}, times {DELIVERY_MAX_PAYLOAD_FACTOR}, plus a "
                    f"header block)"
                )
        elif total_bytes > self.max_payload_bytes:
            raise ProtocolError(
                f"{op}: {total_bytes} bytes of payload, over max_payload {self.max_payload_bytes}"
            )
        if header_bytes is not None:
            if header_bytes > total_bytes:
                raise ProtocolError(
                    f"{op}: header size {header_bytes} over total size {total_bytes}"
                )
            if header_bytes > MAX_HEADER_BYTES:
                raise ProtocolError(f"{op}: header size {header_bytes} over {MAX_HEADER_BYTES}")

    def _parse_msg(self, args: list[bytes], *, headers: bool) -> None:
        op = "HMSG" if headers else "MSG"
        sizes = 2 if headers else 1
        if len(args) not in (2 + sizes, 3 + sizes):
            raise ProtocolError(f"{op}: {len(args)} arguments, expected {2 + sizes} or {3 + sizes}")
        subject = _text(op, "subject", args[0])
        sid = _text(op, "sid", args[1])
        reply = _text(op, "reply", args[2]) if len(args) == 3 + sizes else None
        total = _size(op, "total size" if headers else "size", args[-1])
        header_bytes = _size(op, "header size", args[-2]) if headers else None
        self._check_sizes(op, header_bytes, total)
        self._pending = (True, subject, sid, reply, header_bytes, total)

    def _parse_pub(self, args: list[bytes], *, headers: bool) -> None:
        op = "HPUB" if headers else "PUB"
        sizes = 2 if headers else 1
        if len(args) not in (1 + sizes, 2 + sizes):
            raise ProtocolError(f"{op}: {len(args)} arguments, expected {1 + sizes} or {2 + sizes}")
        subject = _text(op, "subject", args[0])
        reply = _text(op, "reply", args[1]) if len(args) == 2 + sizes else None
        total = _size(op, "total size" if headers else "size", args[-1])
        header_bytes = _size(op, "header size", args[-2]) if headers else None
        self._check_sizes(op, header_bytes, total)
        self._pending = (False, subject, "", reply, header_bytes, total)

    def _parse_sub(self, args: list[bytes]) -> Sub:
        if len(args) not in (2, 3):
            raise ProtocolError(f"SUB: {len(args)} arguments, expected 2 or 3")
        subject = _text("SUB", "subject", args[0])
        queue = _text("SUB", "queue", args[1]) if len(args) == 3 else None
        return Sub(subject, _text("SUB", "sid", args[-1]), queue)

    def _parse_unsub(self, args: list[bytes]) -> Unsub:
        if len(args) not in (1, 2):
            raise ProtocolError(f"UNSUB: {len(args)} arguments, expected 1 or 2")
        max_msgs = _size("UNSUB", "max_msgs", args[1]) if len(args) == 2 else None
        return Unsub(_text("UNSUB", "sid", args[0]), max_msgs)
