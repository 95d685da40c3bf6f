"""The one error shape of every HTTP answer but success, shared by the REST API and the bridge.

``{"error": {"code", "message"}}`` with its status (and ``problems`` for an invalid workflow
definition). Handlers raise :class:`ApiError`; each package maps its own typed errors to one
(the REST API's table is :func:`dagnats_trio.api._rest_errors.api_error_for`, the bridge's is its
``BridgeError``), and :func:`error_response` writes it. Nothing here knows a domain error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from ..protocol import to_json

if TYPE_CHECKING:
    from starlette.responses import Response

JSON_MEDIA_TYPE = "application/json"


@final
@attrs.frozen
class ProblemView:
    """One problem of a workflow definition; ``step`` is None for workflow-level problems."""

    step: str | None
    field: str
    message: str


@final
@attrs.frozen
class ErrorBody:
    code: str
    message: str


@final
@attrs.frozen
class ErrorEnvelope:
    """Every error answer: ``{"error": {"code", "message"}}``."""

    error: ErrorBody


@final
@attrs.frozen
class InvalidWorkflowBody:
    """``problems`` lists every problem of the definition, each with its step and field; a
    400 of the same route that is no invalid definition (bad JSON) has none."""

    code: str
    message: str
    # A default, so the document does not require it: schemathesis found the route's
    # invalid_json 400 (no problems) failing the schema that did.
    problems: tuple[ProblemView, ...] = ()


@final
@attrs.frozen
class InvalidWorkflowEnvelope:
    """The 400 answer to an invalid workflow definition."""

    error: InvalidWorkflowBody


@final
class ApiError(Exception):
    """An answer other than success, raised anywhere under a handler."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        problems: tuple[ProblemView, ...] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.problems = problems
        self.headers = headers or {}


def bad_request(message: str, code: str = "bad_request") -> ApiError:
    return ApiError(400, code, message)


def not_found(message: str, code: str = "not_found") -> ApiError:
    return ApiError(404, code, message)


def error_response(err: ApiError) -> Response:
    # Here, not at the top: the API's views import this module for ProblemView, and a
    # worker-only host that creates the API's service serves no HTTP (it loads no starlette).
    from starlette.responses import Response

    body: ErrorEnvelope | InvalidWorkflowEnvelope
    if err.problems is not None:
        body = InvalidWorkflowEnvelope(InvalidWorkflowBody(err.code, err.message, err.problems))
    else:
        body = ErrorEnvelope(ErrorBody(err.code, err.message))
    return Response(
        to_json(body), status_code=err.status, media_type=JSON_MEDIA_TYPE, headers=err.headers
    )


def internal_error_response() -> Response:
    return error_response(ApiError(500, "internal", "internal error"))
