"""The values that cross the transport seam, its bounds, and the checks of a call's arguments.

Everything above the transport and every implementation under it build and read these same
attrs classes; the bounds (batch sizes, subjects per direct get, TTLs) and the checks that
enforce them live here once, so the three implementations refuse the same input the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import final

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
#: The most messages a durable consumer holds delivered and not acked when its config does not
#: say (nats-server's ``JsDefaultMaxAckPending``; 2.15.1's CONSUMER.INFO shows it for a consumer
#: created without ``max_ack_pending``). :class:`ConsumerConfig`'s default.
DEFAULT_MAX_ACK_PENDING = 1000


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
class PublishMsg:
    """One of the independent publishes of :meth:`Transport.publish_many`."""

    subject: str
    data: bytes
    #: As :meth:`Transport.publish`'s (0: the subject must be empty).
    expected_last_subject_seq: int | None = None
    #: As :meth:`Transport.publish`'s: a repeat inside the duplicate window stores nothing and
    #: is answered with the original sequence.
    msg_id: str | None = None


@final
@attrs.frozen
class SubjectPurge:
    """One of the purges of :meth:`Transport.purge_subjects`: every message on ``subject`` (a
    literal or a wildcard) in ``stream``."""

    stream: str
    subject: str


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


def _check_max_ack_pending(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or (value < 1 and value != -1):
        raise ValueError(f"{attribute.name} must be -1 (unlimited) or at least 1, got {value!r}")


@final
@attrs.frozen
class ConsumerConfig:
    """A durable pull consumer. Durations are seconds (floats) at this layer.

    ``backoff_s`` (JetStream's ``backoff``), when given, replaces ``ack_wait_s`` per delivery:
    the n-th delivery of a message has ``backoff_s[n - 1]`` (the last entry for later ones) to
    be acked, and an ``in_progress`` restarts that same deadline. Its first entry should be
    ``ack_wait_s``; ``max_deliver`` must then be -1 or larger than its length.

    ``max_ack_pending`` (JetStream's own name) is how many messages the consumer holds delivered
    and not yet acked (or termed): once it holds that many, the server delivers no *new* message
    until one is settled (due redeliveries still come). A nak does not settle: a message nakked
    with a delay stays pending, counted, until it is redelivered and settled. -1 is no limit.
    The default is the server's own (:data:`DEFAULT_MAX_ACK_PENDING`), sent explicitly, so a
    consumer created again with it gets what one created without the field would.
    """

    stream: str
    durable: str
    filter_subject: str
    ack_wait_s: float
    max_deliver: int = -1
    backoff_s: tuple[float, ...] = ()
    max_ack_pending: int = attrs.field(
        default=DEFAULT_MAX_ACK_PENDING, validator=_check_max_ack_pending
    )

    def ack_wait_for(self, num_delivered: int) -> float:
        """The AckWait of a message's ``num_delivered``-th delivery (1 is the first)."""
        if not self.backoff_s:
            return self.ack_wait_s
        return self.backoff_s[min(max(num_delivered, 1), len(self.backoff_s)) - 1]


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
