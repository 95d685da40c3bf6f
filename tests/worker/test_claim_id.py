"""``tc.claim_id`` (issue 16, item 4): a handler sees its own claim, to tie effects counted
outside the runtime to the journal claim that made them."""

from __future__ import annotations

import trio

from dagnats_trio.journal import read_journal
from dagnats_trio.protocol import ClaimRecord, StepCompleted
from dagnats_trio.transport import NatsTransport
from dagnats_trio.worker import TaskContext, Worker

from ._helpers import WAIT_S, make_task, publish_task, uid, wait_history


async def test_claim_id_is_the_journal_claim_of_the_delivery(
    nats_transport: NatsTransport,
) -> None:
    t = nats_transport
    journaled, plain = make_task(uid(), task_type=uid("j")), make_task(uid(), task_type=uid("p"))
    seen: dict[str, tuple[str | None, str | None]] = {}

    async def with_journal(tc: TaskContext) -> None:
        before = tc.claim_id
        j = await tc.journal()
        seen["journal"] = (before, tc.claim_id)
        assert tc.claim_id == j.claim_id
        await tc.complete(tc.claim_id)

    async def without(tc: TaskContext) -> None:
        seen["plain"] = (tc.claim_id, tc.claim_id)
        await tc.complete(None)

    worker = Worker(t, {journaled.task: with_journal, plain.task: without})
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        await publish_task(t, journaled)
        await publish_task(t, plain)
        with trio.fail_after(WAIT_S):
            (event,) = await wait_history(t, journaled.run_id, 1)
            await wait_history(t, plain.run_id, 1)
        nursery.cancel_scope.cancel()

    records = [r for _, r in await read_journal(t, journaled.run_id, journaled.step_id)]
    (claim,) = [r for r in records if isinstance(r, ClaimRecord)]
    print(f"claim_id before journal(): {seen['journal'][0]}, after: {seen['journal'][1]}")
    assert seen["journal"] == (None, claim.claim_id)
    assert all(r.claim_id == claim.claim_id for r in records)
    assert isinstance(event, StepCompleted) and event.output == claim.claim_id
    assert seen["plain"] == (None, None)
