"""Errors a handler may see from its task context."""

from __future__ import annotations

from typing import final


@final
class RunCancelled(Exception):
    """The run was cancelled; the handler should return. The worker acks without an event."""


@final
class AlreadySettled(RuntimeError):
    """The task was already settled (complete, fail, continue_, pause, or by the journal)."""


@final
class CheckpointTooLarge(ValueError):
    """A checkpoint of a non-journal step is larger than the step's ``loop_state_max_bytes``."""


@final
class InputsQueued(Exception):
    """``continue_`` with ``UntilInput()`` while inputs are queued: place them and run another
    turn instead of waiting (nothing was settled)."""


@final
class JournalUnavailable(RuntimeError):
    """The handler asked for the journal and the claim never stored (for example NATS was
    unavailable for longer than the journal retries). The step cannot be settled outside the
    journal, because another holder of the same dispatch may claim and commit it; the delivery is
    left for redelivery, which goes through the journal's fencing."""


@final
class InvalidWait(ValueError):
    """A wait given to ``continue_`` is not a Delay, Until or UntilInput, or is out of range."""
