"""A full table of open atomic batches is transient (issue 12): nothing is stored, and the same
batch is stored once the table has room, so the journal's fenced writer may send it again.

nats-server keeps at most ``SERVER_MAX_OPEN_BATCHES_PER_STREAM`` batches open per stream. A
batch whose first message finds the table full has that message refused (answered to no one:
it has no reply subject) and its commit answered "incomplete"; a batch of one is answered "too
many inflight". Both were a plain TransportError, so a journal append under a burst of paired
writes failed its attempt instead of backing off. Real server only: the in-flight table is the
server's (SimTransport has none); both clients.
"""

from __future__ import annotations

import secrets

import pytest

from dagnats_trio.transport import (
    BatchMsg,
    StreamSpec,
    TemporarilyUnavailable,
    Transport,
)

#: nats-server's default limit of open atomic batches per stream (streamMaxAtomicBatchInflight
#: PerStream in server/stream.go).
SERVER_MAX_OPEN_BATCHES_PER_STREAM = 50


@pytest.fixture(params=("nats", "trio"))
def real_transport(request: pytest.FixtureRequest) -> Transport:
    value: Transport = request.getfixturevalue(f"{request.param}_transport")
    return value


async def _open_batches(t: Transport, subject: str, ids: list[str]) -> None:
    """The first message of each batch, without commit: each holds a place in the table."""
    for batch_id in ids:
        headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": "1"}
        await t.core_publish(subject, b"open", headers=headers)


async def _commit_batches(t: Transport, subject: str, ids: list[str]) -> None:
    for batch_id in ids:
        headers = {
            "Nats-Batch-Id": batch_id,
            "Nats-Batch-Sequence": "2",
            "Nats-Batch-Commit": "1",
        }
        await t.core_publish(subject, b"commit", headers=headers)
    await t.ping()


async def test_a_full_table_of_open_batches_is_transient_and_stores_nothing(
    real_transport: Transport,
) -> None:
    t = real_transport
    name = f"INFLIGHT_{secrets.token_hex(4)}"
    await t.ensure_stream(StreamSpec(name, (f"{name}.>",), allow_atomic=True))
    blockers, step = f"{name}.blockers", f"{name}.step"
    ids = [f"{name}-{k}" for k in range(SERVER_MAX_OPEN_BATCHES_PER_STREAM)]
    await _open_batches(t, blockers, ids)
    try:
        with pytest.raises(TemporarilyUnavailable, match="nothing was stored"):
            await t.publish_batch(
                [BatchMsg(step, b"model"), BatchMsg(step, b"intent")],
                expected_last_subject_seq=0,
            )
        with pytest.raises(TemporarilyUnavailable, match="too many open batches"):
            await t.publish_batch([BatchMsg(step, b"alone")], expected_last_subject_seq=0)
        assert await t.read_subject(name, step, 1, 10) == []
    finally:
        await _commit_batches(t, blockers, ids)
    # With room again, the same batch (same fence) is stored whole.
    ack = await t.publish_batch(
        [BatchMsg(step, b"model"), BatchMsg(step, b"intent")], expected_last_subject_seq=0
    )
    assert ack.count == 2
    stored = await t.read_subject(name, step, 1, 10)
    assert [m.data for m in stored] == [b"model", b"intent"]
    assert len(await t.read_subject(name, blockers, 1, 200)) == 2 * len(ids)
    print(f"{len(ids)} open batches: a batch of 2 and of 1 refused, nothing stored; then stored")
