"""Retrying a transient failure (no leader, timeout) within a deadline: the runtime's one
deadline-bound retry, on the shared :class:`~dagnats_trio._env.Backoff` and measured on
``trio.current_time()`` (so a test under the autojump clock retries deterministically and
instantly). The journal's reads, its fenced append and ``publish_lifecycle`` use it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, TypeVar, final

import attrs
import trio

from dagnats_trio._env import Backoff

from ._errors import TemporarilyUnavailable, TransportTimeout

#: How long a transient failure (no leader, timeout) is retried before giving up.
TRANSIENT_RETRY_DEADLINE_S: Final = 10.0
#: First pause between retries of a transient failure; doubles up to the cap.
TRANSIENT_BACKOFF_START_S: Final = 0.05
TRANSIENT_BACKOFF_MAX_S: Final = 1.0

T = TypeVar("T")


def _full_pause() -> float:
    """The jitter draw that keeps the whole pause: these retries are one holder's, not a crowd
    returning to a server, and a simulation's trace must not depend on a hidden random source."""
    return 1.0


@final
@attrs.define
class TransientRetry:
    """The pauses of one transient retry loop: doubling from ``TRANSIENT_BACKOFF_START_S`` to
    ``TRANSIENT_BACKOFF_MAX_S``, until ``TRANSIENT_RETRY_DEADLINE_S`` after it was made."""

    _backoff: Backoff = attrs.field(
        init=False,
        factory=lambda: Backoff(TRANSIENT_BACKOFF_START_S, TRANSIENT_BACKOFF_MAX_S, _full_pause),
    )
    _until: float = attrs.field(
        init=False, factory=lambda: trio.current_time() + TRANSIENT_RETRY_DEADLINE_S
    )

    async def pause(self) -> bool:
        """Sleep the next pause and return True, or return False (without sleeping) when that
        pause would end past the deadline: the caller gives up and raises."""
        delay = self._backoff.next_s()
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
    retry = TransientRetry()
    while True:
        try:
            return await fn()
        except (TemporarilyUnavailable, TransportTimeout) as exc:
            if on_retry is not None:
                on_retry(exc)
            if not await retry.pause():
                raise
