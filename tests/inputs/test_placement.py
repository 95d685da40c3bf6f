"""``place_inputs`` against a journal writer that appends real, fenced records."""

from __future__ import annotations

import pytest
import trio

from dagnats_trio.inputs import (
    ConflictError,
    InputsService,
    Mode,
    PlacedInput,
    PlacementState,
    SubmissionStatus,
    place_inputs,
)
from dagnats_trio.inputs._store import SubmissionStore  # the index as a crash left it
from dagnats_trio.protocol import InputPlacedRecord
from dagnats_trio.transport import Transport

from ._helpers import FakeJournal, journal_records, new_run_id, write_snapshot

STEP = "agent"
#: Every test here is bounded by this.
TEST_DEADLINE_S = 20.0
RACE_ROUNDS = 30


async def setup(transport: Transport) -> tuple[InputsService, str]:
    run_id = new_run_id()
    await write_snapshot(transport, run_id, {STEP: "running"})
    return InputsService(transport), run_id


def ids(placed: list[PlacedInput]) -> list[str]:
    return [p.request_id for p in placed]


async def placed_records(transport: Transport, run_id: str) -> list[InputPlacedRecord]:
    return [
        r
        for r in await journal_records(transport, run_id, STEP)
        if isinstance(r, InputPlacedRecord)
    ]


async def test_places_in_submission_order_by_mode(transport: Transport) -> None:
    service, run_id = await setup(transport)
    for rid, mode in [("s1", "steer"), ("f1", "follow_up"), ("s2", "steer"), ("s0", "steer")]:
        await service.submit(run_id, STEP, rid, mode, {"text": rid})
    journal = await FakeJournal.open(transport, run_id, STEP, iteration=0)
    state = PlacementState()

    with trio.fail_after(TEST_DEADLINE_S):
        steer = await place_inputs(journal, service, Mode.STEER, state=state)
        assert ids(steer) == ["s1", "s2", "s0"]
        assert steer[0] == PlacedInput("s1", Mode.STEER, {"text": "s1"}, 0)
        assert await place_inputs(journal, service, Mode.STEER, state=state) == []
        follow = await place_inputs(journal, service, Mode.FOLLOW_UP, state=state)
        assert ids(follow) == ["f1"]

    records = await placed_records(transport, run_id)
    assert [(r.request_id, r.mode, r.iteration, r.claim_id) for r in records] == [
        ("s1", "steer", 0, journal.claim_id),
        ("s2", "steer", 0, journal.claim_id),
        ("s0", "steer", 0, journal.claim_id),
        ("f1", "follow_up", 0, journal.claim_id),
    ]
    for sub in await service.list(run_id, STEP):
        assert (sub.status, sub.placed_iteration) == (SubmissionStatus.PLACED, 0)
    assert not await service.has_queued(run_id, STEP)


async def test_a_redelivery_returns_earlier_placements_once_then_new_ones(
    transport: Transport,
) -> None:
    service, run_id = await setup(transport)
    await service.submit(run_id, STEP, "a", "steer", 1)
    await service.submit(run_id, STEP, "b", "steer", 2)
    first = await FakeJournal.open(transport, run_id, STEP, iteration=3)
    assert ids(await place_inputs(first, service, Mode.STEER, state=PlacementState())) == ["a", "b"]

    # The delivery dies; the iteration is delivered again (a new attempt here), and a new input
    # arrived meanwhile.
    await service.submit(run_id, STEP, "c", "steer", 3)
    again = await FakeJournal.open(transport, run_id, STEP, iteration=3, attempt=2)
    state = PlacementState()
    with trio.fail_after(TEST_DEADLINE_S):
        redelivered = await place_inputs(again, service, Mode.STEER, state=state)
        assert ids(redelivered) == ["a", "b", "c"]
        assert [p.content for p in redelivered] == [1, 2, 3]
        assert await place_inputs(again, service, Mode.STEER, state=state) == []
        # The other mode sees nothing of these.
        assert await place_inputs(again, service, Mode.FOLLOW_UP, state=state) == []

    # The next iteration places nothing that any delivery of iteration 3 placed.
    await service.submit(run_id, STEP, "d", "steer", 4)
    nxt = await FakeJournal.open(transport, run_id, STEP, iteration=4)
    assert ids(await place_inputs(nxt, service, Mode.STEER, state=PlacementState())) == ["d"]

    records = await placed_records(transport, run_id)
    assert [r.request_id for r in records] == ["a", "b", "c", "d"]  # each exactly once
    assert [r.attempt for r in records] == [1, 1, 2, 1]


async def test_a_crash_between_claim_and_record_keeps_the_input(transport: Transport) -> None:
    service, run_id = await setup(transport)
    await service.submit(run_id, STEP, "a", "steer", "first")
    await service.submit(run_id, STEP, "b", "steer", "second")
    # A delivery of iteration 5 claims "a" in KV, then dies before writing its record.
    [cand_a, _] = await service.placement_candidates(run_id, STEP, Mode.STEER)
    assert await service.claim(cand_a, iteration=5) is not None
    assert (await service.get(run_id, STEP, "a")).status is SubmissionStatus.PLACED
    assert await placed_records(transport, run_id) == []

    journal = await FakeJournal.open(transport, run_id, STEP, iteration=5)
    with trio.fail_after(TEST_DEADLINE_S):
        placed = await place_inputs(journal, service, Mode.STEER, state=PlacementState())
    assert ids(placed) == ["a", "b"]
    assert [r.request_id for r in await placed_records(transport, run_id)] == ["a", "b"]


async def test_a_recorded_placement_of_an_earlier_iteration_is_not_placed_again(
    transport: Transport,
) -> None:
    service, run_id = await setup(transport)
    await service.submit(run_id, STEP, "a", "steer", 1)
    first = await FakeJournal.open(transport, run_id, STEP, iteration=1)
    assert ids(await place_inputs(first, service, Mode.STEER, state=PlacementState())) == ["a"]
    # Iteration 1 committed, but its ``done`` was lost, and the index still lists the input
    # (a crash before the index update): the next iteration must not place it again.
    await SubmissionStore(transport).index_add(run_id, STEP, "a", Mode.STEER)
    assert (await service.get(run_id, STEP, "a")).status is SubmissionStatus.PLACED

    nxt = await FakeJournal.open(transport, run_id, STEP, iteration=2)
    with trio.fail_after(TEST_DEADLINE_S):
        assert await place_inputs(nxt, service, Mode.STEER, state=PlacementState()) == []
    assert [r.request_id for r in await placed_records(transport, run_id)] == ["a"]
    assert (await service.get(run_id, STEP, "a")).status is SubmissionStatus.DONE


async def test_an_unrecorded_claim_is_adopted_by_a_later_iteration(transport: Transport) -> None:
    """The known gap, closed: iteration 1 claimed "a" and died before recording it, and no
    delivery of iteration 1 asked for steer inputs again. Iteration 3 records it."""
    service, run_id = await setup(transport)
    await service.submit(run_id, STEP, "a", "steer", "lost?")
    await service.submit(run_id, STEP, "b", "steer", "next")
    [cand_a, _] = await service.placement_candidates(run_id, STEP, Mode.STEER)
    assert await service.claim(cand_a, iteration=1) is not None

    # A stale holder (iteration 0) leaves the claim alone.
    stale = await FakeJournal.open(transport, run_id, STEP, iteration=0)
    with trio.fail_after(TEST_DEADLINE_S):
        assert ids(await place_inputs(stale, service, Mode.FOLLOW_UP, state=PlacementState())) == []
        later = await FakeJournal.open(transport, run_id, STEP, iteration=3)
        # Another mode does not take it.
        assert await place_inputs(later, service, Mode.FOLLOW_UP, state=PlacementState()) == []
        placed = await place_inputs(later, service, Mode.STEER, state=PlacementState())
    assert ids(placed) == ["a", "b"]
    assert [p.iteration for p in placed] == [3, 3]
    records = await placed_records(transport, run_id)
    assert [(r.request_id, r.iteration) for r in records] == [("a", 3), ("b", 3)]
    got = await service.get(run_id, STEP, "a")
    assert (got.status, got.placed_iteration) == (SubmissionStatus.PLACED, 3)
    assert not await service.has_queued(run_id, STEP)


async def test_settlement_makes_an_unrecorded_claim_unanswered(transport: Transport) -> None:
    service, run_id = await setup(transport)
    for rid in ("lost", "kept", "queued"):
        await service.submit(run_id, STEP, rid, "follow_up", rid)
    lost, kept, _ = await service.placement_candidates(run_id, STEP, Mode.FOLLOW_UP)
    assert await service.claim(lost, iteration=0) is not None
    # "kept" is claimed and recorded (only its iteration's commit would make it done).
    journal = await FakeJournal.open(transport, run_id, STEP, iteration=0)
    claimed = await service.claim(kept, iteration=0)
    assert claimed is not None
    await journal.append(InputPlacedRecord(0, 1, journal.claim_id, "kept", "follow_up", "kept"))

    with trio.fail_after(TEST_DEADLINE_S):
        await service.settle_step(run_id, STEP)
        await service.settle_step(run_id, STEP)  # repeated after a crash: harmless
    statuses = {s.request_id: s.status for s in await service.list(run_id, STEP)}
    # "kept" was seen by an iteration that never committed: unanswered too, its placement kept.
    assert statuses == {
        "lost": SubmissionStatus.UNANSWERED,
        "kept": SubmissionStatus.UNANSWERED,
        "queued": SubmissionStatus.UNANSWERED,
    }
    assert (await service.get(run_id, STEP, "lost")).placed_iteration is None
    assert (await service.get(run_id, STEP, "kept")).placed_iteration == 0
    assert [r.request_id for r in await placed_records(transport, run_id)] == ["kept"]


async def test_withdrawn_and_settled_inputs_are_never_placed(transport: Transport) -> None:
    service, run_id = await setup(transport)
    await service.submit(run_id, STEP, "w", "steer", 1)
    await service.submit(run_id, STEP, "k", "steer", 2)
    await service.withdraw(run_id, STEP, "w")
    journal = await FakeJournal.open(transport, run_id, STEP, iteration=0)
    assert ids(await place_inputs(journal, service, Mode.STEER, state=PlacementState())) == ["k"]
    await service.submit(run_id, STEP, "u", "follow_up", 3)
    await service.settle_step(run_id, STEP)
    assert await place_inputs(journal, service, Mode.FOLLOW_UP, state=PlacementState()) == []
    assert [r.request_id for r in await placed_records(transport, run_id)] == ["k"]


async def race_once(
    service: InputsService, journal: FakeJournal, rid: str, round_no: int
) -> tuple[list[PlacedInput], bool]:
    """Start a placement and a withdrawal of ``rid`` at once; return what each got."""
    placed: list[PlacedInput] = []
    withdrew: list[bool] = []
    # Extra reads before acting shift the interleaving from round to round, so each side reaches
    # its compare-and-set first in some rounds.
    withdraw_lag, place_lag = round_no % 4, (round_no // 4) % 2

    async def lag(rounds: int) -> None:
        for _ in range(rounds):
            await service.get(journal.run_id, STEP, rid)

    async def place() -> None:
        await lag(place_lag)
        placed.extend(await place_inputs(journal, service, Mode.STEER, state=PlacementState()))

    async def withdraw() -> None:
        await lag(withdraw_lag)
        try:
            await service.withdraw(journal.run_id, STEP, rid)
        except ConflictError:
            withdrew.append(False)
        else:
            withdrew.append(True)

    async with trio.open_nursery() as nursery:
        first, second = (place, withdraw) if round_no % 2 else (withdraw, place)
        nursery.start_soon(first)
        nursery.start_soon(second)
    assert len(withdrew) == 1
    return placed, withdrew[0]


async def test_a_withdrawal_that_wins_is_final(transport: Transport) -> None:
    """Race withdraw against placement many times, each order of start; exactly one wins."""
    service, run_id = await setup(transport)
    outcomes = {"withdrawn": 0, "placed": 0}
    with trio.fail_after(TEST_DEADLINE_S):
        for round_no in range(RACE_ROUNDS):
            rid = f"r{round_no}"
            await service.submit(run_id, STEP, rid, "steer", round_no)
            journal = await FakeJournal.open(transport, run_id, STEP, iteration=round_no)
            placed, withdrew = await race_once(service, journal, rid, round_no)
            status = (await service.get(run_id, STEP, rid)).status
            recorded = [r.request_id for r in await placed_records(transport, run_id)]
            if withdrew:
                outcomes["withdrawn"] += 1
                assert placed == []
                assert status is SubmissionStatus.WITHDRAWN
                assert rid not in recorded
            else:
                outcomes["placed"] += 1
                assert ids(placed) == [rid]
                assert status is SubmissionStatus.PLACED
                assert recorded.count(rid) == 1
    assert sum(outcomes.values()) == RACE_ROUNDS
    assert outcomes["withdrawn"] > 0 and outcomes["placed"] > 0, outcomes
    # Sequential orders give each outcome for sure.
    await service.submit(run_id, STEP, "w-first", "steer", 0)
    await service.withdraw(run_id, STEP, "w-first")
    late = await FakeJournal.open(transport, run_id, STEP, iteration=RACE_ROUNDS)
    assert await place_inputs(late, service, Mode.STEER, state=PlacementState()) == []
    await service.submit(run_id, STEP, "p-first", "steer", 0)
    assert ids(await place_inputs(late, service, Mode.STEER, state=PlacementState())) == ["p-first"]
    with pytest.raises(ConflictError):
        await service.withdraw(run_id, STEP, "p-first")


async def test_commit_then_mark_done_and_finish_leaves_nothing_queued(
    transport: Transport,
) -> None:
    service, run_id = await setup(transport)
    await service.submit(run_id, STEP, "a", "steer", 1)
    journal = await FakeJournal.open(transport, run_id, STEP, iteration=0)
    await place_inputs(journal, service, Mode.STEER, state=PlacementState())
    await service.submit(run_id, STEP, "late", "steer", 2)
    # The iteration commits: what it placed is done.
    done = await service.mark_done(run_id, STEP, [r.request_id for r in journal.placed_inputs()])
    assert [s.request_id for s in done] == ["a"]
    # The step completes before "late" is placed.
    await service.settle_step(run_id, STEP)
    final = {s.request_id: s.status for s in await service.list(run_id, STEP)}
    assert final == {"a": SubmissionStatus.DONE, "late": SubmissionStatus.UNANSWERED}
