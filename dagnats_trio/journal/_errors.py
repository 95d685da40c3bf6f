"""The journal's exceptions.

Two families: :class:`JournalSettled` means the worker has already settled (or must not settle)
the task, so a handler lets it through unchanged; everything else is an error the handler sees.
"""

from __future__ import annotations

from typing import final


class JournalSettled(Exception):
    """The task is already settled by the journal; the handler returns it unchanged."""


@final
class Stale(JournalSettled):
    """A late redelivery: a later iteration, dispatch or attempt owns the journal. Acked, no run."""


@final
class Committed(JournalSettled):
    """This dispatch already committed; its lifecycle event was published again. Acked."""


@final
class RestartLimit(JournalSettled):
    """Claimed ``restart_limit`` times in a row without progress: a retriable failure was
    committed and published. Acked."""


@final
class Fenced(JournalSettled):
    """A successor claimed the journal after this writer: it writes nothing more, publishes no
    lifecycle event and does not ack (the successor owns the same task message)."""


@final
class JournalUnreadable(JournalSettled):
    """The journal holds a record that cannot be decoded, so no holder can replay it: this
    attempt was failed (a retriable failure naming the record's sequence was committed after
    it and published) and the task is acked. Every later attempt fails the same way, so the
    step's retry policy ends the run and nothing recorded there is ever started again."""


@final
class ReplayMismatch(Exception):
    """The handler issued a different call at a recorded position: a bug in the handler."""


@final
class ToolOutputNotJson(TypeError):
    """A tool function returned something that is not a JSON value."""


@final
class CallLimitExceeded(RuntimeError):
    """An iteration made more model and tool calls than ``MAX_CALLS_PER_ITERATION``."""


@final
class JournalCorrupt(ValueError):
    """A record in the journal could not be decoded."""

    def __init__(self, seq: int, problem: str) -> None:
        super().__init__(f"journal record at sequence {seq} is unreadable: {problem}")
        self.seq = seq


@final
class HolderKilled(Exception):
    """A crash seam killed this holder: it stops as if its process died (no ack, no writes)."""
