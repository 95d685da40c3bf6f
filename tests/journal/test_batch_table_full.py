"""A paired write that goes as an atomic batch (a pair too big for one message) and finds the
server's table of open batches full is sent again, not failed (issue 12): the refusal stores
nothing, the fenced writer backs off, and the batch is stored whole once the table has room; the
tool still starts once. Real server only (the table is nats-server's, one of its own), both
clients."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from dagnats_trio.journal import (
    MAX_GROUP_MESSAGE_BYTES,
    DeliveryState,
    ScriptedModel,
    TaskIdentity,
    open_journal,
)
from dagnats_trio.protocol.layout import JOURNAL_STREAM, journal_subject
from dagnats_trio.server import open_nats_server
from dagnats_trio.transport import (
    BatchAck,
    BatchMsg,
    TemporarilyUnavailable,
    Transport,
    open_nats_transport,
    provision,
)

from ._helpers import make_task, uid
from .test_batched_pairs import REPLY, audit_ok, paired_turn, stored

#: nats-server's default limit of open atomic batches per stream.
SERVER_MAX_OPEN_BATCHES_PER_STREAM = 50


@pytest.fixture(params=("native", "nats-py"))
async def real_transport(request: pytest.FixtureRequest) -> AsyncIterator[Transport]:
    """A server of its own: the table of open batches is the server's, and the suite's shared
    server may still hold batches another test left open on purpose (test_batch_crash: the
    server abandons them only after its batch timeout), which took one of the 50 places."""
    async with (
        open_nats_server() as server,
        open_nats_transport(server.url, client=request.param) as transport,
    ):
        await provision(transport)
        yield transport


class FreesTheTableWhenRefused:
    """Wraps a transport; the first batch refused as temporarily unavailable commits the open
    batches that filled the table, so the writer's next try finds room."""

    def __init__(self, inner: Transport, subject: str, ids: list[str]) -> None:
        self._inner = inner
        self._subject = subject
        self._ids = ids
        self.refused: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def publish_batch(self, msgs: list[BatchMsg], **kw: Any) -> BatchAck:
        try:
            ack: BatchAck = await self._inner.publish_batch(msgs, **kw)
        except TemporarilyUnavailable as exc:
            self.refused.append(str(exc))
            await commit_batches(self._inner, self._subject, self._ids)
            raise
        return ack


async def open_batches(t: Transport, subject: str, ids: list[str]) -> None:
    for batch_id in ids:
        headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": "1"}
        await t.core_publish(subject, b"open", headers=headers)
    await t.ping()


async def commit_batches(t: Transport, subject: str, ids: list[str]) -> None:
    for batch_id in ids:
        headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": "2", "Nats-Batch-Commit": "1"}
        await t.core_publish(subject, b"commit", headers=headers)
    await t.ping()


async def test_a_paired_write_refused_by_a_full_batch_table_is_sent_again(
    real_transport: Transport,
) -> None:
    task = make_task(uid())
    blockers = journal_subject(f"{task.run_id}-blockers", "b")
    ids = [f"{task.run_id}-{k}" for k in range(SERVER_MAX_OPEN_BATCHES_PER_STREAM)]
    wrapped = FreesTheTableWhenRefused(real_transport, blockers, ids)
    await open_batches(real_transport, blockers, ids)
    holder = DeliveryState(TaskIdentity.of(task))
    # Too big for one message: the model response and its intent go as an atomic batch.
    model, starts = ScriptedModel([{**REPLY, "text": "x" * MAX_GROUP_MESSAGE_BYTES}]), {}
    with trio.fail_after(30):
        j = await open_journal(wrapped, task, holder=holder)  # type: ignore[arg-type]
        result = await paired_turn(j, model, starts)
    assert len(wrapped.refused) == 1, wrapped.refused
    assert "nothing was stored" in wrapped.refused[0]
    assert starts == {"send_message": 1} and model.requests == 1 and not result.interrupted
    assert await stored(real_transport, task) == [
        ("claim", None),
        ("model", "1/2"),
        ("tool.intent", "2/2"),
        ("tool.result+commit", None),
    ]
    await audit_ok(real_transport, task)
    blocked = await real_transport.read_subject(JOURNAL_STREAM, blockers, 1, 200)
    assert len(blocked) == 2 * len(ids)
