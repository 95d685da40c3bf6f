"""The worker SDK: ``Worker`` runs handlers; each gets a ``TaskContext`` for one delivery."""

from dagnats_trio.journal import JournalSettled

from ._context import InputsPending, InputsUnavailable, TaskContext
from ._errors import (
    AlreadySettled,
    CheckpointTooLarge,
    InputsQueued,
    InvalidWait,
    JournalUnavailable,
    RunCancelled,
)
from ._waits import MAX_WAIT_MS, Delay, Until, UntilInput, WaitArg, WaitSpec, build_wait
from ._worker import (
    DEFAULT_ACK_WAIT_S,
    DEFAULT_CONCURRENCY,
    FETCH_WAIT_S,
    HEARTBEATS_PER_ACK_WAIT,
    Handler,
    Worker,
)

__all__ = [
    "DEFAULT_ACK_WAIT_S",
    "DEFAULT_CONCURRENCY",
    "FETCH_WAIT_S",
    "HEARTBEATS_PER_ACK_WAIT",
    "MAX_WAIT_MS",
    "AlreadySettled",
    "CheckpointTooLarge",
    "Delay",
    "Handler",
    "InputsPending",
    "InputsQueued",
    "InputsUnavailable",
    "InvalidWait",
    "JournalSettled",
    "JournalUnavailable",
    "RunCancelled",
    "TaskContext",
    "Until",
    "UntilInput",
    "WaitArg",
    "WaitSpec",
    "Worker",
    "build_wait",
]
