"""``worker._slots.Slots``: the worker's places for deliveries, reserved and given back whole."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from dagnats_trio.worker._slots import Slots

WAIT_S = 5.0


async def test_take_reserves_what_is_free_up_to_the_ask_and_give_back_returns_it() -> None:
    slots = Slots(5)
    assert await slots.take(3) == 3
    assert await slots.take(16) == 2  # only two were left
    assert slots.free == 0
    slots.give_back(4)
    assert slots.free == 4
    assert await slots.take(1) == 1
    assert slots.free == 3


async def test_take_waits_until_a_place_is_given_back() -> None:
    slots = Slots(1)
    assert await slots.take(1) == 1
    got: list[int] = []

    async def taker() -> None:
        got.append(await slots.take(8))

    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(taker)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []  # parked: nothing was free
            slots.give_back(1)
    assert got == [1]
    assert slots.free == 0


async def test_a_give_back_hands_a_place_to_each_waiting_take_before_freeing_any() -> None:
    """Two loops (two task types) share the places: the one that gives back all it held and
    asks again at once must not take them all again while the other waits (it would starve)."""
    slots = Slots(4)
    assert await slots.take(16) == 4  # the first loop holds every place
    got: list[int] = []

    async def other_loop() -> None:
        got.append(await slots.take(16))

    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other_loop)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []
            slots.give_back(4)  # its fetch brought nothing
            again = await slots.take(16)  # and it asks at once, before the other runs
            assert again == 3  # one place was handed to the waiting loop
    assert got == [1]
    assert slots.free == 0


async def test_a_waiting_take_is_cancellable_and_takes_nothing() -> None:
    slots = Slots(1)
    await slots.take(1)
    with trio.move_on_after(0.01) as scope:
        await slots.take(1)
    assert scope.cancelled_caught
    slots.give_back(1)
    assert slots.free == 1


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one place"):
        Slots(0)
    slots = Slots(2)
    with pytest.raises(ValueError, match="given back"):
        slots.give_back(1)  # nothing was taken
    with pytest.raises(ValueError, match="given back"):
        slots.give_back(-1)


async def test_take_refuses_an_ask_of_nothing() -> None:
    with pytest.raises(ValueError, match="at least one place"):
        await Slots(2).take(0)
