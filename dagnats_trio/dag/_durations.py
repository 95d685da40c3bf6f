"""Durations in workflow JSON: strings such as ``"250ms"``, ``"30s"``, ``"1h30m"``, or integer
milliseconds. Never nanoseconds, so a JSON number is never ambiguous."""

from __future__ import annotations

import re
from typing import final

from ..protocol import is_ascii_digits, parse_decimal

MS_PER_UNIT: dict[str, int] = {
    "ms": 1,
    "s": 1_000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}

#: Largest duration accepted anywhere (a year); beyond it a value is almost surely a unit mistake.
MAX_DURATION_MS = 366 * 86_400_000

# ASCII digits only: ``\d`` also matches other scripts' digits, which ``int`` reads.
_PART = re.compile(r"([0-9]+)(ms|s|m|h|d)")
_WHOLE = re.compile(r"^(?:[0-9]+(?:ms|s|m|h|d))+\Z")


@final
class DurationError(ValueError):
    """A duration that is not a non-negative integer of ms or a string like ``"30s"``."""


def parse_duration(value: object) -> int:
    """Milliseconds for ``value``; :class:`DurationError` with a readable message otherwise."""
    if isinstance(value, bool):
        raise DurationError(f'{value!r} is not a duration (use "30s" or milliseconds)')
    if isinstance(value, int):
        ms = value
    elif isinstance(value, str):
        text = value.strip()
        if not _WHOLE.match(text):
            raise DurationError(
                f"{value!r} is not a duration: use a number with a unit "
                '(ms, s, m, h, d), e.g. "250ms", "30s", "1h30m", or integer milliseconds'
            )
        ms = sum(int(n) * MS_PER_UNIT[unit] for n, unit in _PART.findall(text))
    else:
        raise DurationError(f'{value!r} is not a duration (use "30s" or milliseconds)')
    if ms < 0:
        raise DurationError(f"{value!r} is negative")
    if ms > MAX_DURATION_MS:
        raise DurationError(f"{value!r} is longer than the maximum of {MAX_DURATION_MS} ms")
    return ms


def parse_duration_text(text: str) -> int:
    """Milliseconds for a duration written as text (a query parameter, a flag): integer
    milliseconds in ASCII digits, or a string like ``"30s"``; :class:`DurationError` otherwise."""
    raw = text.strip()
    if is_ascii_digits(raw):
        try:
            return parse_decimal(raw, low=0, high=MAX_DURATION_MS)
        except ValueError:
            raise DurationError(
                f"{text!r} is longer than the maximum of {MAX_DURATION_MS} ms"
            ) from None
    return parse_duration(raw)


def format_duration(ms: int) -> str:
    """The shortest single-unit spelling of ``ms`` that parses back to the same value."""
    if ms < 0:
        raise DurationError(f"{ms} is negative")
    for unit in ("d", "h", "m", "s"):
        size = MS_PER_UNIT[unit]
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
