"""The API: one service layer (:class:`Service`) under the REST and NATS endpoints."""

from ._console import CONSOLE_PREFIX, console_url
from ._rest_views import JournalEntry, JournalPage, RunStarted, RunView, StepView
from .service import (
    InvalidRequest,
    RunNotFound,
    RunPage,
    RunRunning,
    RunWaitTimeout,
    Service,
    ServiceError,
    WorkflowNotFound,
)

__all__ = [
    "CONSOLE_PREFIX",
    "InvalidRequest",
    "JournalEntry",
    "JournalPage",
    "RunNotFound",
    "RunPage",
    "RunRunning",
    "RunStarted",
    "RunView",
    "RunWaitTimeout",
    "Service",
    "ServiceError",
    "StepView",
    "WorkflowNotFound",
    "console_url",
]
