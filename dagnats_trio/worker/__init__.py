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
from ._lease import (
    DEFAULT_ACK_WAIT_S,
    HEARTBEATS_PER_ACK_WAIT,
    LEASE_GROWTH_FACTOR,
    MAX_LEASE_S,
    heartbeat_interval_s,
    lease_schedule,
    task_consumer,
)
from ._waits import MAX_WAIT_MS, Delay, Until, UntilInput, WaitArg, WaitSpec, build_wait
from ._worker import DEFAULT_CONCURRENCY, FETCH_WAIT_S, Handler, Worker

__all__ = [
    "DEFAULT_ACK_WAIT_S",
    "DEFAULT_CONCURRENCY",
    "FETCH_WAIT_S",
    "HEARTBEATS_PER_ACK_WAIT",
    "LEASE_GROWTH_FACTOR",
    "MAX_LEASE_S",
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
    "heartbeat_interval_s",
    "lease_schedule",
    "task_consumer",
]
