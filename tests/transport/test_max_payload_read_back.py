"""A message the server stored at the payload bound reads back, on every transport.

nats-server bounds what a client publishes by ``max_payload`` (headers and payload together),
then adds headers of its own when it hands the message out again (a direct get carries
``Nats-Stream``, ``Nats-Subject``, ``Nats-Sequence``, ``Nats-Time-Stamp``). Found from outside:
a run whose step output brought its snapshot near 1 MiB was stored, and every later read of it
made the native client drop its connection (the delivery was over ``max_payload`` by those
headers), so the run could be neither read nor advanced, and every request in flight on that
connection failed with it.
"""

from __future__ import annotations

import trio

from dagnats_trio.nats import DEFAULT_MAX_PAYLOAD_BYTES
from dagnats_trio.protocol.layout import CHECKPOINTS_BUCKET, JOURNAL_STREAM, journal_subject
from dagnats_trio.transport import Transport

TEST_BOUND_S = 15.0
#: Room for the headers of the publish itself (the server counts them in ``max_payload``).
OWN_HEADERS_ALLOWANCE_BYTES = 256


async def test_a_message_at_the_payload_bound_reads_back(
    transport: Transport, clock: object, uid: str
) -> None:
    subject = journal_subject(uid, "big")
    plain = b"p" * DEFAULT_MAX_PAYLOAD_BYTES
    headed = b"h" * (DEFAULT_MAX_PAYLOAD_BYTES - OWN_HEADERS_ALLOWANCE_BYTES)
    with trio.fail_after(TEST_BOUND_S):
        first = await transport.publish(subject, plain)
        second = await transport.publish(subject, headed, headers={"K": "v"})
        assert (await transport.get_msg(JOURNAL_STREAM, first)).data == plain
        last = await transport.get_last_msg(JOURNAL_STREAM, subject)
        assert last is not None and last.seq == second and last.data == headed
        read = await transport.read_subject(JOURNAL_STREAM, subject, 1, 2)
        assert [m.data for m in read] == [plain, headed]
        key = f"{uid}.big"
        await transport.kv_put(CHECKPOINTS_BUCKET, key, plain)
        entry = await transport.kv_get(CHECKPOINTS_BUCKET, key)
        assert entry is not None and entry.value == plain
        # The connection survived every read: a small request still answers at once.
        assert await transport.get_msg(JOURNAL_STREAM, second) is not None
