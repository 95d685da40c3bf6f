"""The deadline-bound transient retry: pauses on ``trio.current_time()`` (so the autojump clock
runs them instantly and exactly), doubling to the cap, giving up at the deadline."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from dagnats_trio.transport import (
    TRANSIENT_BACKOFF_MAX_S,
    TRANSIENT_BACKOFF_START_S,
    TRANSIENT_RETRY_DEADLINE_S,
    NotFound,
    TemporarilyUnavailable,
    TransientRetry,
    retry_transient,
)


def test_pauses_double_to_the_cap_and_stop_at_the_deadline() -> None:
    async def main() -> tuple[list[float], float]:
        retry = TransientRetry()
        start = trio.current_time()
        pauses: list[float] = []
        before = start
        while await retry.pause():
            pauses.append(trio.current_time() - before)
            before = trio.current_time()
        return pauses, trio.current_time() - start

    pauses, total = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    s, cap = TRANSIENT_BACKOFF_START_S, TRANSIENT_BACKOFF_MAX_S
    doubling = [min(s * 2**i, cap) for i in range(len(pauses))]
    assert pauses == pytest.approx(doubling)
    assert pauses[-1] == pytest.approx(cap)
    assert TRANSIENT_RETRY_DEADLINE_S - cap < total <= TRANSIENT_RETRY_DEADLINE_S


def test_retry_transient_retries_until_success_or_the_deadline() -> None:
    async def main() -> tuple[str, int, float, int, float]:
        calls = 0

        async def flaky() -> str:
            nonlocal calls
            calls += 1
            if calls < 4:
                raise TemporarilyUnavailable("no leader")
            return "ok"

        start = trio.current_time()
        answer = await retry_transient(flaky)
        took = trio.current_time() - start
        seen: list[Exception] = []

        async def down() -> str:
            raise TemporarilyUnavailable("still no leader")

        start = trio.current_time()
        with pytest.raises(TemporarilyUnavailable):
            await retry_transient(down, seen.append)
        gave_up_after = trio.current_time() - start
        return answer, calls, took, len(seen), gave_up_after

    answer, calls, took, failures, gave_up_after = trio.run(
        main, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    assert (answer, calls) == ("ok", 4)
    s = TRANSIENT_BACKOFF_START_S
    assert took == pytest.approx(s + 2 * s + 4 * s)
    assert gave_up_after > TRANSIENT_RETRY_DEADLINE_S - TRANSIENT_BACKOFF_MAX_S
    assert gave_up_after <= TRANSIENT_RETRY_DEADLINE_S
    assert failures > 1


def test_other_errors_are_not_retried() -> None:
    async def main() -> int:
        calls = 0

        async def missing() -> None:
            nonlocal calls
            calls += 1
            raise NotFound("gone")

        with pytest.raises(NotFound):
            await retry_transient(missing)
        return calls

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == 1
