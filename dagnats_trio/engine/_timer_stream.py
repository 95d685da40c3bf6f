"""The timer stream as the engine writes and consumes it: a timer's headers, how an ``ArmTimer``
effect stores one, and the engines' one durable consumer of the stream.

Apart from the engine's loops (``_shell``) because the stream's conventions are shared: the
timer loop reads the headers written here, and tests arm timers and provision the consumer
with these same calls.
"""

from __future__ import annotations

from ..protocol import encode_event, layout
from ..transport import ConsumerConfig, Transport
from .effects import ArmTimer

#: Header of a timer message: its due time in wall-clock epoch milliseconds.
TIMER_DUE_HEADER = "Dagnats-Due-Ms"
#: Header of a timer message: its id, used as the msg id of the ``timer.fired`` it becomes.
TIMER_ID_HEADER = "Dagnats-Timer-Id"


def timer_consumer(ack_wait_s: float) -> ConsumerConfig:
    """The engines' one durable consumer of the timer stream, with no ``max_ack_pending``.

    The timer loop naks a timer that is not yet due with the time left as the delay, and the
    server counts a nakked message as pending until it comes back and is acked: every armed
    timer not yet due (a step timeout of an hour, a wait of a day) is pending. Under the server's
    default limit (1000) a thousand such timers would stop the consumer delivering anything
    *new*: a timer due now (a retry's backoff, another run's short wait) would fire only when one
    of the far ones came due. Unlimited (-1) because the pending timers are already bounded by
    the runs' timers (each is stored in the stream until its run ends, which purges them), and
    what each costs the server is one entry in its memory and in the consumer's state file
    (docs/jetstream.md, "The timer stream"). Rejected: a larger fixed limit (the same stall,
    later, at a size no operator chooses), and timers that are not held pending until due
    (the server's message schedules: a new stream layout for every store).
    """
    return ConsumerConfig(
        stream=layout.TIMER_STREAM,
        durable=layout.TIMER_DURABLE,
        filter_subject=layout.timer_subject("*", "*"),
        ack_wait_s=ack_wait_s,
        max_ack_pending=-1,
    )


async def arm_timer(transport: Transport, effect: ArmTimer) -> None:
    """Store ``effect``'s timer on ``sleep.{run}.{step}``: its ``timer.fired`` as the body, its
    due time and id as headers, its id as the msg id (an armed timer published again is one)."""
    ev = effect.event
    await transport.publish(
        layout.timer_subject(ev.run_id, ev.step_id),
        encode_event(ev),
        headers={TIMER_DUE_HEADER: str(effect.due_ms), TIMER_ID_HEADER: effect.timer_id},
        msg_id=effect.timer_id,
    )
