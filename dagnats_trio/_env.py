"""Where time and randomness come from.

Engine, worker, journal and inputs never read the wall clock or a random source directly: they
take a :class:`RuntimeEnv`. Production uses the real ones; the chaos soak injects a clock driven by
Trio's (mock) clock and a seeded id generator, so one seed gives one trace.
"""

from __future__ import annotations

import itertools
import random
import secrets
import time
from collections.abc import Callable

import attrs
import trio


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _random_id() -> str:
    return secrets.token_hex(8)


@attrs.frozen
class RuntimeEnv:
    """``wall_ms`` gives epoch milliseconds for timestamps and durable timers; ``new_id`` gives
    unique tokens usable in subjects (run ids, nonces, claim ids)."""

    wall_ms: Callable[[], int] = _wall_ms
    new_id: Callable[[], str] = _random_id


def deterministic_env(seed: int, epoch_ms: int = 1_700_000_000_000) -> RuntimeEnv:
    """An env for simulation: wall time follows ``trio.current_time()``, ids come from ``seed``."""
    rng = random.Random(seed)
    counter = itertools.count()

    def wall_ms() -> int:
        return epoch_ms + int(trio.current_time() * 1000)

    def new_id() -> str:
        return f"{next(counter):06d}{rng.getrandbits(32):08x}"

    return RuntimeEnv(wall_ms=wall_ms, new_id=new_id)


DEFAULT_ENV = RuntimeEnv()
