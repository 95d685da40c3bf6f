"""How long submissions stay: a queued or placed one as long as its step (a 30-day wait on the
simulated clock loses nothing), a finished one for the seven-day dedupe window after it
finished, then it goes by itself. On nats-server, the writes themselves are checked: only the
write that settles a submission (and a closed index) carries the per-message TTL."""

from __future__ import annotations

from typing import Final

import pytest
import trio
from trio.testing import MockClock

from dagnats_trio.inputs import (
    InputsService,
    Mode,
    NotFoundError,
    PlacementState,
    SubmissionStatus,
    place_inputs,
)
from dagnats_trio.inputs.service import index_key, submission_key
from dagnats_trio.protocol import layout
from dagnats_trio.transport import NatsTransport, Transport, open_sim_transport, provision

from ._helpers import FakeJournal, new_run_id, write_snapshot

STEP = "agent"
DAY_S: Final = 24 * 3600.0
#: The wait of a step that waits for a person longer than the dedupe window.
LONG_WAIT_S: Final = 30 * DAY_S
#: Slack around the end of the window on the simulated clock.
WINDOW_SLACK_S: Final = 60.0
TTL_HEADER: Final = "Nats-TTL"


async def open_step(t: Transport) -> tuple[InputsService, str]:
    run_id = new_run_id()
    await write_snapshot(t, run_id, {STEP: "running"})
    return InputsService(t), run_id


async def test_a_queued_input_waits_30_days_and_is_then_placed(
    autojump_clock: MockClock,
) -> None:
    async with open_sim_transport() as t:
        await provision(t)
        service, run_id = await open_step(t)
        await service.submit(run_id, STEP, "steer-1", "steer", {"text": "still there?"})
        await service.submit(run_id, STEP, "follow-1", "follow_up", {"text": "and later"})
        journal = await FakeJournal.open(t, run_id, STEP, iteration=0)
        placed = await place_inputs(journal, service, Mode.STEER, state=PlacementState())
        assert [p.request_id for p in placed] == ["steer-1"]
        start = trio.current_time()
        await trio.sleep(LONG_WAIT_S)
        assert trio.current_time() - start >= LONG_WAIT_S

        # A month later: the queued input is still queued, the placed one still placed.
        assert await service.has_queued(run_id, STEP)
        listed = {s.request_id: s.status for s in await service.list(run_id, STEP)}
        assert listed == {"steer-1": SubmissionStatus.PLACED, "follow-1": SubmissionStatus.QUEUED}
        journal = await FakeJournal.open(t, run_id, STEP, iteration=1)
        placed = await place_inputs(journal, service, Mode.FOLLOW_UP, state=PlacementState())
        assert [(p.request_id, p.content) for p in placed] == [("follow-1", {"text": "and later"})]
        # A repeat of a live request id is still recognised (no second submission).
        again, created = await service.submit(run_id, STEP, "follow-1", "follow_up", "other")
        assert not created and again.content == {"text": "and later"}
        assert not await service.has_queued(run_id, STEP)


async def test_a_finished_submission_goes_after_the_dedupe_window(
    autojump_clock: MockClock,
) -> None:
    async with open_sim_transport() as t:
        await provision(t)
        service, run_id = await open_step(t)
        await service.submit(run_id, STEP, "withdrawn", "steer", 1)
        await service.submit(run_id, STEP, "kept", "steer", 2)
        await trio.sleep(LONG_WAIT_S)  # the window runs from the end, not from the submission
        await service.withdraw(run_id, STEP, "withdrawn")
        await trio.sleep(layout.INPUTS_DEDUPE_TTL_S - WINDOW_SLACK_S)
        # Inside the window: the finished one is there and a repeat is recognised.
        got = await service.get(run_id, STEP, "withdrawn")
        assert got.status is SubmissionStatus.WITHDRAWN
        assert not (await service.submit(run_id, STEP, "withdrawn", "steer", 9))[1]
        assert (await service.get(run_id, STEP, "kept")).status is SubmissionStatus.QUEUED

        await service.settle_step(run_id, STEP)  # the step finishes: "kept" ends unanswered
        await trio.sleep(2 * WINDOW_SLACK_S)
        # The withdrawn one's window has passed: it is gone, and so is nothing else.
        with pytest.raises(NotFoundError):
            await service.get(run_id, STEP, "withdrawn")
        assert [s.request_id for s in await service.list(run_id, STEP)] == ["kept"]
        assert await t.kv_get(layout.INPUTS_BUCKET, index_key(run_id, STEP)) is not None

        await trio.sleep(layout.INPUTS_DEDUPE_TTL_S)
        # A window after the step finished, nothing of it is left: records and index.
        assert await service.list(run_id, STEP) == []
        assert await t.kv_get(layout.INPUTS_BUCKET, index_key(run_id, STEP)) is None


async def ttl_of(t: NatsTransport, key: str) -> str | None:
    msg = await t.get_last_msg(f"KV_{layout.INPUTS_BUCKET}", f"$KV.{layout.INPUTS_BUCKET}.{key}")
    assert msg is not None
    return msg.headers.get(TTL_HEADER)


async def test_only_finished_submissions_carry_a_ttl_on_nats_server(
    nats_transport: NatsTransport,
) -> None:
    t = nats_transport
    service, run_id = await open_step(t)
    for rid in ("queued", "placed", "withdrawn"):
        await service.submit(run_id, STEP, rid, "steer", rid)
    [_, placed, _] = await service.placement_candidates(run_id, STEP, Mode.STEER)
    assert await service.claim(placed, iteration=0) is not None
    await service.withdraw(run_id, STEP, "withdrawn")
    window = f"{layout.INPUTS_DEDUPE_TTL_S}s"
    key = {rid: submission_key(run_id, STEP, rid) for rid in ("queued", "placed", "withdrawn")}
    assert await ttl_of(t, key["queued"]) is None
    assert await ttl_of(t, key["placed"]) is None
    assert await ttl_of(t, index_key(run_id, STEP)) is None
    assert await ttl_of(t, key["withdrawn"]) == window

    await service.settle_step(run_id, STEP)
    for rid in ("queued", "placed", "withdrawn"):
        assert (await service.get(run_id, STEP, rid)).status.settled
        assert await ttl_of(t, key[rid]) == window, rid
    assert await ttl_of(t, index_key(run_id, STEP)) == window
