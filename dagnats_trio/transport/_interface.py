"""The one seam between dagnats-trio and NATS.

Everything above this package talks to JetStream through :class:`Transport` and nothing else, so a
deterministic in-memory implementation (``SimTransport``) can stand in for a real server and both
can be held to one conformance suite. The interface holds what the engine, workers, journal,
inputs and API need and no more; each method is one NATS round trip unless it says otherwise, and
implementations count round trips in :attr:`Transport.round_trips` so benchmarks can report them.
The values it takes and returns are in ``_values``, the errors it raises in ``_errors``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from ._errors import TransportError
from ._values import (
    DEFAULT_REQUEST_TIMEOUT_S,
    BatchAck,
    BatchMsg,
    BucketSpec,
    ConsumerConfig,
    CoreMsg,
    Headers,
    KvEntry,
    PublishMsg,
    StoredMsg,
    StreamSpec,
    SubjectPurge,
)


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


class Feed(Protocol):
    """A durable pull consumer's deliveries to one loop, from :meth:`Transport.consume`.

    What the feed holds for its loop and has not handed out when the loop leaves is given back
    to the server (nakked: redelivered at once, not after its AckWait); a cancelled
    :meth:`fetch` hands out nothing and loses nothing.
    """

    async def fetch(self, timeout_s: float) -> list[Delivery]:
        """Up to the feed's batch of deliveries; waits up to ``timeout_s`` for the first, []
        on timeout. Raises what :meth:`Transport.fetch` raises."""


class Puller(Protocol):
    """A worker's pull requests on one durable, from :meth:`Transport.pull`: each asks for as
    many deliveries as the worker has places for, and a finished delivery's ack may ask for
    the one place it frees (:meth:`ack_next`), so a worker busy with one task after another
    sends no pull request of its own.

    A place the puller asked for is its own until a delivery fills it (then it is the
    delivery's) or its request ends without one (expired, refused, lost on a reconnect): then
    it is handed back through the ``on_release`` given to :meth:`Transport.pull`, so the
    deliveries in hand never outnumber the places (a delivery that comes for a request already
    given up is nakked, never handed out). Leaving the puller releases every place still
    asked and gives back (naks) what it holds and has not handed out.
    """

    @property
    def asked(self) -> int:
        """Places asked for and neither filled nor released."""

    async def ask(self, n: int) -> None:
        """Ask for up to ``n`` more deliveries (one pull request, waiting at most the puller's
        ``expires_s``); when this raises, nothing was asked and the places are the caller's."""

    async def fetch(self, timeout_s: float) -> list[Delivery]:
        """Deliveries of the requests asked (by :meth:`ask` or :meth:`ack_next`): waits up to
        ``timeout_s`` for the first; [] on timeout, and at once when nothing is asked any more
        (so the caller asks again). Raises what :meth:`Transport.fetch` raises.

        For a puller with an ``on_delivery`` (:meth:`Transport.pull`) it returns [] (every
        delivery went to ``on_delivery``), once nothing is asked any more or at the timeout."""

    def ack_next(self, delivery: Delivery) -> bool:
        """Acknowledge ``delivery`` (one of this puller's) without waiting, as
        :meth:`Delivery.ack_nowait` does, and ask in the same message for one more delivery
        (JetStream's ``+NXT``, batch 1, the puller's ``expires_s``). True when its place is now
        asked (counted in :attr:`asked`); False when it was acked plainly (the puller is left,
        the connection is down, the ack could not be queued: the place stays the caller's)."""


CoreHandler = Callable[[CoreMsg], Awaitable[bytes | None]]


class Transport(Protocol):
    """What the system needs from NATS JetStream. All methods are Trio-native."""

    @property
    def round_trips(self) -> int:
        """Requests that waited for a server answer since the transport opened."""

    @property
    def max_payload_bytes(self) -> int:
        """The most bytes, headers and payload together, the server takes in one message: the
        ``max_payload`` it announces (nats-server's default is 1 MiB, and it may be configured
        smaller or larger). A write over it fails on every retry, so what the system stores
        whole (a run's snapshot, a run's input) is bounded by it, read here, not assumed."""

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

    async def publish_many(self, msgs: Sequence[PublishMsg]) -> list[int | TransportError]:
        """Publish each of ``msgs`` as :meth:`publish` would, all sent at once: one round trip
        of latency, and on the native client one socket write and no task per message. Per
        message, in order, its stream sequence or the error its publish got (a
        :class:`WrongLastSequence` among them); other failures (closed, not connected) raise.
        Not atomic: each is stored or not on its own, in any streams (:meth:`publish_batch`
        is all or nothing, in one stream)."""

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

    async def purge_subjects(self, purges: Sequence[SubjectPurge]) -> list[TransportError | None]:
        """Make each of ``purges`` as :meth:`purge_subject` would, all sent at once: one round
        trip of latency, and on the native client one socket write and no task per purge (a
        run's end removes its active marker and its tasks this way). Per purge, in order, None
        or the error it got; other failures (closed, not connected) raise."""

    # --- key-value -------------------------------------------------------------------------

    async def kv_get(self, bucket: str, key: str) -> KvEntry | None:
        """The current value, or None when absent or deleted."""

    async def kv_get_and_publish_many(
        self, bucket: str, key: str, msgs: Sequence[PublishMsg]
    ) -> tuple[KvEntry | TransportError | None, list[int | TransportError]]:
        """:meth:`kv_get` of ``key`` and :meth:`publish_many` of ``msgs``, all sent at once
        (the read first): one round trip of latency, and on the native client one socket write
        and no task (a start of a workflow read before indexes its run while it reads the
        definition). The read's entry (None when absent or deleted) or the error it got, and
        per message what :meth:`publish_many` answers; each is answered whatever the others'
        answers. Other failures (closed, not connected) raise."""

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

    def consume(self, stream: str, durable: str, batch: int) -> AbstractAsyncContextManager[Feed]:
        """A :class:`Feed` of ``durable``'s deliveries, for a loop that fetches over and over
        and takes every delivery it is given (the engine's; not a worker's, whose free slots
        bound each fetch). It may keep one pull request of ``batch`` deliveries waiting on the
        server across its fetches (the native transport does: a fetch then costs no request,
        and no end-of-request status to read, while the request lasts), so deliveries can
        arrive while the loop is busy; they wait in the feed, their AckWait running. A request
        lost on the way (a reconnect, a leader change) is asked again. Transports without one
        fetch as :meth:`fetch` does. ValueError for a ``batch`` below 1."""

    def pull(
        self,
        stream: str,
        durable: str,
        *,
        expires_s: float,
        on_release: Callable[[int], None],
        on_delivery: Callable[[Delivery], None] | None = None,
    ) -> AbstractAsyncContextManager[Puller]:
        """A :class:`Puller` of ``durable``'s deliveries for a worker's loop, whose free places
        bound what it asks for; ``on_release(n)`` is told when ``n`` places asked come back
        unfilled. On the native transport an ack with next is one message (the ack and the pull
        request); the others ack and count the place as asked by their next fetch.

        With ``on_delivery``, every delivery is handed to it instead of returned by
        :meth:`Puller.fetch`: a plain call that must not block or raise (it may start a task).
        The native transport calls it from its connection's reader as each delivery arrives,
        so the loop's fetch waits only for what needs the loop (nothing asked any more); the
        others call it from the fetch that got the delivery. Either way before the fetch
        returns, in the order the deliveries came, and never after the puller is left (what
        comes then is given back). ValueError for an ``expires_s`` that is not positive."""

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
