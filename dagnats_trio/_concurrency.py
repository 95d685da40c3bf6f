"""Calls run at once whose failure reads like a plain call's.

A Trio nursery wraps a child's exception in an ``ExceptionGroup``, which callers that catch a
transport error (``TemporarilyUnavailable`` to retry, ``NotFound`` for 404) would miss. Here the
first failure is raised as itself and the other calls are cancelled.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import trio


async def run_all(calls: Iterable[Callable[[], Awaitable[None]]], *, in_flight_max: int) -> None:
    """Await every call, at most ``in_flight_max`` at once; the first exception is re-raised
    unwrapped (the rest are cancelled).

    The last call runs in the caller's own task (one task fewer to spawn and step), and the
    bound is only enforced when there are more calls than it allows: an index write pair (two
    publishes, the usual case) costs one child task and no limiter steps."""
    failures: list[Exception] = []
    pending = list(calls)
    if not pending:
        await trio.lowlevel.checkpoint()
        return
    limiter = trio.CapacityLimiter(in_flight_max) if len(pending) > in_flight_max else None

    async def one(call: Callable[[], Awaitable[None]], cancel: trio.CancelScope) -> None:
        try:
            if limiter is None:
                await call()
            else:
                async with limiter:
                    await call()
        except Exception as exc:
            failures.append(exc)
            cancel.cancel()

    async with trio.open_nursery() as nursery:
        for call in pending[:-1]:
            nursery.start_soon(one, call, nursery.cancel_scope)
        await one(pending[-1], nursery.cancel_scope)
    if failures:
        raise failures[0]
