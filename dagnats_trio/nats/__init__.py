"""A NATS client for Trio: a sans-IO protocol core and a Trio connection on it.

The core (``ClientProtocol``, ``Parser``, ``encode`` and the events) does no I/O and imports no
async library, in the style of h11; the connection is the thin Trio shell around it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._backoff import backoff_s
from ._defaults import (
    CONNECT_TIMEOUT_S,
    DRAIN_TIMEOUT_S,
    FLUSH_TIMEOUT_S,
    MAX_OUTSTANDING_PINGS,
    MAX_PENDING_BYTES,
    MAX_RECONNECT_ROUNDS,
    PING_INTERVAL_S,
    READ_CHUNK_BYTES,
    RECONNECT_BACKOFF_BASE_S,
    RECONNECT_BACKOFF_MAX_S,
    REQUEST_TIMEOUT_S,
)
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
    DELIVERY_MAX_PAYLOAD_FACTOR,
    MAX_CONTROL_LINE_BYTES,
    MAX_HEADER_BYTES,
    MAX_JSON_LINE_BYTES,
)
from ._nuid import new_inbox
from ._parser import NEED_DATA, NeedData, Parser
from ._protocol import ClientProtocol
from ._servers import DEFAULT_PORT, ServerAddress, parse_servers
from ._shell_errors import (
    AuthorizationError,
    ConnectionClosedError,
    ConnectionLostError,
    CredentialsError,
    NatsError,
    NatsTimeoutError,
    NoRespondersError,
    NoServersError,
)

if TYPE_CHECKING:
    from ._connection import (
        Connection,
        ConnectionStats,
    )
    from ._open import open_connection
    from ._subscription import (
        SUBSCRIPTION_BUFFER_MSGS,
        Subscription,
    )
else:
    # mypy sees the imports above instead, so a misspelt name is an error, not ``object``.
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._connection": (
                "Connection",
                "ConnectionStats",
            ),
            "._open": ("open_connection",),
            "._subscription": (
                "SUBSCRIPTION_BUFFER_MSGS",
                "Subscription",
            ),
        },
    )

__all__ = [
    "CONFLICT_STATUS",
    "CONNECT_TIMEOUT_S",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_PORT",
    "DELIVERY_MAX_PAYLOAD_FACTOR",
    "DRAIN_TIMEOUT_S",
    "END_OF_BATCH_STATUS",
    "FLUSH_TIMEOUT_S",
    "IDLE_HEARTBEAT_STATUS",
    "MAX_CONTROL_LINE_BYTES",
    "MAX_HEADER_BYTES",
    "MAX_JSON_LINE_BYTES",
    "MAX_OUTSTANDING_PINGS",
    "MAX_PENDING_BYTES",
    "MAX_RECONNECT_ROUNDS",
    "NEED_DATA",
    "NO_RESPONDERS_STATUS",
    "PING_INTERVAL_S",
    "READ_CHUNK_BYTES",
    "RECONNECT_BACKOFF_BASE_S",
    "RECONNECT_BACKOFF_MAX_S",
    "REQUEST_TIMEOUT_S",
    "REQUEST_TIMEOUT_STATUS",
    "SUBSCRIPTION_BUFFER_MSGS",
    "AuthorizationError",
    "ClientProtocol",
    "Connect",
    "Connection",
    "ConnectionClosedError",
    "ConnectionLostError",
    "ConnectionStats",
    "CredentialsError",
    "Err",
    "Event",
    "Headers",
    "Info",
    "Msg",
    "NatsError",
    "NatsTimeoutError",
    "NeedData",
    "NoRespondersError",
    "NoServersError",
    "Ok",
    "Parser",
    "Ping",
    "Pong",
    "ProtocolError",
    "Pub",
    "ServerAddress",
    "Sub",
    "Subscription",
    "Unsub",
    "backoff_s",
    "encode",
    "encode_headers",
    "new_inbox",
    "open_connection",
    "parse_headers",
    "parse_servers",
]
