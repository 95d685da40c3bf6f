"""The REST API's settings: the bounds on a request body and on a long poll, as one class."""

from __future__ import annotations

import attrs

from ._rest_journal import FOLLOW_POLL_INTERVAL_S

#: Largest request body accepted by default (the inputs service bounds content at 64 KiB; a
#: workflow definition of a thousand steps fits well under this).
DEFAULT_MAX_BODY_BYTES = 1_048_576
#: Largest run input (as encoded) ``POST /runs`` takes. A run's first snapshot holds its input
#: twice (the run's, and the task of its first step) and must fit one NATS message (the
#: server's ``max_payload``, 1 MiB by default) with the rest of the run's state; a larger input
#: failed that write and was answered 500 (found from outside: an input of a million
#: characters). 480 KiB leaves 64 KiB of the default for the rest.
RUN_INPUT_MAX_BYTES = 480 * 1024
#: A body this many times smaller than :data:`RUN_INPUT_MAX_BYTES` cannot hold an input over
#: it, so its input is not encoded again to be measured: the encoder spells a value at most
#: this many times longer than a client can (a float such as ``9E15`` becomes
#: ``9000000000000000.0``; with its comma, 19 bytes for 5).
RUN_INPUT_SPELLING_GROWTH_MAX = 5
#: Longest an input ``GET ...?wait=`` may wait by default.
DEFAULT_MAX_WAIT_S = 60.0


@attrs.frozen
class ApiConfig:
    """``poll_interval_s``: longest a journal follower goes without looking for new records."""

    token: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_wait_s: float = DEFAULT_MAX_WAIT_S
    poll_interval_s: float = FOLLOW_POLL_INTERVAL_S
