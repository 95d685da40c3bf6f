"""``journal._append_lock.AppendLock``, the lock a claim's appends take in turn: waiters served
first come first served, a cancelled waiter leaves the queue without taking it, a cancelled
caller takes nothing."""

from __future__ import annotations

import pytest
import trio
import trio.testing

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
