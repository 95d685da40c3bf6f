"""The one seam between dagnats-trio and NATS.

Everything above this package talks to JetStream through :class:`Transport` and nothing else, so a
deterministic in-memory implementation (``SimTransport``) can stand in for a real server and both
can be held to one conformance suite. The interface holds what the engine, workers, journal,
inputs and API need and no more; each method is one NATS round trip unless it says otherwise, and
implementations count round trips in :attr:`Transport.round_trips` so benchmarks can report them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol, final

import attrs

Headers = Mapping[str, str]

#: How long any single call waits for an answer before raising :class:`TransportTimeout`.
DEFAULT_REQUEST_TIMEOUT_S = 5.0
#: The shortest per-message TTL nats-server takes (``Nats-TTL``), in seconds.
MIN_MSG_TTL_S = 1


# ---------------------------------------------------------------------------------------------
# Errors. Each is distinct because callers act differently on each: WrongLastSequence is the
# fencing signal, KeyExists / RevisionMismatch drive compare-and-set loops, NotProvisioned is an
# operator error, TemporarilyUnavailable is worth a retry.
# ---------------------------------------------------------------------------------------------


class TransportError(Exception):
    """Base of every error a transport raises."""


@final
class WrongLastSequence(TransportError):
    """The expected last subject sequence did not match: the writer lost the tail (fenced)."""


@final
class KeyExists(TransportError):
    """``kv_create`` found the key already present."""


@final
class RevisionMismatch(TransportError):
    """``kv_update`` (or a revision-checked delete) saw a different revision."""


@final
class NotFound(TransportError):
    """No message at that sequence / no such key / no message on that subject."""


@final
class NotProvisioned(TransportError):
    """The stream, bucket or consumer does not exist; run provisioning first."""


class TemporarilyUnavailable(TransportError):
    """No leader or no responders right now (for example during a leader step-down)."""


@final
class TransportTimeout(TransportError):
    """The call got no answer within its deadline."""


@final
class Closed(TransportError):
    """The transport was closed."""


# ---------------------------------------------------------------------------------------------
# Values.
# ---------------------------------------------------------------------------------------------


@final
@attrs.frozen
class StoredMsg:
    """A message as stored in a stream."""

    subject: str
    seq: int
    data: bytes
    headers: Headers = attrs.field(factory=dict)


@final
@attrs.frozen
class KvEntry:
    """One revision of a key. ``value`` is None for a delete or purge marker (watch only)."""

    bucket: str
    key: str
    value: bytes | None
    revision: int


@final
@attrs.frozen
class CoreMsg:
    """A core NATS message; ``reply`` is set when the sender used request/reply."""

    subject: str
    data: bytes
    headers: Headers = attrs.field(factory=dict)
    reply: str | None = None


@final
@attrs.frozen
class ConsumerConfig:
    """A durable pull consumer. Durations are seconds (floats) at this layer.

    ``backoff_s`` (JetStream's ``backoff``), when given, replaces ``ack_wait_s`` per delivery:
    the n-th delivery of a message has ``backoff_s[n - 1]`` (the last entry for later ones) to
    be acked, and an ``in_progress`` restarts that same deadline. Its first entry should be
    ``ack_wait_s``; ``max_deliver`` must then be -1 or larger than its length.
    """

    stream: str
    durable: str
    filter_subject: str
    ack_wait_s: float
    max_deliver: int = -1
    backoff_s: tuple[float, ...] = ()

    def ack_wait_for(self, num_delivered: int) -> float:
        """The AckWait of a message's ``num_delivered``-th delivery (1 is the first)."""
        if not self.backoff_s:
            return self.ack_wait_s
        return self.backoff_s[min(max(num_delivered, 1), len(self.backoff_s)) - 1]


class Delivery(Protocol):
    """One delivery of a stream message to a pull consumer.

    ``num_delivered`` is 1 on the first delivery; ``stream_seq`` is the message's sequence in its
    stream. Settling twice is harmless; settling after the AckWait expired may be ignored by the
    server (the message is redelivered), which is exactly the zombie case the journal fences.
    """

    @property
    def subject(self) -> str: ...
    @property
    def data(self) -> bytes: ...
    @property
    def headers(self) -> Headers: ...
    @property
    def stream_seq(self) -> int: ...
    @property
    def num_delivered(self) -> int: ...

    async def ack(self) -> None:
        """Acknowledge and wait for the server to confirm (double ack)."""

    async def ack_nowait(self) -> None:
        """Acknowledge without waiting for the server's confirmation (no round trip).

        For an ack whose loss is harmless: the message is only redelivered after the AckWait,
        and the caller's next delivery of it is idempotent (the engine's outbox replay, the
        journal's ``Committed``).
        """

    async def nak(self, delay_s: float | None = None) -> None:
        """Ask for redelivery, after ``delay_s`` seconds when given."""

    async def in_progress(self) -> None:
        """Reset the AckWait deadline of this delivery."""

    async def term(self) -> None:
        """Never redeliver this message."""


def check_msg_ttl(ttl_s: float) -> int:
    """A per-message TTL in whole seconds (what the ``Nats-TTL`` header carries)."""
    if isinstance(ttl_s, bool) or ttl_s < MIN_MSG_TTL_S or ttl_s != int(ttl_s):
        raise ValueError(f"a message TTL is whole seconds >= {MIN_MSG_TTL_S}, got {ttl_s!r}")
    return int(ttl_s)


@final
@attrs.frozen
class StreamSpec:
    """A stream to provision. ``max_age_s`` 0 means unlimited."""

    name: str
    subjects: tuple[str, ...]
    work_queue: bool = False
    max_age_s: float = 0.0
    duplicate_window_s: float = 120.0


@final
@attrs.frozen
class BucketSpec:
    """A key-value bucket to provision. ``ttl_s`` 0 means keys never expire.

    ``message_ttl`` lets a write carry its own TTL (``ttl_s`` of :meth:`Transport.kv_create` and
    :meth:`Transport.kv_update`; nats-server 2.11+ ``allow_msg_ttl``): the key disappears that
    long after that write, unless a later write replaces it.
    """

    name: str
    ttl_s: float = 0.0
    history: int = 1
    message_ttl: bool = False


CoreHandler = Callable[[CoreMsg], Awaitable[bytes | None]]


class Transport(Protocol):
    """What the system needs from NATS JetStream. All methods are Trio-native."""

    @property
    def round_trips(self) -> int:
        """Requests that waited for a server answer since the transport opened."""

    # --- streams ---------------------------------------------------------------------------

    async def publish(
        self,
        subject: str,
        data: bytes,
        *,
        headers: Headers | None = None,
        msg_id: str | None = None,
        expected_last_subject_seq: int | None = None,
    ) -> int:
        """Store ``data`` in the stream that owns ``subject``; return its stream sequence.

        ``expected_last_subject_seq`` (0 meaning "subject is empty") raises
        :class:`WrongLastSequence` when the subject's last sequence differs. A repeated ``msg_id``
        inside the duplicate window stores nothing and returns the original sequence.
        """

    async def get_msg(self, stream: str, seq: int) -> StoredMsg:
        """The message at ``seq``; :class:`NotFound` when there is none (or it was deleted)."""

    async def get_last_msg(self, stream: str, subject: str) -> StoredMsg | None:
        """The last message on ``subject``, answered by the stream leader; None when empty."""

    async def read_subject(
        self, stream: str, subject: str, from_seq: int, limit: int
    ) -> list[StoredMsg]:
        """Up to ``limit`` messages of ``subject`` with sequence >= ``from_seq``, in order.

        One round trip per message at most; never creates a consumer.
        """

    async def purge_subject(self, stream: str, subject: str) -> None:
        """Delete every message on ``subject``."""

    # --- key-value -------------------------------------------------------------------------

    async def kv_get(self, bucket: str, key: str) -> KvEntry | None:
        """The current value, or None when absent or deleted."""

    async def kv_put(self, bucket: str, key: str, value: bytes) -> int:
        """Unconditional write; returns the new revision."""

    async def kv_create(
        self, bucket: str, key: str, value: bytes, *, ttl_s: float | None = None
    ) -> int:
        """Write only if absent (or deleted); :class:`KeyExists` otherwise.

        ``ttl_s`` (whole seconds, at least 1) makes the key expire that long after this write;
        the bucket must be provisioned with ``message_ttl`` (:class:`TransportError` otherwise).
        """

    async def kv_update(
        self, bucket: str, key: str, value: bytes, revision: int, *, ttl_s: float | None = None
    ) -> int:
        """Write only if the current revision is ``revision``, else :class:`RevisionMismatch`;
        ``ttl_s`` as for :meth:`kv_create`."""

    async def kv_delete(self, bucket: str, key: str, revision: int | None = None) -> None:
        """Delete; with ``revision`` only if current (:class:`RevisionMismatch` otherwise)."""

    async def kv_keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Live keys starting with ``prefix`` (sorted)."""

    def kv_watch(
        self, bucket: str, prefix: str = ""
    ) -> AbstractAsyncContextManager[AsyncIterator[KvEntry]]:
        """Changes to keys under ``prefix`` from now on (no initial values)."""

    # --- durable pull consumers -------------------------------------------------------------

    async def ensure_consumer(self, config: ConsumerConfig) -> None:
        """Create the durable consumer, or update it to ``config``; idempotent."""

    async def fetch(
        self, stream: str, durable: str, batch: int, timeout_s: float
    ) -> list[Delivery]:
        """Up to ``batch`` deliveries; waits up to ``timeout_s`` for the first, [] on timeout."""

    # --- core NATS ---------------------------------------------------------------------------

    async def core_publish(self, subject: str, data: bytes, headers: Headers | None = None) -> None:
        """Fire and forget, at most once."""

    def subscribe(
        self, subject: str, queue: str | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[CoreMsg]]:
        """Core subscription; messages arrive while the context is open."""

    async def respond(self, msg: CoreMsg, data: bytes) -> None:
        """Answer a request received through :meth:`subscribe`."""

    async def request(
        self,
        subject: str,
        data: bytes,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        headers: Headers | None = None,
    ) -> bytes:
        """Request/reply; :class:`TemporarilyUnavailable` when nobody listens."""

    async def ping(self, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> None:
        """One JetStream round trip: returns when the server's JetStream answers within
        ``timeout_s``, raises a :class:`TransportError` otherwise (what a health check asks)."""

    # --- provisioning ------------------------------------------------------------------------

    async def ensure_stream(self, spec: StreamSpec, replicas: int = 1) -> None:
        """Create or update a stream; idempotent."""

    async def ensure_bucket(self, spec: BucketSpec, replicas: int = 1) -> None:
        """Create or update a key-value bucket; idempotent."""

    async def aclose(self) -> None:
        """Close; later calls raise :class:`Closed`."""
