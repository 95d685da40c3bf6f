"""What the pure core asks the shell to do. Each effect is idempotent, because the outbox may
re-execute it after a crash: stream publishes carry a message id, the cancel announcement is
at-most-once anyway, and the inputs hooks are required to be idempotent."""

from __future__ import annotations

from typing import ClassVar, final

import attrs

from ..protocol import RunEvent, TaskMessage, TimerFired, register_union


@final
@attrs.frozen
class PublishTask:
    TYPE: ClassVar[str] = "publish_task"
    task: TaskMessage
    msg_id: str


@final
@attrs.frozen
class ArmTimer:
    """A durable timer on ``sleep.{run}.{step}``, due at wall-clock epoch ms ``due_ms``."""

    TYPE: ClassVar[str] = "arm_timer"
    timer_id: str
    due_ms: int
    event: TimerFired


@final
@attrs.frozen
class AnnounceCancel:
    TYPE: ClassVar[str] = "announce_cancel"
    run_id: str


@final
@attrs.frozen
class PublishEvent:
    """An event for a (usually other) run's history: child start, child finish, cascade."""

    TYPE: ClassVar[str] = "publish_event"
    run_id: str
    event: RunEvent
    msg_id: str


@final
@attrs.frozen
class CheckQueuedInputs:
    """Ask the inputs hooks whether input is already queued; if so publish an
    ``input.submitted`` with ``msg_id`` so the waiting step wakes at once."""

    TYPE: ClassVar[str] = "check_queued_inputs"
    run_id: str
    step_id: str
    msg_id: str


@final
@attrs.frozen
class SettleInputs:
    TYPE: ClassVar[str] = "settle_inputs"
    run_id: str
    step_id: str


Effect = PublishTask | ArmTimer | AnnounceCancel | PublishEvent | CheckQueuedInputs | SettleInputs

register_union(Effect)
