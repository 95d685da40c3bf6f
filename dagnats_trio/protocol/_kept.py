"""Decoded values kept by the bytes they were decoded from, so the same bytes are decoded once.

A value read again and again from the same place (a workflow definition, read on every start of
a run) is decoded on every read although its bytes rarely change. Decoding is a pure function of
the bytes, so bytes equal to the ones a kept value was decoded from (a comparison in C) prove
the decode would give an equal value: it is handed out again, shared. Only for values nobody can
change (frozen attrs classes holding tuples and scalars), since every reader gets the same one.
Pure: no I/O.
"""

from __future__ import annotations

from typing import Final, Generic, TypeVar, final

from ._codec import from_json

T = TypeVar("T")

#: Keys kept by default (the oldest is dropped past it).
DECODED_KEPT_MAX_ENTRIES: Final = 256


@final
class DecodedByBytes(Generic[T]):
    """:func:`~dagnats_trio.protocol.from_json` of ``cls`` per key, kept with the bytes it was
    decoded from (the last ``max_entries`` keys)."""

    def __init__(
        self, cls: type[T], what: str, *, max_entries: int = DECODED_KEPT_MAX_ENTRIES
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self._cls = cls
        self._what = what
        self._max_entries = max_entries
        self._kept: dict[str, tuple[bytes, T]] = {}
        #: Decodes made (a read of kept bytes makes none): what a test counts.
        self.decodes = 0

    def decode(self, key: str, data: bytes) -> T:
        """The value of ``data`` (raises :class:`~dagnats_trio.protocol.DecodeError`, keeping
        nothing, when it is not one); the one kept for ``key`` when ``data`` is its bytes."""
        kept = self._kept.get(key)
        if kept is not None and kept[0] == data:
            return kept[1]
        self.decodes += 1
        value: T = from_json(data, self._cls, self._what)
        if kept is None and len(self._kept) >= self._max_entries:
            del self._kept[next(iter(self._kept))]
        self._kept[key] = (bytes(data), value)
        return value

    def kept(self, key: str) -> T | None:
        """The value last decoded for ``key`` (None when none is kept); no decode, no check
        that it is still what is stored."""
        kept = self._kept.get(key)
        return None if kept is None else kept[1]

    def forget(self, key: str) -> None:
        self._kept.pop(key, None)
