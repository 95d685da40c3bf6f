"""The simulated server's ``max_payload``: a write over it is refused, for good, as on nats-server.

nats-server bounds every message a client publishes by the ``max_payload`` it announces, the
header block and the payload together (an ``HPUB``'s total size), and the NATS clients refuse
such a message before sending it; the transports report that as a plain :class:`TransportError`
(no retry can store it), and nothing is stored (for a batch, none of its messages). The sim
counts the headers a NATS transport puts on the wire for the same call (the message id, the
expected sequence, a TTL, a batch's ADR-50 headers), so a write at the bound is refused or taken
as a real server would. Without this check the sim stored what a server refuses, and a bound
read from ``Transport.max_payload_bytes`` could only be tested against a real server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ._jetstream_batch import BATCH_ID_BYTES, batch_wire
from ._jetstream_wire import EXPECTED_LAST_SUBJECT_SEQ, MSG_ID
from ._max_payload import check_max_payload
from ._values import BatchMsg

#: A batch id as long as the ones the NATS transports send (the sim holds no randomness).
SIM_BATCH_ID = "0" * (2 * BATCH_ID_BYTES)


def publish_wire_headers(
    headers: Mapping[str, str] | None, msg_id: str | None, expected_last_subject_seq: int | None
) -> dict[str, str]:
    """The headers a NATS transport's publish sends (``JetStreamOverRequests.publish``)."""
    wire = dict(headers or {})
    if msg_id is not None:
        wire[MSG_ID] = msg_id
    if expected_last_subject_seq is not None:
        wire[EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last_subject_seq)
    return wire


def check_batch_max_payload(
    max_payload_bytes: int,
    msgs: Sequence[BatchMsg],
    expected_last_subject_seq: int | None,
    what: str,
) -> None:
    """:func:`check_max_payload` for each message of a batch as it goes on the wire: one over
    the bound refuses the whole batch (the server stores none of an incomplete batch)."""
    for wire in batch_wire(msgs, SIM_BATCH_ID, expected_last_subject_seq):
        check_max_payload(max_payload_bytes, wire.data, wire.headers, what)
