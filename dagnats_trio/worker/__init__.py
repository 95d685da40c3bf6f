"""The worker SDK: ``Worker`` runs handlers; each gets a ``TaskContext`` for one delivery."""

from dagnats_trio._defaults import DEFAULT_ACK_WAIT_S
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
from ._golden import (
    GOLDEN_FORMAT_VERSION,
    REPLAY_DELIVERY_TIMEOUT_S,
    Golden,
    GoldenContext,
    GoldenEntry,
    GoldenFormatError,
    GoldenHandler,
    GoldenHeader,
    GoldenReport,
    load_golden,
    parse_golden,
    replay_golden,
)
from ._lease import (
    HEARTBEATS_PER_ACK_WAIT,
    LEASE_GROWTH_FACTOR,
    MAX_LEASE_S,
    heartbeat_interval_s,
    lease_schedule,
    task_consumer,
)
from ._polls import POLL_MARK_INTERVAL_S, mark_polls
from ._waits import MAX_WAIT_MS, Delay, Until, UntilInput, WaitArg, WaitSpec, build_wait
from ._worker import (
    DEFAULT_CONCURRENCY,
    FETCH_BACKOFF_MAX_S,
    FETCH_BACKOFF_START_S,
    FETCH_WAIT_S,
    Handler,
    Worker,
)

__all__ = [
    "DEFAULT_ACK_WAIT_S",
    "DEFAULT_CONCURRENCY",
    "FETCH_BACKOFF_MAX_S",
    "FETCH_BACKOFF_START_S",
    "FETCH_WAIT_S",
    "GOLDEN_FORMAT_VERSION",
    "HEARTBEATS_PER_ACK_WAIT",
    "LEASE_GROWTH_FACTOR",
    "MAX_LEASE_S",
    "MAX_WAIT_MS",
    "POLL_MARK_INTERVAL_S",
    "REPLAY_DELIVERY_TIMEOUT_S",
    "AlreadySettled",
    "CheckpointTooLarge",
    "Delay",
    "Golden",
    "GoldenContext",
    "GoldenEntry",
    "GoldenFormatError",
    "GoldenHandler",
    "GoldenHeader",
    "GoldenReport",
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
    "load_golden",
    "mark_polls",
    "parse_golden",
    "replay_golden",
    "task_consumer",
]
