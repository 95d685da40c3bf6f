"""``dagnats_trio.testing.run_deterministic``: ``trio.run`` on the autojump clock as one
Hypothesis example, so Trio's scheduler (seeded by Hypothesis through Trio's plugin) interleaves
the same way every time; what the run returns or raises comes out once, silently."""

from __future__ import annotations

import sys
from pathlib import Path

import hypothesis
import pytest
import trio
from hypothesis import strategies as st

from dagnats_trio.testing import SchedulingUnavailable, run_deterministic

#: Hypothesis runs no plugin (Trio's included) when this is set.
NO_PLUGINS_ENV = "HYPOTHESIS_NO_PLUGINS"
#: Tasks and rounds of the race below: 4 tasks x 6 checkpoints leave many interleavings.
RACERS = 4
ROUNDS = 6


async def race(calls: list[int]) -> str:
    """Who ran when, RACERS tasks that checkpoint ROUNDS times each; also counts its calls."""
    calls.append(1)
    order: list[str] = []

    async def racer(name: str) -> None:
        for _ in range(ROUNDS):
            order.append(name)
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for i in range(RACERS):
            nursery.start_soon(racer, "abcd"[i])
    return "".join(order)


async def fail(calls: list[int], exc: BaseException) -> None:
    calls.append(1)
    await trio.lowlevel.checkpoint()
    raise exc


def test_the_same_run_interleaves_the_same_way_and_runs_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    calls: list[int] = []
    orders = {run_deterministic(race, calls) for _ in range(5)}
    assert len(orders) == 1 and len(calls) == 5
    (order,) = orders
    assert sorted(order) == sorted("abcd" * ROUNDS)
    # Without it, Trio's generator goes on from wherever it is: the interleavings differ.
    bare = {trio.run(race, calls) for _ in range(20)}
    assert len(bare) > 1, bare
    # Nothing printed, nothing written in the working directory (no .hypothesis database).
    assert capsys.readouterr() == ("", "")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("exc", [ValueError("boom"), KeyboardInterrupt()])
def test_what_the_run_raises_comes_out_once_and_quietly(
    exc: BaseException,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Hypothesis never sees a failing example: it would run it again and print
    "Falsifying example"; a KeyboardInterrupt (``just chaos``'s watchdog) must stop it at once."""
    monkeypatch.chdir(tmp_path)
    calls: list[int] = []
    with pytest.raises(type(exc)) as raised:
        run_deterministic(fail, calls, exc)
    assert raised.value is exc
    assert calls == [1]
    out, err = capsys.readouterr()
    assert "Falsifying" not in out + err and (out, err) == ("", "")
    assert list(tmp_path.iterdir()) == []


def test_without_the_plugin_or_hypothesis_it_says_so_and_runs_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    monkeypatch.setenv(NO_PLUGINS_ENV, "1")
    with pytest.raises(SchedulingUnavailable, match=f"unset {NO_PLUGINS_ENV}"):
        run_deterministic(race, calls)
    monkeypatch.delenv(NO_PLUGINS_ENV)
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # import hypothesis -> ImportError
    with pytest.raises(SchedulingUnavailable, match="pip install hypothesis"):
        run_deterministic(race, calls)
    assert calls == []


def test_inside_a_hypothesis_test_that_allows_nesting_it_repeats_too() -> None:
    calls: list[int] = []
    orders: list[str] = []

    @hypothesis.settings(
        max_examples=3,
        database=None,
        suppress_health_check=[hypothesis.HealthCheck.nested_given],
    )
    @hypothesis.given(st.integers(0, 9))
    def outer(_: int) -> None:
        orders.append(run_deterministic(race, calls))

    outer()
    assert len(orders) >= 2 and len(set(orders)) == 1, orders
    # Without the suppression Hypothesis refuses the nesting, and says how to allow it.

    @hypothesis.settings(max_examples=1, database=None)
    @hypothesis.given(st.integers(0, 9))
    def strict(_: int) -> None:
        run_deterministic(race, calls)

    with pytest.raises(hypothesis.errors.FailedHealthCheck, match="nested_given"):
        strict()
