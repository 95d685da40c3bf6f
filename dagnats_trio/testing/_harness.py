"""Harness calls that ride through a leader step-down or a lost ack: what a crash test (and the
chaos soak) asks of the system under faults, retried within a bound."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import trio

from dagnats_trio.api import Service
from dagnats_trio.api.service import WAIT_FOR_RUN_MAX_S, RunWaitTimeout
from dagnats_trio.engine import RunSnapshot
from dagnats_trio.transport import TemporarilyUnavailable, TransportTimeout

T = TypeVar("T")

#: Pause between attempts of a harness call that met a transient error.
HARNESS_RETRY_S: Final = 0.1
#: Bound on one harness call, retries included.
HARNESS_CALL_MAX_S: Final = 60.0


async def retrying(fn: Callable[[], Awaitable[T]]) -> T:
    """A harness call through a step-down or a lost ack: retried until it answers, for at most
    ``HARNESS_CALL_MAX_S`` (every call retried here is idempotent)."""
    with trio.fail_after(HARNESS_CALL_MAX_S):
        while True:
            try:
                return await fn()
            except (TemporarilyUnavailable, TransportTimeout):
                await trio.sleep(HARNESS_RETRY_S)


async def wait_finished(service: Service, run_id: str, deadline: float) -> RunSnapshot:
    """The run's snapshot once it finished (raises RunWaitTimeout at ``deadline``)."""
    while True:
        remaining = deadline - trio.current_time()
        if remaining <= 0:
            raise RunWaitTimeout(run_id, 0)
        try:
            return await service.wait_for_run(run_id, min(remaining, WAIT_FOR_RUN_MAX_S))
        except (TemporarilyUnavailable, TransportTimeout):
            await trio.sleep(HARNESS_RETRY_S)
