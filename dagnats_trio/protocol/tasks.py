"""Task messages: what the engine publishes on ``task.{task_type}.{run}`` for a worker; and the
mark a worker leaves to say it polls a task type."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, final

import attrs

from ._codec import JsonValue, encoder_of, from_json, to_json
from .common import DispatchId


@final
@attrs.frozen
class TaskMessage:
    """One dispatch of a step.

    ``journal_seq`` is the sequence of the last journal commit of the step (from the event that
    ended the previous iteration), so a journal step reads its state with one get by sequence.
    """

    run_id: str
    step_id: str
    task: str
    workflow: str
    dispatch: DispatchId
    input: JsonValue = None
    journal_seq: int | None = None
    loop_state_max_bytes: int | None = None
    is_loop: bool = False


#: ``to_json(task)``, the hook looked up once (:func:`encoder_of`; the class is final).
encode_task: Final[Callable[[TaskMessage], bytes]] = encoder_of(TaskMessage)


def decode_task(data: bytes) -> TaskMessage:
    return from_json(data, TaskMessage, "task message")


@final
@attrs.frozen
class PollMark:
    """``worker_polls`` at ``poll.{task_type}``: a worker polled ``task_type`` at ``at_ms`` (its
    wall clock, epoch ms). Refreshed every few seconds while the worker runs, so a reader can
    tell a run waiting on a type that nobody serves from one waiting its turn."""

    task_type: str
    worker_id: str
    at_ms: int


def encode_poll_mark(mark: PollMark) -> bytes:
    return to_json(mark)


def decode_poll_mark(data: bytes) -> PollMark:
    return from_json(data, PollMark, "poll mark")
