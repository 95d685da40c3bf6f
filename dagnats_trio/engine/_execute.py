"""Carrying out a decision's effects: the I/O half of ``engine.core``'s pure answer.

The engine calls :func:`execute_effects` after a decision's snapshot is saved (and again for a
replayed event, whose effects the outbox gives back), awaited in the task handling it: each
effect is stored before the next is sent, and all of them before the event is acked. A
redelivered event carries them out again: tasks, events and timers carry msg ids, and the
inputs hooks must be idempotent (``hooks.InputsHooks``).
"""

from __future__ import annotations

from ..protocol import InputSubmitted, encode_event, encode_task, layout
from ..transport import PublishMsg, Transport
from ._timer_stream import arm_timer
from .effects import (
    AnnounceCancel,
    ArmTimer,
    CheckQueuedInputs,
    Effect,
    PublishEvent,
    PublishTask,
    SettleInputs,
)
from .hooks import InputsHooks
from .snapshot import SnapshotEncoder


async def execute_effects(
    transport: Transport,
    inputs: InputsHooks,
    effects: tuple[Effect, ...],
    *,
    encoder: SnapshotEncoder | None = None,
) -> None:
    """Carry ``effects`` out in order, each awaited. No checkpoint of its own: with no effects
    it returns at once (the caller's handling of the event goes on to its ack). ``encoder``:
    the one that saved the snapshot holding these effects, whose spelling of each task is
    published (the same bytes, not encoded again)."""
    for effect in effects:
        if isinstance(effect, PublishTask):
            msg = task_publish_msg(effect, encoder)
            await transport.publish(msg.subject, msg.data, msg_id=msg.msg_id)
        elif isinstance(effect, ArmTimer):
            await arm_timer(transport, effect)
        elif isinstance(effect, AnnounceCancel):
            await transport.core_publish(
                layout.cancel_subject(effect.run_id), effect.run_id.encode()
            )
        elif isinstance(effect, PublishEvent):
            await transport.publish(
                layout.history_subject(effect.run_id),
                encode_event(effect.event),
                msg_id=effect.msg_id,
            )
        elif isinstance(effect, CheckQueuedInputs):
            if await inputs.has_queued(effect.run_id, effect.step_id):
                await transport.publish(
                    layout.history_subject(effect.run_id),
                    encode_event(InputSubmitted(effect.run_id, effect.step_id)),
                    msg_id=effect.msg_id,
                )
        elif isinstance(effect, SettleInputs):
            await inputs.settle_step(effect.run_id, effect.step_id)


def task_publish_msg(effect: PublishTask, encoder: SnapshotEncoder | None = None) -> PublishMsg:
    """How a task is published, by the engine and by a service that dispatched a run's first
    step itself (``_store.start_dispatched``): its subject, its bytes (``encode_task``'s,
    spelled by ``encoder`` when given: once with the outbox entry it saved), its msg id."""
    task = effect.task
    data = encode_task(task) if encoder is None else encoder.task_bytes(effect)
    return PublishMsg(layout.task_subject(task.task, task.run_id), data, msg_id=effect.msg_id)
