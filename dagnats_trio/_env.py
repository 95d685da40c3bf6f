"""Where time and randomness come from.

Engine, worker, journal and inputs never read the wall clock or a random source directly: they
take a :class:`RuntimeEnv`. Production uses the real ones; the chaos soak injects a clock driven by
Trio's (mock) clock and a seeded id generator, so one seed gives one trace.
"""

from __future__ import annotations

import itertools
import os
import random
import time
from collections.abc import Callable
from typing import final

import attrs
import trio


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _random_id() -> str:
    # ``secrets.token_hex(8)`` spelled out (the same OS randomness, the same 16 hex digits):
    # two calls, not six, on every dispatch and claim.
    return os.urandom(8).hex()


@attrs.frozen
class RuntimeEnv:
    """``wall_ms`` gives epoch milliseconds for timestamps and durable timers; ``new_id`` gives
    unique tokens usable in subjects (run ids, nonces, claim ids)."""

    wall_ms: Callable[[], int] = _wall_ms
    new_id: Callable[[], str] = _random_id
    #: A uniform draw in [0, 1): the jitter of retry backoffs (seeded in simulation).
    random: Callable[[], float] = random.random


def deterministic_env(seed: int, epoch_ms: int = 1_700_000_000_000) -> RuntimeEnv:
    """An env for simulation: wall time follows ``trio.current_time()``, ids come from ``seed``."""
    rng = random.Random(seed)
    counter = itertools.count()

    def wall_ms() -> int:
        return epoch_ms + int(trio.current_time() * 1000)

    def new_id() -> str:
        return f"{next(counter):06d}{rng.getrandbits(32):08x}"

    # Jitter draws come from a stream of their own, so a retry never shifts the ids of a trace.
    jitter = random.Random(seed ^ JITTER_SEED_SALT)
    return RuntimeEnv(wall_ms=wall_ms, new_id=new_id, random=jitter.random)


#: Mixed into a simulation's seed for its jitter stream (any constant: kept apart from ids).
JITTER_SEED_SALT = 0x6A177E2


def backoff_delay_s(failures: int, first_s: float, max_s: float, unit: float) -> float:
    """The pause after ``failures`` failures in a row (0 for the first): doubling from
    ``first_s``, capped at ``max_s``, then "equal jitter" (between half and all of it, from the
    draw ``unit`` in [0, 1)), so processes that lost the same server do not return in step."""
    base = min(max_s, first_s * 2.0 ** min(failures, 62))
    return base * (0.5 + 0.5 * unit)


@final
@attrs.define
class Backoff:
    """A retry loop's capped, jittered backoff: :meth:`next_s` after each failure, :meth:`reset`
    after a success. ``failures`` tells a loop whether this is the first failure in a row (the
    one worth a warning; the transport says once that NATS is unreachable and once it is back)."""

    first_s: float
    max_s: float
    random: Callable[[], float] = random.random
    failures: int = 0

    def next_s(self) -> float:
        delay = backoff_delay_s(self.failures, self.first_s, self.max_s, self.random())
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0


DEFAULT_ENV = RuntimeEnv()
