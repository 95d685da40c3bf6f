"""The delay between reconnect rounds: exponential, capped and jittered.

Pure (the caller passes its ``random.Random``), so tests can check it with a seeded one.
"""

from __future__ import annotations

import random

from ._defaults import RECONNECT_BACKOFF_BASE_S, RECONNECT_BACKOFF_MAX_S

#: Doublings after which the ceiling stays put (keeps ``2.0 ** n`` finite on a long outage).
_MAX_DOUBLINGS = 32


def backoff_s(round_index: int, rng: random.Random) -> float:
    """Delay before reconnect round ``round_index`` (0-based): exponential, capped, jittered to
    between half and all of it, so many clients do not return in step."""
    doublings = min(round_index, _MAX_DOUBLINGS)
    ceiling = min(RECONNECT_BACKOFF_MAX_S, RECONNECT_BACKOFF_BASE_S * 2.0**doublings)
    return ceiling * (0.5 + 0.5 * rng.random())
