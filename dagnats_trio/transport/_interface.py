"""The one seam between dagnats-trio and NATS.

Everything above this package talks to JetStream through :class:`Transport` and nothing else, so a
deterministic in-memory implementation (``SimTransport``) can stand in for a real server and both
can be held to one conformance suite. The interface holds what the engine, workers, journal,
inputs and API need and no more; each method is one NATS round trip unless it says otherwise, and
implementations count round trips in :attr:`Transport.round_trips` so benchmarks can report them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, final

import attrs

Headers = Mapping[str, str]

#: How long any single call waits for an answer before raising :class:`TransportTimeout`.
DEFAULT_REQUEST_TIMEOUT_S = 5.0
#: The shortest per-message TTL nats-server takes (``Nats-TTL``), in seconds.
MIN_MSG_TTL_S = 1
#: The most messages one atomic batch may hold (nats-server's limit, ADR-50; a larger batch is
#: refused whole with err_code 10199).
MAX_BATCH_PUBLISH_MSGS = 1000
#: The most subjects one ``get_last_msgs`` may match (nats-server's multi-subject direct get
#: limit, ADR-31; more is a 413).
MAX_LAST_MSGS_SUBJECTS = 1024
#: The most messages one ``get_batch`` call returns (our bound on what one call holds in memory;
#: the server has no count limit, only a byte limit per answer, which the transports page past).
MAX_GET_BATCH_MSGS = 10_000


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
    """The stream, bucket or consumer does not exist, or the stream lacks what the call needs
    (atomic batches: ``StreamSpec.allow_atomic``); run provisioning first."""


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
class BatchMsg:
    """One message of an atomic batch (:meth:`Transport.publish_batch`)."""

    subject: str
    data: bytes
    headers: Headers = attrs.field(factory=dict)
    msg_id: str | None = None


@final
@attrs.frozen
class BatchAck:
    """Where a committed batch was stored: sequences ``first_seq`` to ``last_seq`` of ``stream``,
    one per message, in the order given."""

    stream: str
    first_seq: int
    last_seq: int

    @property
    def count(self) -> int:
        return self.last_seq - self.first_seq + 1

    @property
    def seqs(self) -> range:
        """The stream sequence of each message of the batch, in order."""
        return range(self.first_seq, self.last_seq + 1)


#: Headers a batch uses on the wire (ADR-50); a message of the batch may not set them itself.
BATCH_ID_HEADER = "Nats-Batch-Id"
BATCH_SEQUENCE_HEADER = "Nats-Batch-Sequence"
BATCH_COMMIT_HEADER = "Nats-Batch-Commit"
_BATCH_HEADERS = frozenset(h.lower() for h in (BATCH_ID_HEADER, BATCH_SEQUENCE_HEADER,
                                               BATCH_COMMIT_HEADER))  # fmt: skip


def check_batch(msgs: Sequence[BatchMsg], expected_last_subject_seq: int | None) -> None:
    """ValueError for a batch no server would take: empty, over
    :data:`MAX_BATCH_PUBLISH_MSGS`, a negative expectation, or a message setting batch headers."""
    if not msgs:
        raise ValueError("an atomic batch needs at least one message, got none")
    if len(msgs) > MAX_BATCH_PUBLISH_MSGS:
        raise ValueError(
            f"an atomic batch holds at most {MAX_BATCH_PUBLISH_MSGS} messages, got {len(msgs)}"
        )
    if expected_last_subject_seq is not None and expected_last_subject_seq < 0:
        raise ValueError(f"expected_last_subject_seq must be >= 0, got {expected_last_subject_seq}")
    for i, msg in enumerate(msgs):
        reserved = [h for h in msg.headers if h.lower() in _BATCH_HEADERS]
        if reserved:
            raise ValueError(f"batch message {i} sets {reserved[0]!r}: the transport sets it")


def check_get_batch(from_seq: int, max_msgs: int) -> None:
    """ValueError for a ``get_batch`` outside its bounds."""
    if from_seq < 1:
        raise ValueError(f"from_seq must be at least 1, got {from_seq}")
    if not 1 <= max_msgs <= MAX_GET_BATCH_MSGS:
        raise ValueError(f"max_msgs must be between 1 and {MAX_GET_BATCH_MSGS}, got {max_msgs}")


def check_last_msgs_subjects(subjects: Sequence[str]) -> None:
    """ValueError for a ``get_last_msgs`` with no subject or more than the server takes."""
    if isinstance(subjects, str):
        raise ValueError("subjects must be a sequence of subjects, not one string")
    if not 1 <= len(subjects) <= MAX_LAST_MSGS_SUBJECTS:
        raise ValueError(
            f"get_last_msgs takes 1 to {MAX_LAST_MSGS_SUBJECTS} subjects, got {len(subjects)}"
        )


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

    def ack_nowait(self) -> None:
        """Acknowledge without waiting: the ack is queued on the connection and this returns at
        once (no round trip, and no scheduler pass: it is not async, so settling costs the
        caller's task no step of its own; the caller's next await sends it on its way).

        For an ack whose loss is harmless: the message is only redelivered after the AckWait,
        and the caller's next delivery of it is idempotent (the engine's outbox replay, the
        journal's ``Committed``). So an ack the connection cannot take now (its outgoing buffer
        full) is dropped, as one lost on the way would be. Raises ``Closed`` once the transport
        is closed.
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
    """A stream to provision. ``max_age_s`` 0 means unlimited.

    ``allow_atomic`` lets :meth:`Transport.publish_batch` store batches in it (nats-server 2.12+
    ``allow_atomic``); it can be turned on for an existing stream. Every stream allows direct
    gets (``allow_direct``), which :meth:`Transport.get_last_msgs` and
    :meth:`Transport.get_batch` use.

    ``work_queue``: an ack (or term) removes the message. nats-server cannot turn it on or off
    for a stream that exists, so :meth:`Transport.ensure_stream` keeps an existing stream's
    retention and updates the rest of its config.
    """

    name: str
    subjects: tuple[str, ...]
    work_queue: bool = False
    max_age_s: float = 0.0
    duplicate_window_s: float = 120.0
    allow_atomic: bool = False


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

    async def publish_batch(
        self, msgs: Sequence[BatchMsg], *, expected_last_subject_seq: int | None = None
    ) -> BatchAck:
        """Store ``msgs`` (all in one stream provisioned with ``allow_atomic``) whole or not at
        all, as one atomic batch; one round trip.

        ``expected_last_subject_seq`` is checked, as for :meth:`publish`, on the subject of the
        first message against the stream as it was before the batch: when it differs nothing is
        stored and :class:`WrongLastSequence` is raised. A batch cut short (the caller cancelled,
        the connection dropped) before its last message reached the server is never stored.
        A retry of a batch that was stored (its answer lost) returns the stored batch's
        :class:`BatchAck` when its last message has a ``msg_id`` and is still the last on its
        subject. ValueError for an empty batch or one over :data:`MAX_BATCH_PUBLISH_MSGS`;
        :class:`NotProvisioned` when the stream does not allow atomic batches.
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

    async def get_last_msgs(
        self, stream: str, subjects: Sequence[str], *, up_to_seq: int | None = None
    ) -> list[StoredMsg]:
        """The last message of each subject matching ``subjects`` (literals or wildcards), in
        stream order; a subject with no message is absent. With ``up_to_seq``, as the stream
        was at that sequence (a consistent point-in-time read). One round trip (a batch direct
        get, nats-server 2.11+), answered by any replica: in a cluster it may lag the leader.
        ValueError for no subjects or more than :data:`MAX_LAST_MSGS_SUBJECTS`; a
        :class:`TransportError` when the subjects match more than that many subjects.
        """

    async def get_batch(
        self, stream: str, from_seq: int, max_msgs: int, *, subject: str | None = None
    ) -> list[StoredMsg]:
        """Up to ``max_msgs`` messages with sequence >= ``from_seq`` (only those on ``subject``,
        a literal or a wildcard, when given), in order; fewer only at the end of the stream.
        One round trip (a batch direct get, nats-server 2.11+; more only when the answer
        exceeds the server's byte limit per answer), answered by any replica like
        :meth:`get_last_msgs`. ValueError when ``from_seq`` < 1 or ``max_msgs`` is outside
        1..:data:`MAX_GET_BATCH_MSGS`.
        """

    async def purge_subject(self, stream: str, subject: str) -> None:
        """Delete every message on ``subject``."""

    # --- key-value -------------------------------------------------------------------------

    async def kv_get(self, bucket: str, key: str) -> KvEntry | None:
        """The current value, or None when absent or deleted."""

    async def kv_get_many(self, bucket: str, keys: Sequence[str]) -> dict[str, KvEntry]:
        """The current values of ``keys`` that exist (absent and deleted keys are left out).
        One round trip per :data:`MAX_LAST_MSGS_SUBJECTS` keys (a batch direct get of the last
        message of each key's subject), answered by any replica like :meth:`get_last_msgs`."""

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
