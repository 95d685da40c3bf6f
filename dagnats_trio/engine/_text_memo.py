"""A bounded memo of JSON texts by object identity, for the snapshot encoder's parts.

The engine saves a run's snapshot on every event, and much of it is the same frozen objects from
one save to the next (the definition, carried outbox entries, the task a dispatch publishes
after saving it). Spelling each once needs a memo keyed by identity; the memo holds the object
beside its text, so its ``id`` is not reused while the slot lives. Bounded in entries and in
characters (a task's input may be up to the server's max payload, so a count alone would let a
memo hold gigabytes); emptied when full, since a miss only costs the encoding. Each memo is an
instance's (an encoder's), never the process's: the library keeps no global state.
"""

from __future__ import annotations

from typing import Final, Generic, TypeVar, final

#: Bounds on each memo, in entries and in characters of the texts it holds.
OUTBOX_JSON_MEMO_MAX_ENTRIES: Final = 4096
OUTBOX_JSON_MEMO_MAX_CHARS: Final = 16 * 1024 * 1024

T = TypeVar("T")
S = TypeVar("S")


@final
class TextMemo(Generic[T, S]):
    """Slots ``id(obj) -> (obj, value)``: ``value`` a text, or anything holding one
    (``text_of`` says which text counts toward :data:`OUTBOX_JSON_MEMO_MAX_CHARS`)."""

    __slots__ = ("_chars", "slots")

    def __init__(self) -> None:
        self.slots: dict[int, tuple[T, S]] = {}
        self._chars = 0

    def get(self, obj: T) -> S | None:
        """The value remembered for this very object, if any."""
        slot = self.slots.get(id(obj))
        if slot is not None and slot[0] is obj:
            return slot[1]
        return None

    def put(self, obj: T, value: S, chars: int) -> None:
        """Remember ``value`` (of ``chars`` characters of text) for ``obj``: the memo is emptied
        first when it is full, and a value larger than the whole bound is not kept."""
        total = self._chars + chars
        if len(self.slots) >= OUTBOX_JSON_MEMO_MAX_ENTRIES or total > OUTBOX_JSON_MEMO_MAX_CHARS:
            self.slots.clear()
            total = chars
        if total <= OUTBOX_JSON_MEMO_MAX_CHARS:
            self.slots[id(obj)] = (obj, value)
            self._chars = total
