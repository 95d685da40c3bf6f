"""The API: one service layer (:class:`Service`) under the REST and NATS endpoints."""

from ._console import CONSOLE_PREFIX, console_url
from ._rest_views import (
    JournalEntry,
    JournalPage,
    NoWorker,
    RunList,
    RunStarted,
    RunSummary,
    RunView,
    StepView,
    WorkflowList,
)
from ._unserved import UNSERVED_AFTER_S, no_worker_verdict
from .service import (
    RUN_INPUT_MAX_BYTES,
    InputTooLarge,
    InvalidRequest,
    RunNotFound,
    RunPage,
    RunRunning,
    RunWaitTimeout,
    Service,
    ServiceError,
    WorkflowNotFound,
    run_input_max_bytes,
)

__all__ = [
    "CONSOLE_PREFIX",
    "RUN_INPUT_MAX_BYTES",
    "UNSERVED_AFTER_S",
    "InputTooLarge",
    "InvalidRequest",
    "JournalEntry",
    "JournalPage",
    "NoWorker",
    "RunList",
    "RunNotFound",
    "RunPage",
    "RunRunning",
    "RunStarted",
    "RunSummary",
    "RunView",
    "RunWaitTimeout",
    "Service",
    "ServiceError",
    "StepView",
    "WorkflowList",
    "WorkflowNotFound",
    "console_url",
    "no_worker_verdict",
    "run_input_max_bytes",
]
