"""The API: one service layer (:class:`Service`) under the REST and NATS endpoints."""

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
]
