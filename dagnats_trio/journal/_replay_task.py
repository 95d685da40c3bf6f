"""The task as the replay rules see it: its identity, its journal entries, the key and the
canonical JSON of its calls, and the bounds and reasons the rules share.

Pure (no I/O, no clock, no randomness); the terms are those of :mod:`._replay`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeAlias, final

import attrs

from dagnats_trio.protocol import (
    DispatchId,
    JournalRecord,
    JsonValue,
    TaskMessage,
    canonical_json_text,
)

Entry: TypeAlias = tuple[int, JournalRecord]

#: Upper bound on model and tool calls in one iteration (positions 0 .. this - 1).
MAX_CALLS_PER_ITERATION = 1000

#: ``reason`` of the failure committed when the restart limit is reached.
RESTART_LIMIT_REASON = "restart_limit"
#: The ``reason`` of the failure committed when the journal holds an unreadable record.
UNREADABLE_REASON = "journal_unreadable"

#: Prefix of the error recorded for a tool whose output was not JSON (replayed as an error).
NOT_JSON_ERROR_PREFIX = "tool output is not JSON: "


#: One spelling per JSON value, so recorded and current inputs compare as JSON, not Python
#: (where ``True == 1``). Raises ValueError (:class:`JsonPolicyError`) for values that are not
#: JSON by the one policy. The policy's own function, not a wrapper: it runs per tool call.
canonical_json: Final[Callable[[JsonValue], str]] = canonical_json_text


def call_key(run_id: str, step_id: str, iteration: int, call: int) -> str:
    """The idempotency key of a call: the same on every delivery and attempt."""
    return f"{run_id}.{step_id}.{iteration}.{call}"


# ---------------------------------------------------------------------------------------------
# The task as the rules see it.
# ---------------------------------------------------------------------------------------------


@final
@attrs.frozen
class TaskIdentity:
    run_id: str
    step_id: str
    iteration: int
    attempt: int
    nonce: str
    journal_seq: int | None = None

    @classmethod
    def of(cls, task: TaskMessage) -> TaskIdentity:
        d = task.dispatch
        return cls(task.run_id, task.step_id, d.iteration, d.attempt, d.nonce, task.journal_seq)

    @property
    def dispatch(self) -> DispatchId:
        return DispatchId(self.iteration, self.attempt, self.nonce)
