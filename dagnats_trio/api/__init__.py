"""The API: one service layer (:class:`Service`) under the REST and NATS endpoints."""

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
    "RunNotFound",
    "RunPage",
    "RunRunning",
    "RunWaitTimeout",
    "Service",
    "ServiceError",
    "WorkflowNotFound",
]
