"""A NATS client for Trio: a sans-IO protocol core and a Trio connection on it.

The core (``ClientProtocol``, ``Parser``, ``encode`` and the events) does no I/O and imports no
async library, in the style of h11; the connection is the thin Trio shell around it.
"""

from ._encoder import encode
from ._errors import ProtocolError
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
)
from ._headers import (
    CONFLICT_STATUS,
    END_OF_BATCH_STATUS,
    IDLE_HEARTBEAT_STATUS,
    NO_RESPONDERS_STATUS,
    REQUEST_TIMEOUT_STATUS,
    Headers,
    encode_headers,
    parse_headers,
)
from ._limits import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_CONTROL_LINE_BYTES,
    MAX_HEADER_BYTES,
    MAX_JSON_LINE_BYTES,
)
from ._parser import NEED_DATA, NeedData, Parser
from ._protocol import ClientProtocol

__all__ = [
    "CONFLICT_STATUS",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "END_OF_BATCH_STATUS",
    "IDLE_HEARTBEAT_STATUS",
    "MAX_CONTROL_LINE_BYTES",
    "MAX_HEADER_BYTES",
    "MAX_JSON_LINE_BYTES",
    "NEED_DATA",
    "NO_RESPONDERS_STATUS",
    "REQUEST_TIMEOUT_STATUS",
    "ClientProtocol",
    "Connect",
    "Err",
    "Event",
    "Headers",
    "Info",
    "Msg",
    "NeedData",
    "Ok",
    "Parser",
    "Ping",
    "Pong",
    "ProtocolError",
    "Pub",
    "Sub",
    "Unsub",
    "encode",
    "encode_headers",
    "parse_headers",
]
