"""The one settlement path (``journal.settle_delivery``) that the worker and the bridge share,
on a real nats-server and on SimTransport: what it publishes, what it marks, what it refuses."""

from __future__ import annotations

import pytest

from dagnats_trio._seams import Seam, SeamContext, install_hook
from dagnats_trio.journal import (
    DeliveryState,
    Fenced,
    HolderKilled,
    Settlement,
    SettleRequest,
    TaskIdentity,
    open_journal,
    read_journal,
    settle_delivery,
)
from dagnats_trio.protocol import CommitAction, CommitRecord, StepCompleted, StepFailed
from dagnats_trio.transport import Transport

from ._helpers import history, make_task, uid


async def test_a_plain_step_publishes_its_event_then_is_acked(transport: Transport) -> None:
    task = make_task(uid())
    holder = DeliveryState(TaskIdentity.of(task))
    seams: list[Seam] = []

    async def hook(ctx: SeamContext) -> None:
        if ctx.run_id == task.run_id:
            seams.append(ctx.seam)

    with install_hook(hook):
        seq = await settle_delivery(
            transport, holder, None, SettleRequest(CommitAction.FAIL, error="no", retriable=False)
        )
    assert seq is None
    assert holder.settlement is Settlement.ACK
    assert seams == [Seam.AFTER_LIFECYCLE_EVENT]
    events = await history(transport, task.run_id)
    assert len(events) == 1
    ev = events[0]
    assert isinstance(ev, StepFailed)
    assert (ev.error, ev.retriable, ev.dispatch) == ("no", False, task.dispatch)


async def test_a_fenced_plain_holder_publishes_nothing(transport: Transport) -> None:
    task = make_task(uid())
    holder = DeliveryState(TaskIdentity.of(task))
    holder.fence("a test fenced it")
    with pytest.raises(Fenced, match="a test fenced it"):
        await settle_delivery(transport, holder, None, SettleRequest(CommitAction.COMPLETE))
    assert holder.settlement is Settlement.NO_ACK
    assert await history(transport, task.run_id) == []
    killed = DeliveryState(TaskIdentity.of(task))
    killed.kill()
    with pytest.raises(HolderKilled):
        await settle_delivery(transport, killed, None, SettleRequest(CommitAction.COMPLETE))
    assert killed.settlement is None
    assert await history(transport, task.run_id) == []


async def test_a_journaled_step_settles_through_its_commit(transport: Transport) -> None:
    task = make_task(uid())
    holder = DeliveryState(TaskIdentity.of(task))
    journal = await open_journal(transport, task, holder=holder)
    seq = await settle_delivery(
        transport, holder, journal, SettleRequest(CommitAction.COMPLETE, output={"a": 1})
    )
    commits = [
        (s, r)
        for s, r in await read_journal(transport, task.run_id, task.step_id)
        if isinstance(r, CommitRecord)
    ]
    assert [s for s, _ in commits] == [seq]
    assert commits[0][1].action is CommitAction.COMPLETE
    events = await history(transport, task.run_id)
    assert len(events) == 1
    ev = events[0]
    assert isinstance(ev, StepCompleted)
    assert (ev.output, ev.journal_seq) == ({"a": 1}, seq)
    assert holder.settlement is Settlement.ACK


@pytest.mark.parametrize("journaled", [False, True])
async def test_an_unchecked_request_is_checked_and_refused_before_anything(
    transport: Transport, journaled: bool
) -> None:
    """An exported entry point never settles an output that breaks the JSON policy: a request
    that does not say its output was checked is checked here, journaled or plain, and refused
    with nothing written; the step can then settle."""
    task = make_task(uid())
    holder = DeliveryState(TaskIdentity.of(task))
    journal = await open_journal(transport, task, holder=holder) if journaled else None
    bad = SettleRequest(CommitAction.COMPLETE, output={"x": [float("inf")]})
    with pytest.raises(TypeError, match=r"step output is not a JSON value: step output\.x\[0\]"):
        await settle_delivery(transport, holder, journal, bad)
    assert holder.settlement is None
    assert await history(transport, task.run_id) == []
    assert not [
        r
        for _, r in await read_journal(transport, task.run_id, task.step_id)
        if isinstance(r, CommitRecord)
    ]
    await settle_delivery(
        transport, holder, journal, SettleRequest(CommitAction.COMPLETE, output={"x": [1]})
    )
    (ev,) = await history(transport, task.run_id)
    assert isinstance(ev, StepCompleted) and ev.output == {"x": [1]}
