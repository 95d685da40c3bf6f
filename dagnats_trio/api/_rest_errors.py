"""Every failure a client can see, as ``{"error": {"code", "message"}}`` with its status.

Handlers raise :class:`ApiError`, or let a typed error of a lower layer through;
:func:`api_error_for` is the one table that turns those into a status and a code. Anything it does
not know is a bug: the error boundary in :mod:`.rest` logs it and answers 500 ``internal`` with no
details.
"""

from __future__ import annotations

from ..dag import WorkflowInvalid
from ..inputs import InputError
from ..protocol import InvalidId
from ..transport import NotProvisioned, TemporarilyUnavailable, TransportTimeout
from ..web import ApiError
from ._rest_views import problem_views
from .service import (
    InputTooLarge,
    InvalidRequest,
    RunNotFound,
    RunWaitTimeout,
    WorkflowNotFound,
)


def api_error_for(exc: BaseException) -> ApiError | None:
    """The client-facing form of an expected error; None for anything unexpected.

    A :class:`~dagnats_trio.protocol.DecodeError` is deliberately absent: request bodies are
    decoded in :mod:`._rest_body`, which raises :class:`ApiError` itself, so one reaching here
    means stored data did not decode, which is a server fault.
    """
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, WorkflowInvalid):
        return ApiError(
            400,
            "invalid_workflow",
            "invalid workflow definition",
            problems=problem_views(exc.problems),
        )
    if isinstance(exc, WorkflowNotFound):
        return ApiError(404, "workflow_not_found", str(exc))
    if isinstance(exc, RunNotFound):
        return ApiError(404, "run_not_found", str(exc))
    if isinstance(exc, InvalidId):
        return ApiError(400, exc.code, str(exc))
    if isinstance(exc, InputTooLarge):
        return ApiError(413, "input_too_large", str(exc))
    if isinstance(exc, InvalidRequest):
        return ApiError(400, "bad_request", str(exc))
    if isinstance(exc, RunWaitTimeout):
        return ApiError(408, "timeout", str(exc))
    if isinstance(exc, InputError):
        return ApiError(exc.status, exc.code, exc.message)
    if isinstance(exc, NotProvisioned):
        return ApiError(503, "not_provisioned", "the NATS streams and buckets are not provisioned")
    if isinstance(exc, TemporarilyUnavailable | TransportTimeout):
        return ApiError(503, "unavailable", "NATS is not answering right now; try again")
    return None
