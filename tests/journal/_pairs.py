"""What the tests of records stored together share: a write counter, the stored messages of a
journal, its audit, and a crash at a seam."""

from __future__ import annotations

from typing import Any

from dagnats_trio._seams import Seam, SeamContext
from dagnats_trio.journal import check, read_journal_for_audit
from dagnats_trio.protocol import BATCH_HEADER, RECORD_TYPE_HEADER, TaskMessage
from dagnats_trio.protocol.layout import JOURNAL_STREAM, journal_subject
from dagnats_trio.transport import BatchAck, BatchMsg, Transport


class CountWrites:
    """Wraps a transport and counts its durable writes: publishes and atomic batches."""

    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self.writes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def publish(self, subject: str, data: bytes, **kw: Any) -> int:
        self.writes += 1
        seq: int = await self._inner.publish(subject, data, **kw)
        return seq

    async def publish_batch(self, msgs: list[BatchMsg], **kw: Any) -> BatchAck:
        self.writes += 1
        ack: BatchAck = await self._inner.publish_batch(msgs, **kw)
        return ack


async def stored(t: Transport, task: TaskMessage) -> list[tuple[str, str | None]]:
    """(``Dagnats-Record``, batch mark) of every stored MESSAGE of the task's journal, in
    order: a record group's header names its records' types joined by ``+``."""
    msgs = await t.read_subject(JOURNAL_STREAM, journal_subject(task.run_id, task.step_id), 1, 1000)
    return [(m.headers[RECORD_TYPE_HEADER], m.headers.get(BATCH_HEADER)) for m in msgs]


async def audit_ok(t: Transport, task: TaskMessage) -> None:
    records, unreadable, batches = await read_journal_for_audit(t, task.run_id, task.step_id)
    report = check(records, unreadable=unreadable, batches=batches)
    assert report.ok, report.render()


def kill_at(seam: Seam, nth: int = 1) -> Any:
    """A seam hook that kills the holder the ``nth`` time it reaches ``seam``."""
    reached = [0]

    async def hook(ctx: SeamContext) -> None:
        if ctx.seam is seam:
            reached[0] += 1
            if reached[0] == nth:
                raise RuntimeError(f"kill at {seam.value}")

    return hook
