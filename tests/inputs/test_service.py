"""The inputs service on a real nats-server and on SimTransport."""

from __future__ import annotations

import pytest
import trio

from dagnats_trio.inputs import (
    MAX_CONTENT_BYTES,
    MAX_GET_WAIT_S,
    BadRequestError,
    ConflictError,
    ContentTooLargeError,
    InputsService,
    Mode,
    NotFoundError,
    SubmissionStatus,
)
from dagnats_trio.protocol import (
    CommitAction,
    CommitRecord,
    InputPlacedRecord,
    InputSubmitted,
    decode_event,
    layout,
)
from dagnats_trio.transport import Transport

from ._helpers import FakeJournal, new_run_id, write_snapshot

#: Every wait in these tests is bounded by this.
TEST_DEADLINE_S = 10.0
#: A get that must not wait asks to wait as long as a get may; the bound it is held to is half of
#: that, so a loaded machine's slow answer is still told apart from a wait.
LONG_WAIT_S = MAX_GET_WAIT_S
NO_WAIT_BOUND_S = LONG_WAIT_S / 2
STEP = "agent"


async def open_step(transport: Transport, steps: dict[str, str] | None = None) -> str:
    run_id = new_run_id()
    await write_snapshot(transport, run_id, steps or {STEP: "running", "other": "pending"})
    return run_id


async def test_submit_then_repeat_returns_the_original(transport: Transport) -> None:
    service = InputsService(transport)
    run_id = await open_step(transport)
    sub, created = await service.submit(run_id, STEP, "msg-42", "steer", {"text": "staging"})
    assert created is True
    assert sub.status is SubmissionStatus.QUEUED
    assert (sub.mode, sub.content, sub.order) == (Mode.STEER, {"text": "staging"}, 0)

    again, created_again = await service.submit(
        run_id, STEP, "msg-42", Mode.FOLLOW_UP, {"text": "something else"}
    )
    assert created_again is False
    assert again == sub
    assert (await service.get(run_id, STEP, "msg-42")).content == {"text": "staging"}

    # The engine is woken by an input.submitted event on the run's history, once.
    msgs = await transport.read_subject(
        layout.HISTORY_STREAM, layout.history_subject(run_id), 1, 10
    )
    events = [decode_event(m.data) for m in msgs]
    assert events == [InputSubmitted(run_id=run_id, step_id=STEP, request_id="msg-42")]


async def test_a_repeat_is_answered_even_after_the_step_finished(transport: Transport) -> None:
    service = InputsService(transport)
    run_id = await open_step(transport)
    original, _ = await service.submit(run_id, STEP, "r1", "steer", "hi")
    await service.settle_step(run_id, STEP)
    await write_snapshot(transport, run_id, {STEP: "completed"})
    repeat, created = await service.submit(run_id, STEP, "r1", "steer", "hi")
    assert created is False
    assert repeat.status is SubmissionStatus.UNANSWERED
    assert repeat.content == original.content


@pytest.mark.parametrize(
    ("request_id", "mode", "content", "error", "code"),
    [
        ("", "steer", 1, BadRequestError, "invalid_request_id"),
        ("a\n", "steer", 1, BadRequestError, "invalid_request_id"),
        ("a\x00b", "steer", 1, BadRequestError, "invalid_request_id"),
        ("\ud800", "steer", 1, BadRequestError, "invalid_request_id"),
        ("x" * 129, "steer", 1, BadRequestError, "invalid_request_id"),
        ("ok", "shout", 1, BadRequestError, "invalid_mode"),
        ("ok", "steer", {"f": object()}, BadRequestError, "invalid_content"),
        ("ok", "steer", float("nan"), BadRequestError, "invalid_content"),
        ("ok", "steer", "x" * (MAX_CONTENT_BYTES + 1), ContentTooLargeError, "content_too_large"),
    ],
)
async def test_bad_submissions_get_clear_errors(
    transport: Transport, request_id: str, mode: str, content: object, error: type, code: str
) -> None:
    service = InputsService(transport)
    run_id = await open_step(transport)
    with pytest.raises(error) as info:
        await service.submit(run_id, STEP, request_id, mode, content)
    assert info.value.code == code
    assert info.value.message
    assert info.value.status == {BadRequestError: 400, ContentTooLargeError: 413}[error]
    assert await service.list(run_id, STEP) == []
    # The largest accepted content is accepted.
    _, created = await service.submit(run_id, STEP, "fits", "steer", "x" * (MAX_CONTENT_BYTES - 2))
    assert created


async def test_unknown_run_or_step_and_finished_step(transport: Transport) -> None:
    service = InputsService(transport)
    run_id = await open_step(transport, {STEP: "running", "done": "completed", "bad": "failed"})
    with pytest.raises(NotFoundError) as info:
        await service.submit(new_run_id(), STEP, "r", "steer", 1)
    assert (info.value.status, info.value.code) == (404, "run_not_found")
    with pytest.raises(NotFoundError) as info:
        await service.submit(run_id, "nope", "r", "steer", 1)
    assert info.value.code == "step_not_found"
    for finished in ("done", "bad"):
        with pytest.raises(ConflictError) as conflict:
            await service.submit(run_id, finished, "r", "steer", 1)
        assert (conflict.value.status, conflict.value.code) == (409, "step_finished")
    stopped = new_run_id()
    await write_snapshot(transport, stopped, {STEP: "running"}, status="cancelled")
    with pytest.raises(ConflictError) as conflict:
        await service.submit(stopped, STEP, "r", "steer", 1)
    assert conflict.value.code == "run_finished"
    # The open step still takes input.
    assert (await service.submit(run_id, STEP, "r", "steer", 1))[1] is True


class _SeesReads:
    """Delegates to a transport and sets ``read`` once a key is read inside an open watch, so
    the test knows the waiter is watching before it changes anything."""

    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self.watching = False
        self.read = trio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def kv_watch(self, bucket: str, prefix: str = "") -> object:
        self.watching = True
        return self._inner.kv_watch(bucket, prefix)

    async def kv_get(self, bucket: str, key: str) -> object:
        entry = await self._inner.kv_get(bucket, key)
        if self.watching:
            self.read.set()
        return entry


async def test_get_waits_for_a_change(transport: Transport) -> None:
    seen = _SeesReads(transport)
    service = InputsService(seen)  # type: ignore[arg-type]
    run_id = await open_step(transport)
    await service.submit(run_id, STEP, "r1", "steer", "x")
    result = []

    async def waiter() -> None:
        # Waits far longer than the test's deadline: only the change can end it in time.
        result.append(await service.get(run_id, STEP, "r1", wait_s=3 * TEST_DEADLINE_S))

    with trio.fail_after(TEST_DEADLINE_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await seen.read.wait()
            assert result == []
            await InputsService(transport).withdraw(run_id, STEP, "r1")
    assert [s.status for s in result] == [SubmissionStatus.WITHDRAWN]


async def test_get_returns_on_timeout_and_at_once_when_already_changed(
    transport: Transport,
) -> None:
    service = InputsService(transport)
    run_id = await open_step(transport)
    await service.submit(run_id, STEP, "r1", "steer", "x")
    start = trio.current_time()
    with trio.fail_after(TEST_DEADLINE_S):
        sub = await service.get(run_id, STEP, "r1", wait_s=0.3)
    assert sub.status is SubmissionStatus.QUEUED
    assert trio.current_time() - start >= 0.3
    # The caller says it knows "placed": the current "queued" differs, so no wait.
    with trio.fail_after(NO_WAIT_BOUND_S):
        sub = await service.get(
            run_id, STEP, "r1", wait_s=LONG_WAIT_S, since=SubmissionStatus.PLACED
        )
    assert sub.status is SubmissionStatus.QUEUED
    # A settled submission cannot change: no wait either.
    await service.withdraw(run_id, STEP, "r1")
    with trio.fail_after(NO_WAIT_BOUND_S):
        sub = await service.get(run_id, STEP, "r1", wait_s=LONG_WAIT_S)
    assert sub.status is SubmissionStatus.WITHDRAWN
    with pytest.raises(NotFoundError):
        await service.get(run_id, STEP, "missing", wait_s=1)
    with pytest.raises(BadRequestError):
        await service.get(run_id, STEP, "r1", wait_s=-1)


async def test_withdraw(transport: Transport) -> None:
    service = InputsService(transport)
    run_id = await open_step(transport)
    await service.submit(run_id, STEP, "r1", "steer", "x")
    await service.submit(run_id, STEP, "r2", "steer", "y")
    assert await service.has_queued(run_id, STEP)
    withdrawn = await service.withdraw(run_id, STEP, "r1")
    assert withdrawn.status is SubmissionStatus.WITHDRAWN
    assert withdrawn.settled_at_ms is not None
    # A retried withdrawal answers the same.
    assert (await service.withdraw(run_id, STEP, "r1")).status is SubmissionStatus.WITHDRAWN
    with pytest.raises(NotFoundError) as info:
        await service.withdraw(run_id, STEP, "nope")
    assert info.value.code == "input_not_found"
    assert await service.has_queued(run_id, STEP)
    await service.withdraw(run_id, STEP, "r2")
    assert not await service.has_queued(run_id, STEP)


async def test_settle_step_and_mark_done(transport: Transport) -> None:
    service = InputsService(transport)
    run_id = await open_step(transport)
    for rid in ("a", "b", "c", "d", "e"):
        await service.submit(run_id, STEP, rid, "steer", rid)
    candidates = await service.placement_candidates(run_id, STEP, Mode.STEER)
    assert [c.submission.request_id for c in candidates] == ["a", "b", "c", "d", "e"]
    # "a" is claimed and recorded by iteration 2, "e" by iteration 3; only iteration 2 commits.
    journal = await FakeJournal.open(transport, run_id, STEP, iteration=2)
    assert await service.claim(candidates[0], iteration=2) is not None
    await journal.append(InputPlacedRecord(2, 1, journal.claim_id, "a", "steer", "a"))
    await journal.append(CommitRecord(2, 1, journal.claim_id, "n2", CommitAction.CONTINUE))
    assert await service.claim(candidates[4], iteration=3) is not None
    await journal.append(InputPlacedRecord(3, 1, journal.claim_id, "e", "steer", "e"))
    await service.withdraw(run_id, STEP, "b")
    # A placed input cannot be withdrawn.
    with pytest.raises(ConflictError) as info:
        await service.withdraw(run_id, STEP, "a")
    assert info.value.code == "not_withdrawable"

    # The step fails in iteration 3; the worker's marking of "a" as done was lost.
    await service.settle_step(run_id, STEP)
    subs = {s.request_id: s for s in await service.list(run_id, STEP)}
    assert {rid: s.status for rid, s in subs.items()} == {
        "a": SubmissionStatus.DONE,
        "b": SubmissionStatus.WITHDRAWN,
        "c": SubmissionStatus.UNANSWERED,
        "d": SubmissionStatus.UNANSWERED,
        "e": SubmissionStatus.UNANSWERED,
    }
    assert (subs["a"].placed_iteration, subs["e"].placed_iteration) == (2, 3)
    assert all(s.settled_at_ms is not None for s in subs.values())
    assert not await service.has_queued(run_id, STEP)
    with pytest.raises(ConflictError) as info:
        await service.withdraw(run_id, STEP, "c")
    # The step takes no more inputs, even while the snapshot still says running.
    with pytest.raises(ConflictError) as info:
        await service.submit(run_id, STEP, "late", "steer", 1)
    assert info.value.code == "step_finished"

    # A late marking (a worker that committed after the step finished) changes nothing.
    assert await service.mark_done(run_id, STEP, ["a", "c", "e", "unknown"]) == []
    assert (await service.get(run_id, STEP, "e")).status is SubmissionStatus.UNANSWERED
    # Settling again (the engine replaying after a crash) changes nothing either.
    await service.settle_step(run_id, STEP)
    again = {s.request_id: s for s in await service.list(run_id, STEP)}
    assert again == subs


async def test_mark_done_moves_placed_inputs_once(transport: Transport) -> None:
    service = InputsService(transport)
    run_id = await open_step(transport)
    await service.submit(run_id, STEP, "a", "steer", "a")
    await service.submit(run_id, STEP, "q", "steer", "q")
    [a, _] = await service.placement_candidates(run_id, STEP, Mode.STEER)
    assert await service.claim(a, iteration=0) is not None
    moved = await service.mark_done(run_id, STEP, ["a", "q", "unknown"])
    assert [(s.request_id, s.status) for s in moved] == [("a", SubmissionStatus.DONE)]
    assert await service.mark_done(run_id, STEP, ["a"]) == []
    assert (await service.get(run_id, STEP, "q")).status is SubmissionStatus.QUEUED


async def test_settling_a_step_without_inputs_closes_it(transport: Transport) -> None:
    service = InputsService(transport)
    run_id = await open_step(transport)
    assert not await service.has_queued(run_id, STEP)
    await service.settle_step(run_id, STEP)
    await service.settle_step(run_id, STEP)  # idempotent
    with pytest.raises(ConflictError):
        await service.submit(run_id, STEP, "late", "follow_up", 1)
    # The other step is untouched.
    assert (await service.submit(run_id, "other", "r", "follow_up", 1))[1]


async def test_list_keeps_submission_order(transport: Transport) -> None:
    service = InputsService(transport)
    run_id = await open_step(transport)
    ids = ["z", "a", "m", "b0", "b"]
    for i, rid in enumerate(ids):
        await service.submit(run_id, STEP, rid, "steer" if i % 2 else "follow_up", i)
    listed = await service.list(run_id, STEP)
    assert [s.request_id for s in listed] == ids
    assert [s.order for s in listed] == list(range(len(ids)))
    assert await service.list(run_id, "other") == []


class _PausesCreate:
    """Delegates to a transport but holds the creation of one key until released."""

    def __init__(self, inner: Transport, key: str) -> None:
        self._inner = inner
        self._key = key
        self.reached = trio.Event()
        self.release = trio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def kv_create(
        self, bucket: str, key: str, value: bytes, *, ttl_s: float | None = None
    ) -> int:
        if key == self._key:
            self.reached.set()
            await self.release.wait()
        return await self._inner.kv_create(bucket, key, value, ttl_s=ttl_s)


async def test_a_submission_in_flight_when_the_step_finishes_is_not_left_queued(
    transport: Transport,
) -> None:
    run_id = await open_step(transport)
    paused = _PausesCreate(transport, f"{run_id}.{STEP}.slow")
    submitter = InputsService(paused)  # type: ignore[arg-type]
    engine_side = InputsService(transport)
    result = []

    async def submit() -> None:
        result.append(await submitter.submit(run_id, STEP, "slow", "steer", "x"))

    with trio.fail_after(TEST_DEADLINE_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit)
            # The submission passed every check and is indexed, but its record is not written.
            await paused.reached.wait()
            await engine_side.settle_step(run_id, STEP)
            paused.release.set()
    [(sub, created)] = result
    assert created is True
    assert sub.status is SubmissionStatus.UNANSWERED
    assert (await engine_side.get(run_id, STEP, "slow")).status is SubmissionStatus.UNANSWERED
    assert not await engine_side.has_queued(run_id, STEP)
    # No wake-up was announced for an input that can never be placed.
    msgs = await transport.read_subject(
        layout.HISTORY_STREAM, layout.history_subject(run_id), 1, 10
    )
    assert msgs == []
