"""The client side of one NATS connection, sans I/O (h11's ``Connection``, for NATS).

Bytes from the socket go in with :meth:`ClientProtocol.receive_data`; events come out of
:meth:`ClientProtocol.next_event`; :meth:`ClientProtocol.send` turns an event into the bytes to
write. It knows which operations each side may send, and the server's limits from INFO: a payload
over ``max_payload`` is refused before it is written, and headers only go to a server that takes
them. The caller owns the socket, the clock and every wait.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Literal, Protocol, final

from ._encoder import encode, encode_pub
from ._errors import ProtocolError
from ._events import CLIENT_EVENTS, SERVER_EVENTS, Event, Info, Msg, Pub
from ._headers import Headers
from ._limits import DEFAULT_MAX_PAYLOAD_BYTES
from ._parser import NeedData, Parser


class _SendPub(Protocol):
    """What :attr:`ClientProtocol.send_pub` is: the bytes of a PUB/HPUB from its fields."""

    def __call__(
        self,
        subject: str,
        payload: bytes,
        reply: str | None,
        headers: Headers | Mapping[str, str] | None,
        /,
    ) -> bytes: ...


@final
class ClientProtocol:
    """Protocol state of a client: the last INFO, the server's limits, the parser."""

    def __init__(self) -> None:
        self._parser = Parser(on_control=self._check_server_event)
        #: Add bytes read from the server: the parser's own method (no call in between, on
        #: every read).
        self.receive_data: Callable[[bytes | bytearray], None] = self._parser.receive_data
        #: Every whole event from the server buffered, in order (empty when none is whole): the
        #: parser's own method, one call per read; an event that is not a MSG is checked (and
        #: an INFO's limits taken) as it is parsed, before the events after it.
        self.events: Callable[[], list[Event]] = self._parser.next_events
        #: :attr:`receive_data` then :attr:`events`, in one call of the parser's own method:
        #: the reader's, once per read.
        self.feed: Callable[[bytes | bytearray], list[Event]] = self._parser.feed
        self._info: Info | None = None
        # Kept as a plain attribute (read on every PUB): the INFO's limit once one came.
        self._max_payload_bytes = DEFAULT_MAX_PAYLOAD_BYTES
        self._bind_send_pub()

    @property
    def info(self) -> Info | None:
        """The server's last INFO, or ``None`` before the first."""
        return self._info

    @property
    def max_payload_bytes(self) -> int:
        """The largest message (headers and payload) the server takes."""
        return self._max_payload_bytes

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet returned as events."""
        return self._parser.buffered_bytes

    def next_event(self) -> Event | Literal[NeedData.NEED_DATA]:
        """The next event from the server, or ``NEED_DATA``."""
        event = self._parser.next_event()
        if type(event) is Msg:  # the hot path: every reply and delivery
            return event
        if isinstance(event, NeedData):
            return event
        self._check_server_event(event)
        return event

    def _check_server_event(self, event: Event) -> None:
        if not isinstance(event, SERVER_EVENTS):
            raise ProtocolError(f"{type(event).__name__.upper()}: not sent by a server")
        if isinstance(event, Info):
            self._info = event
            self._max_payload_bytes = event.max_payload
            self._parser.max_payload_bytes = event.max_payload
            self._bind_send_pub()

    def send(self, event: Event) -> bytes:
        """The bytes that send ``event`` to the server."""
        if type(event) is not Pub and not isinstance(event, CLIENT_EVENTS):
            raise ProtocolError(f"{type(event).__name__.upper()}: not sent by a client")
        if (
            isinstance(event, Pub)
            and event.headers is not None
            and self._info is not None
            and not self._info.headers
        ):
            raise ProtocolError("HPUB: the server does not support headers")
        return encode(event, max_payload_bytes=self.max_payload_bytes)

    def _bind_send_pub(self) -> None:
        """Set :attr:`send_pub` for the limits known now (at start and on every INFO): while
        the server takes headers (or has not said), :func:`encode_pub` itself with the
        server's ``max_payload`` bound (a ``functools.partial``: no Python frame of this class
        on every request and publish); else :meth:`_send_pub_checked`, which refuses HPUB."""
        if self._info is None or self._info.headers:
            self.send_pub: _SendPub = functools.partial(
                encode_pub, max_payload_bytes=self._max_payload_bytes
            )
        else:
            self.send_pub = self._send_pub_checked

    def _send_pub_checked(
        self,
        subject: str,
        payload: bytes,
        reply: str | None,
        headers: Headers | Mapping[str, str] | None,
    ) -> bytes:
        """:attr:`send_pub` for a server that does not take headers."""
        if headers is not None:
            raise ProtocolError("HPUB: the server does not support headers")
        return encode_pub(subject, payload, reply, headers, self._max_payload_bytes)
