"""Retrying a transient failure (no leader, timeout) within a deadline: the runtime's one
deadline-bound retry, on the shared backoff (``_env.backoff_delay_s``) and measured on
``trio.current_time()`` (so a test under the autojump clock retries deterministically and
instantly). The journal's reads, its fenced append and ``publish_lifecycle`` use it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, TypeVar, final

import attrs
import trio

from dagnats_trio._env import backoff_delay_s

from ._errors import TemporarilyUnavailable, TransportTimeout

#: How long a transient failure (no leader, timeout) is retried before giving up.
TRANSIENT_RETRY_DEADLINE_S: Final = 10.0
#: First pause between retries of a transient failure; doubles up to the cap.
TRANSIENT_BACKOFF_START_S: Final = 0.05
TRANSIENT_BACKOFF_MAX_S: Final = 1.0

T = TypeVar("T")


#: The jitter draw that keeps the whole pause: these retries are one holder's, not a crowd
#: returning to a server, and a simulation's trace must not depend on a hidden random source.
_FULL_PAUSE: Final = 1.0


def _deadline() -> float:
    return trio.current_time() + TRANSIENT_RETRY_DEADLINE_S


@final
@attrs.define
class TransientRetry:
    """The pauses of one transient retry loop: doubling from ``TRANSIENT_BACKOFF_START_S`` to
    ``TRANSIENT_BACKOFF_MAX_S`` (the shared :func:`~dagnats_trio._env.backoff_delay_s`, without
    jitter), until ``TRANSIENT_RETRY_DEADLINE_S`` after it was made. Its users make one only when
    a call has failed (a loop that, as a rule, never fails then builds nothing: the fenced append
    made one per record before), so the deadline is measured from the first failure's return,
    not from the start of the call that failed: a give-up comes at most that one call's own
    bound (its request timeout) later than if it were made before the first call. The failures
    are counted here, with no :class:`~dagnats_trio._env.Backoff` object."""

    _failures: int = attrs.field(init=False, default=0)
    _until: float = attrs.field(init=False, factory=_deadline)

    async def pause(self) -> bool:
        """Sleep the next pause and return True, or return False (without sleeping) when that
        pause would end past the deadline: the caller gives up and raises."""
        delay = backoff_delay_s(
            self._failures, TRANSIENT_BACKOFF_START_S, TRANSIENT_BACKOFF_MAX_S, _FULL_PAUSE
        )
        self._failures += 1
        if trio.current_time() + delay > self._until:
            return False
        await trio.sleep(delay)
        return True


async def retry_transient(
    fn: Callable[[], Awaitable[T]], on_retry: Callable[[Exception], None] | None = None
) -> T:
    """Call ``fn`` until it does not fail transiently (no leader, timeout), within the transient
    deadline; the last failure is raised. Only for idempotent calls (reads, or publishes with a
    message id the stream deduplicates)."""
    retry: TransientRetry | None = None  # made at the first failure (see its docstring)
    while True:
        try:
            return await fn()
        except (TemporarilyUnavailable, TransportTimeout) as exc:
            if on_retry is not None:
                on_retry(exc)
            if retry is None:
                retry = TransientRetry()
            if not await retry.pause():
                raise
