"""Inputs and steering: submissions to a running step, their store, placement and settlement."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagnats_trio._lazy import lazy_exports

from .errors import (
    BadRequestError,
    ConflictError,
    ContentionError,
    ContentTooLargeError,
    InputError,
    NotFoundError,
    UnauthorizedError,
)
from .submission import (
    TRANSITIONS,
    InvalidTransition,
    Mode,
    Submission,
    SubmissionStatus,
    to_done,
    to_placed,
    to_unanswered,
    to_withdrawn,
)

if TYPE_CHECKING:
    from .endpoints import (
        GET_SUBJECT,
        SUBMIT_SUBJECT,
        WITHDRAW_SUBJECT,
        ErrorReply,
        GetRequest,
        InputsEndpoints,
        SubmissionReply,
        SubmitRequest,
        WithdrawRequest,
        decode_reply,
    )
    from .placement import (
        JournalWriter,
        PlacedInput,
        PlacementState,
        place_inputs,
    )
    from .service import (
        MAX_CONTENT_BYTES,
        MAX_GET_WAIT_S,
        InputsService,
        StoredSubmission,
    )
else:
    # mypy sees the imports above instead, so a misspelt name is an error, not ``object``.
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".endpoints": (
                "GET_SUBJECT",
                "SUBMIT_SUBJECT",
                "WITHDRAW_SUBJECT",
                "ErrorReply",
                "GetRequest",
                "InputsEndpoints",
                "SubmissionReply",
                "SubmitRequest",
                "WithdrawRequest",
                "decode_reply",
            ),
            ".placement": (
                "JournalWriter",
                "PlacedInput",
                "PlacementState",
                "place_inputs",
            ),
            ".service": (
                "MAX_CONTENT_BYTES",
                "MAX_GET_WAIT_S",
                "InputsService",
                "StoredSubmission",
            ),
        },
    )

__all__ = [
    "GET_SUBJECT",
    "MAX_CONTENT_BYTES",
    "MAX_GET_WAIT_S",
    "SUBMIT_SUBJECT",
    "TRANSITIONS",
    "WITHDRAW_SUBJECT",
    "BadRequestError",
    "ConflictError",
    "ContentTooLargeError",
    "ContentionError",
    "ErrorReply",
    "GetRequest",
    "InputError",
    "InputsEndpoints",
    "InputsService",
    "InvalidTransition",
    "JournalWriter",
    "Mode",
    "NotFoundError",
    "PlacedInput",
    "PlacementState",
    "StoredSubmission",
    "Submission",
    "SubmissionReply",
    "SubmissionStatus",
    "SubmitRequest",
    "UnauthorizedError",
    "WithdrawRequest",
    "decode_reply",
    "place_inputs",
    "to_done",
    "to_placed",
    "to_unanswered",
    "to_withdrawn",
]
