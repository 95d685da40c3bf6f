"""Durable waits for ``tc.continue_(wait=...)``: Delay, Until, UntilInput, any mix."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import TypeAlias, final

import attrs

from dagnats_trio.protocol import Wait

from ._errors import InvalidWait

#: The longest wait accepted, so a typo (ms for seconds) cannot park a step for centuries.
MAX_WAIT_MS = 366 * 24 * 3600 * 1000


def _non_negative(_: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidWait(f"Delay {attribute.name} must be a finite number, got {value!r}")
    if value < 0:
        raise InvalidWait(f"Delay {attribute.name} must not be negative, got {value!r}")


@final
@attrs.frozen(kw_only=True)
class Delay:
    """Wake after this long (counted from when the engine enters the wait)."""

    seconds: float = attrs.field(default=0.0, validator=_non_negative)
    minutes: float = attrs.field(default=0.0, validator=_non_negative)
    hours: float = attrs.field(default=0.0, validator=_non_negative)

    @property
    def ms(self) -> int:
        return round((self.seconds + 60 * self.minutes + 3600 * self.hours) * 1000)


@final
@attrs.frozen
class Until:
    """Wake at a wall-clock time: epoch milliseconds, or a timezone-aware datetime."""

    at: int | datetime

    @property
    def epoch_ms(self) -> int:
        if isinstance(self.at, datetime):
            if self.at.tzinfo is None:
                raise InvalidWait("Until needs a timezone-aware datetime (or epoch milliseconds)")
            return round(self.at.timestamp() * 1000)
        if isinstance(self.at, bool) or not isinstance(self.at, int) or self.at < 0:
            raise InvalidWait(f"Until needs epoch milliseconds >= 0, got {self.at!r}")
        return self.at


@final
@attrs.frozen
class UntilInput:
    """Wake when an input is submitted to the step."""


WaitSpec: TypeAlias = Delay | Until | UntilInput
WaitArg: TypeAlias = WaitSpec | Sequence[WaitSpec] | None


def build_wait(wait: WaitArg) -> Wait | None:
    """The protocol ``Wait`` for any mix of waits (the earliest time wins); None for none."""
    if wait is None:
        return None
    specs: Sequence[object] = (wait,) if isinstance(wait, Delay | Until | UntilInput) else wait
    if not isinstance(specs, Sequence) or isinstance(specs, str | bytes):
        raise InvalidWait(f"wait must be Delay, Until, UntilInput or a tuple of them: {wait!r}")
    delay: int | None = None
    until: int | None = None
    until_input = False
    for spec in specs:
        if isinstance(spec, Delay):
            delay = spec.ms if delay is None else min(delay, spec.ms)
            if spec.ms > MAX_WAIT_MS:
                raise InvalidWait(f"a Delay may be at most {MAX_WAIT_MS} ms, got {spec.ms}")
        elif isinstance(spec, Until):
            until = spec.epoch_ms if until is None else min(until, spec.epoch_ms)
        elif isinstance(spec, UntilInput):
            until_input = True
        else:
            raise InvalidWait(f"not a wait (Delay, Until or UntilInput): {spec!r}")
    result = Wait(delay_ms=delay, until_ms=until, until_input=until_input)
    return None if result.is_empty() else result
