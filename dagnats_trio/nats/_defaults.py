"""The connection's bounds and defaults, in one place (each a named constant with its unit).

Pure: no I/O and no async library, so the package can re-export them eagerly.
"""

from __future__ import annotations

from typing import Final

#: Deadline of one attempt to reach a server (TCP, INFO, TLS, CONNECT, first PONG).
CONNECT_TIMEOUT_S: Final = 5.0
#: Default deadline of a request.
REQUEST_TIMEOUT_S: Final = 5.0
#: Default deadline of a flush (one PING answered, across reconnects).
FLUSH_TIMEOUT_S: Final = 10.0
#: How long close waits for the drain (UNSUB everything, flush what is queued).
DRAIN_TIMEOUT_S: Final = 5.0
#: Interval between keep-alive PINGs.
PING_INTERVAL_S: Final = 30.0
#: PINGs without any PONG after which the connection is stale and is replaced.
MAX_OUTSTANDING_PINGS: Final = 2
#: Reconnect rounds (each tries every server once) before the connection gives up; -1: never.
MAX_RECONNECT_ROUNDS: Final = 60
#: First backoff between reconnect rounds; it doubles each round up to the maximum.
RECONNECT_BACKOFF_BASE_S: Final = 0.05
#: Largest backoff between reconnect rounds (before jitter, which takes up to half off).
RECONNECT_BACKOFF_MAX_S: Final = 2.0
#: Bytes a publish may queue (sent or waiting for a reconnect) before it waits for room.
MAX_PENDING_BYTES: Final = 8 * 1024 * 1024
#: How long a publish waits for room in a full outgoing buffer.
PENDING_TIMEOUT_S: Final = 10.0
#: Bytes asked of the socket per read.
READ_CHUNK_BYTES: Final = 64 * 1024
#: How long closing a socket may take (shielded: it runs while a cancellation unwinds).
SOCKET_CLOSE_TIMEOUT_S: Final = 1.0
