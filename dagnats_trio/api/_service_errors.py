"""The errors a caller of the service can act on; the endpoints map each to a status code
(``_rest_errors``). Kept apart from :class:`~.service.Service` so the parts of the service that
live in modules of their own (a run's start, ``_start``) raise the same ones."""

from __future__ import annotations

from typing import final

from ..protocol import JsonPolicyError, JsonValue, encode_json


class ServiceError(Exception):
    """Base of the errors a caller can act on (the endpoints map each to a status code)."""


@final
class WorkflowNotFound(ServiceError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"workflow {name!r} is not registered")


@final
class RunNotFound(ServiceError):
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} does not exist")


@final
class InvalidRequest(ServiceError, ValueError):
    """A malformed argument. (A malformed id is :class:`dagnats_trio.protocol.InvalidId`,
    which names the field that carried it.)"""


@final
class InputTooLarge(ServiceError):
    """A run's input too large to start it: over the input bound, or making the run's first
    snapshot (the input once, and again in each first task) larger than one NATS message can
    hold. Nothing of the run is written."""

    def __init__(self, size_bytes: int, reason: str) -> None:
        self.size_bytes = size_bytes
        super().__init__(f"input is {size_bytes} bytes encoded; {reason}")


@final
class RunRunning(ServiceError):
    """The run (or a child run of it) has not finished, so it cannot be purged."""

    def __init__(self, run_id: str, running: str | None = None) -> None:
        self.run_id = run_id
        self.running = running or run_id
        if self.running == run_id:
            message = f"run {run_id!r} is still running; only a finished run can be purged"
        else:
            message = (
                f"run {run_id!r} has a child run {self.running!r} that is still running; "
                "only a finished run can be purged"
            )
        super().__init__(message)


@final
class RunWaitTimeout(ServiceError):
    def __init__(self, run_id: str, timeout_s: float) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} did not finish within {timeout_s} s")


def json_bytes(value: JsonValue, what: str) -> bytes:
    """``value`` as stored JSON; :class:`InvalidRequest` naming ``what`` when the JSON policy
    refuses it."""
    try:
        return encode_json(value, where=what)
    except JsonPolicyError as exc:
        raise InvalidRequest(str(exc)) from None
