"""HTTP plumbing shared by the REST API (:mod:`dagnats_trio.api`) and the worker bridge
(:mod:`dagnats_trio.bridge`): reading request bodies and the one error shape.

It sits below both so neither imports the other's private modules (the API mounts the bridge's
routes; the bridge needs only these helpers).
"""

from .body import (
    BODY_READ_TIMEOUT_S,
    CONTENT_LENGTH_MAX,
    decode_body,
    listed_names,
    parse_json,
    read_body,
    too_large,
)
from .errors import (
    JSON_MEDIA_TYPE,
    ApiError,
    ErrorBody,
    ErrorEnvelope,
    InvalidWorkflowBody,
    InvalidWorkflowEnvelope,
    ProblemView,
    bad_request,
    error_response,
    internal_error_response,
    not_found,
)

__all__ = [
    "BODY_READ_TIMEOUT_S",
    "CONTENT_LENGTH_MAX",
    "JSON_MEDIA_TYPE",
    "ApiError",
    "ErrorBody",
    "ErrorEnvelope",
    "InvalidWorkflowBody",
    "InvalidWorkflowEnvelope",
    "ProblemView",
    "bad_request",
    "decode_body",
    "error_response",
    "internal_error_response",
    "listed_names",
    "not_found",
    "parse_json",
    "read_body",
    "too_large",
]
