"""The one parser of integers written as text: query parameters, headers, flags.

``str.isdigit()`` is true for ``"²"`` and ``"٣"``, which ``int()`` then refuses or reads as a
digit nobody typed, and ``int()`` itself takes signs, spaces and underscores; a query parameter
parsed that way answered 500. Here a number is ASCII digits only, no longer than the bound
needs, within the bound. Pure: no I/O.
"""

from __future__ import annotations

__all__ = ["is_ascii_digits", "parse_decimal"]


def is_ascii_digits(text: str) -> bool:
    """True when ``text`` is one or more of ``0``-``9`` and nothing else."""
    return text.isascii() and text.isdigit()


def parse_decimal(text: str, *, low: int, high: int) -> int:
    """``text`` as an integer from ``low`` to ``high`` (``0 <= low <= high``), or ValueError saying
    what is accepted. No sign, space, underscore or non-ASCII digit; at most as many digits as
    ``high`` has (plus leading zeros up to that length), so no huge number is ever converted."""
    if not is_ascii_digits(text) or len(text) > len(str(high)):
        raise ValueError(f"must be an integer from {low} to {high}")
    value = int(text)
    if not low <= value <= high:
        raise ValueError(f"must be an integer from {low} to {high}")
    return value
