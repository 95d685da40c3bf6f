"""``journal._append_lock.AppendLock``, the lock a claim's appends take in turn: waiters served
first come first served, a cancelled waiter leaves the queue without taking it, a cancelled
caller takes nothing."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from dagnats_trio.journal._append_lock import AppendLock


async def test_waiters_take_the_lock_in_the_order_they_came() -> None:
    lock = AppendLock()
    order: list[int] = []

    async def take(k: int) -> None:
        await lock.acquire()
        try:
            order.append(k)
            await trio.sleep(0.01)
        finally:
            lock.release()

    await lock.acquire()
    async with trio.open_nursery() as nursery:
        for k in range(4):
            nursery.start_soon(take, k)
            await trio.testing.wait_all_tasks_blocked()
        assert order == []  # all queued behind the holder
        lock.release()
    assert order == [0, 1, 2, 3]
    assert not lock.held


async def test_a_cancelled_caller_takes_nothing_and_a_free_lock_is_taken_at_once() -> None:
    lock = AppendLock()
    with trio.CancelScope() as scope:
        scope.cancel()
        with pytest.raises(trio.Cancelled):
            await lock.acquire()
    assert not lock.held
    with trio.fail_after(5):
        await lock.acquire()
    assert lock.held
    lock.release()


async def test_a_cancelled_waiter_leaves_the_queue_and_the_next_one_gets_the_lock() -> None:
    lock = AppendLock()
    got: list[str] = []

    async def take(name: str, scope: trio.CancelScope) -> None:
        with scope:
            await lock.acquire()
            got.append(name)
            lock.release()

    await lock.acquire()
    first, second = trio.CancelScope(), trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(take, "first", first)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(take, "second", second)
        await trio.testing.wait_all_tasks_blocked()
        first.cancel()
        await trio.testing.wait_all_tasks_blocked()
        lock.release()
    assert got == ["second"]
    assert not lock.held


def test_releasing_a_free_lock_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not held"):
        AppendLock().release()


async def test_a_waiter_cancelled_just_before_a_release_leaves_the_lock_free() -> None:
    """The waiter is cancelled and the lock released in one go, before the waiter runs again:
    the lock is free at once (nobody left to hand it to), not held by no one."""
    lock = AppendLock()
    await lock.acquire()
    scope = trio.CancelScope()
    cancelled: list[bool] = []

    async def wait() -> None:
        with scope:
            await lock.acquire()
        cancelled.append(scope.cancelled_caught)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()
        lock.release()  # the waiter has not run since its cancellation
        assert not lock.held
    assert cancelled == [True]
    with trio.fail_after(5):
        await lock.acquire()  # free: taken at once, not parked forever
    lock.release()
    assert not lock.held


# --- the same observable behaviour as trio.Lock, over interleavings and cancellations --------

#: Tasks per generated schedule, at most (each arrives in its own second: _arrival_time).
MODEL_TASKS_MAX = 5
#: Examples of the model comparison (each two short runs on the autojump clock).
MODEL_EXAMPLES = 200
#: Deadline (seconds, autojump clock) of one run: a lock left held parks a task for good and the
#: run ends by this deadline instead of hanging.
MODEL_RUN_DEADLINE_S = 1000.0


async def test_taking_and_giving_back_are_protected_from_keyboard_interrupt() -> None:
    # As trio.Lock's are: a Ctrl-C between the lock's test and its set would leave it held.
    lock = AppendLock()
    seen: list[tuple[str, bool]] = []
    lot = lock._lot

    class WatchedLot:
        def __bool__(self) -> bool:
            return bool(lot)

        async def park(self) -> None:
            seen.append(("park", trio.lowlevel.currently_ki_protected()))
            await lot.park()

        def unpark(self) -> Any:
            seen.append(("unpark", trio.lowlevel.currently_ki_protected()))
            return lot.unpark()

    lock._lot = WatchedLot()  # type: ignore[assignment]
    await lock.acquire()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lock.acquire)
        await trio.testing.wait_all_tasks_blocked()
        lock.release()  # hands it to the waiter
    lock.release()
    assert seen == [("park", True), ("unpark", True)]
    assert not lock.held
    assert not trio.lowlevel.currently_ki_protected()


class _Boom(BaseException):
    """Raised inside the critical section (as a KeyboardInterrupt would be)."""


_task_plans = st.tuples(
    st.integers(0, 30),  # hold time (s); 0: no checkpoint while holding
    st.none() | st.integers(0, 60),  # the task's scope cancelled then (see _cancel_time)
    st.sampled_from(["none", "cancel_before_release", "cancel_after_release", "boom"]),
    st.integers(0, MODEL_TASKS_MAX - 1),  # whose scope the release action cancels
)


def _arrival_time(i: int) -> float:
    """When task ``i`` asks for the lock: in the order of the tasks, at a fraction of a second
    of its own (see :func:`_cancel_time`)."""
    return i + (i + 1) / 16


def _cancel_time(i: int, at: int) -> float:
    """When task ``i``'s scope is cancelled: ``at`` plus a fraction of its own, an exact binary
    one that no arrival nor other cancellation has. Holds are whole seconds, so every event
    falls on a whole second plus the fraction of the arrival or cancellation it follows from:
    two things happen at once only when one leads to the other. A tie of independent ones would
    leave their order to the scheduler, which runs the two locks' tasks in different passes
    (``trio.Lock`` yields on a free acquire), so the runs could differ by the scheduler alone."""
    return at + (i + 9) / 16


def _run_schedule(make_lock: Any, plans: list[tuple[int, int | None, str, int]]) -> list[Any]:
    """What a schedule shows: each task's acquire, release and end, with times."""
    trace: list[Any] = []

    async def main() -> None:
        lock = make_lock()
        scopes = [trio.CancelScope() for _ in plans]

        async def task(i: int, hold: int, action: str, other: int) -> None:
            await trio.sleep_until(_arrival_time(i))
            try:
                with scopes[i]:
                    await lock.acquire()
                    trace.append((trio.current_time(), "acquired", i))
                    try:
                        if hold:
                            await trio.sleep(hold)
                        if action == "boom":
                            raise _Boom
                    finally:
                        target = scopes[other % len(plans)]
                        if action == "cancel_before_release":
                            target.cancel()
                        lock.release()
                        if action == "cancel_after_release":
                            target.cancel()
                        trace.append((trio.current_time(), "released", i))
            except _Boom:
                trace.append((trio.current_time(), "boom", i))
            trace.append((trio.current_time(), "ended", i, scopes[i].cancelled_caught))

        async def canceller(i: int, at: int) -> None:
            await trio.sleep_until(_cancel_time(i, at))
            scopes[i].cancel()

        with trio.fail_after(MODEL_RUN_DEADLINE_S):
            async with trio.open_nursery() as nursery:
                for i, (hold, cancel_at, action, other) in enumerate(plans):
                    nursery.start_soon(task, i, hold, action, other)
                    if cancel_at is not None:
                        nursery.start_soon(canceller, i, cancel_at)
        held = lock.locked() if isinstance(lock, trio.Lock) else lock.held
        trace.append((trio.current_time(), "free", not held))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return sorted(trace, key=repr)


@settings(max_examples=MODEL_EXAMPLES, deadline=None)
@given(st.lists(_task_plans, min_size=1, max_size=MODEL_TASKS_MAX))
def test_the_append_lock_behaves_as_trio_lock(
    plans: list[tuple[int, int | None, str, int]],
) -> None:
    """Same acquires, releases, cancellations and ends, at the same times, as ``trio.Lock``,
    whatever the arrivals, holds, cancellations (while parked, while holding, just before or
    just after the release that hands the lock over) and exceptions inside the critical
    section; the lock is free at the end and mutual exclusion holds."""
    expected = _run_schedule(trio.Lock, plans)
    got = _run_schedule(AppendLock, plans)
    assert got == expected
    assert [t[2] for t in got if t[1] == "free"] == [True]
    spans: dict[int, list[float]] = {}
    for t in got:
        if t[1] in ("acquired", "released"):
            spans.setdefault(t[2], []).append(t[0])
    assert all(len(span) == 2 for span in spans.values())  # each acquire released once
    for (_, end), (start, _) in pairwise(sorted(spans.values())):
        assert end <= start  # one holder at a time
