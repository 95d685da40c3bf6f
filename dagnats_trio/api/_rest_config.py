"""The REST API's settings: the bounds on a request body and on a long poll, as one class."""

from __future__ import annotations

import attrs

from ._rest_journal import FOLLOW_POLL_INTERVAL_S

#: Largest request body accepted by default (the inputs service bounds content at 64 KiB; a
#: workflow definition of a thousand steps fits well under this).
DEFAULT_MAX_BODY_BYTES = 1_048_576
#: Longest an input ``GET ...?wait=`` may wait by default.
DEFAULT_MAX_WAIT_S = 60.0


@attrs.frozen
class ApiConfig:
    """``poll_interval_s``: longest a journal follower goes without looking for new records."""

    token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_wait_s: float = DEFAULT_MAX_WAIT_S
    poll_interval_s: float = FOLLOW_POLL_INTERVAL_S
