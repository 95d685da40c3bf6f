"""Fenced appends survive a stream-leader step-down on a 3-node cluster, losing nothing.

This is the journal's write path under a leader change: every append carries the expected last
subject sequence; a failed or unanswered append is retried, but only after checking whether the
tail already is our own record (the publish was stored and its ack lost). Atomic batches of
several records do the same across a second step-down: each is stored whole, once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from dagnats_trio.server import NatsCluster
from dagnats_trio.transport import (
    BatchMsg,
    StoredMsg,
    StreamSpec,
    TemporarilyUnavailable,
    Transport,
    TransportTimeout,
    WrongLastSequence,
    open_nats_transport,
)
from dagnats_trio.transport._trio_nats_connect import open_trio_nats_transport

pytestmark = pytest.mark.cluster

STREAM = "CLUSTER_APPENDS"
SUBJECT = "appends.run1.step1"
RECORDS = 60
STEP_DOWN_AT = 20
#: Batches appended after the single records, of BATCH_RECORDS each, with a step-down before
#: batch BATCH_STEP_DOWN_AT.
BATCHES = 12
BATCH_RECORDS = 3
BATCH_STEP_DOWN_AT = 4
REPLICAS = 3
REQUEST_TIMEOUT_S = 2.0
#: Attempts per append (and per tail read) before the test gives up on the cluster.
MAX_ATTEMPTS = 50
RETRY_PAUSE_S = 0.1
TEST_BOUND_S = 90.0

Retriable = (TemporarilyUnavailable, TransportTimeout)


async def read_tail(t: Transport) -> StoredMsg | None:
    for _ in range(MAX_ATTEMPTS):
        try:
            return await t.get_last_msg(STREAM, SUBJECT)
        except Retriable:
            await trio.sleep(RETRY_PAUSE_S)
    raise AssertionError("the stream never answered a read of its tail")


async def fenced_append(t: Transport, data: bytes, last_seq: int) -> int:
    """Append after ``last_seq``; returns the new record's sequence."""
    for _ in range(MAX_ATTEMPTS):
        try:
            return await t.publish(SUBJECT, data, expected_last_subject_seq=last_seq)
        except Retriable:
            await trio.sleep(RETRY_PAUSE_S)
        except WrongLastSequence:
            pass  # our earlier attempt may have been stored: look at the tail
        tail = await read_tail(t)
        if tail is not None and tail.seq != last_seq:
            assert tail.data == data, f"someone else wrote after {last_seq}: {tail}"
            return tail.seq
    raise AssertionError(f"append after {last_seq} did not succeed in {MAX_ATTEMPTS} attempts")


async def fenced_batch(t: Transport, batch: int, last_seq: int) -> int:
    """Append batch ``batch`` after ``last_seq``; returns the sequence of its last record. A
    retry of a batch that was stored (its answer lost) is recognised by its last msg id."""
    msgs = [
        BatchMsg(SUBJECT, f"batch-{batch}.{i}".encode(), msg_id=f"batch-{batch}.{i}")
        for i in range(BATCH_RECORDS)
    ]
    for _ in range(MAX_ATTEMPTS):
        try:
            ack = await t.publish_batch(msgs, expected_last_subject_seq=last_seq)
        except Retriable:
            await trio.sleep(RETRY_PAUSE_S)
            continue
        assert ack.count == BATCH_RECORDS
        return ack.last_seq
    raise AssertionError(f"batch after {last_seq} did not succeed in {MAX_ATTEMPTS} attempts")


async def api(t: Transport, subject: str) -> dict[str, Any]:
    for _ in range(MAX_ATTEMPTS):
        try:
            reply: dict[str, Any] = json.loads(
                await t.request(subject, b"", timeout_s=REQUEST_TIMEOUT_S)
            )
            return reply
        except Retriable:
            await trio.sleep(RETRY_PAUSE_S)
    raise AssertionError(f"{subject} never answered")


async def leader(t: Transport) -> str | None:
    info = await api(t, f"$JS.API.STREAM.INFO.{STREAM}")
    cluster = info.get("cluster") or {}
    name = cluster.get("leader")
    return str(name) if name else None


@pytest.mark.parametrize(
    "open_transport", [open_nats_transport, open_trio_nats_transport], ids=["nats-py", "trio"]
)
async def test_fenced_appends_survive_a_leader_step_down(
    nats_cluster: NatsCluster, open_transport: Any
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        async with open_transport(
            nats_cluster.urls, name="cluster-test", request_timeout_s=REQUEST_TIMEOUT_S
        ) as t:
            await t.ensure_stream(
                StreamSpec(STREAM, ("appends.>",), allow_atomic=True), replicas=REPLICAS
            )
            info = await api(t, f"$JS.API.STREAM.INFO.{STREAM}")
            assert info["config"]["num_replicas"] == REPLICAS
            first_leader = await leader(t)
            assert first_leader is not None

            last_seq = 0
            for i in range(RECORDS):
                if i == STEP_DOWN_AT:
                    reply = await api(t, f"$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}")
                    assert reply.get("success") is True, reply
                last_seq = await fenced_append(t, f"record-{i}".encode(), last_seq)

            new_leader = None
            for _ in range(MAX_ATTEMPTS):  # the election is over by now; allow it a moment
                new_leader = await leader(t)
                if new_leader not in (None, first_leader):
                    break
                await trio.sleep(RETRY_PAUSE_S)
            assert new_leader not in (None, first_leader)

            stored = await t.read_subject(STREAM, SUBJECT, 0, RECORDS + 10)
            assert [m.data for m in stored] == [f"record-{i}".encode() for i in range(RECORDS)]
            assert [m.seq for m in stored] == list(range(1, RECORDS + 1))  # no gap
            # A stale writer is still fenced after the move.
            with pytest.raises(WrongLastSequence):
                await t.publish(SUBJECT, b"zombie", expected_last_subject_seq=RECORDS - 1)

            # Atomic batches across a second step-down: each stored whole, once, in order.
            for b in range(BATCHES):
                if b == BATCH_STEP_DOWN_AT:
                    reply = await api(t, f"$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}")
                    assert reply.get("success") is True, reply
                last_seq = await fenced_batch(t, b, last_seq)
            total = RECORDS + BATCHES * BATCH_RECORDS
            stored = await t.read_subject(STREAM, SUBJECT, RECORDS + 1, total)
            assert [m.data for m in stored] == [
                f"batch-{b}.{i}".encode() for b in range(BATCHES) for i in range(BATCH_RECORDS)
            ]
            assert [m.seq for m in stored] == list(range(RECORDS + 1, total + 1))  # no gap
