"""The lease a worker holds on a task message: the task consumer's AckWait and its heartbeat.

A task message is leased to one delivery for the consumer's AckWait; the worker's one
heartbeat loop restarts that deadline (``in_progress``) several times per AckWait while the
handler runs. A killed worker sends nothing more (its connection is gone), so its task comes
back when the lease runs out: at the default, between ``DEFAULT_ACK_WAIT_S`` minus one heartbeat
interval and ``DEFAULT_ACK_WAIT_S`` after the kill, under a second.

A live worker that misses its heartbeats for longer than that (a loaded machine, a handler
blocking the event loop) loses the lease too: the task is redelivered and the successor's
journal claim fences it, so nothing runs twice that must not. So that such a worker does not
lose every lease in turn, each redelivery of the same message gets a longer one
(``LEASE_GROWTH_FACTOR`` times, up to ``MAX_LEASE_S``): JetStream's consumer ``backoff``, applied
per delivery count, which ``in_progress`` honours too.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

import trio

from dagnats_trio.journal import DeliveryState
from dagnats_trio.protocol.layout import TASK_STREAM, task_filter, worker_durable
from dagnats_trio.transport import ConsumerConfig, Delivery, TransportError

_log = logging.getLogger(__name__)

#: The heartbeat restarts the AckWait this many times per AckWait (every 0.2 s at the default,
#: one ``in_progress`` per task in hand each time), so a worker may fall silent for
#: ``(1 - 1/HEARTBEATS_PER_ACK_WAIT)`` of the AckWait (0.6 s at the default) and keep its task.
HEARTBEATS_PER_ACK_WAIT: Final = 4
#: Each redelivery of a message gets this many times the lease of the delivery before it.
LEASE_GROWTH_FACTOR: Final = 4.0
#: The longest lease: the growth stops here (0.8 s, 3.2 s, 12.8 s, 30 s at the default).
MAX_LEASE_S: Final = 30.0


def lease_schedule(ack_wait_s: float) -> tuple[float, ...]:
    """The AckWait of the 1st, 2nd, ... delivery of a task message (the last one repeats)."""
    leases = [ack_wait_s]
    while leases[-1] < MAX_LEASE_S:
        leases.append(min(leases[-1] * LEASE_GROWTH_FACTOR, MAX_LEASE_S))
    return tuple(leases)


def heartbeat_interval_s(ack_wait_s: float) -> float:
    """How often the lease of every task in hand is restarted."""
    return ack_wait_s / HEARTBEATS_PER_ACK_WAIT


def task_consumer(task_type: str, ack_wait_s: float) -> ConsumerConfig:
    """The durable consumer ``workers-{task_type}``, the same for every worker and the bridge
    (they share it; one that configured it differently would change it for all)."""
    schedule = lease_schedule(ack_wait_s)
    return ConsumerConfig(
        stream=TASK_STREAM,
        durable=worker_durable(task_type),
        filter_subject=task_filter(task_type),
        ack_wait_s=ack_wait_s,
        max_deliver=-1,
        backoff_s=schedule if len(schedule) > 1 else (),
    )


async def keep_alive(beating: Mapping[DeliveryState, Delivery], ack_wait_s: float) -> None:
    """One loop beats every delivery in hand (``beating``, the worker's, kept up to date as
    deliveries come and go), every ``heartbeat_interval_s(ack_wait_s)``.

    One loop rather than a task per delivery: a task (and the nursery around it) per
    delivery cost several scheduler passes on every task's critical path. A delivery gets
    its first beat at most ``interval`` after it arrived, as before (sooner is harmless: a
    beat only restarts its AckWait), and a stalled, killed or fenced holder gets none, so its
    AckWait runs out exactly as before (see this module's docstring for the figures). A beat
    is a core publish that waits only when the connection's outgoing buffer is full (which
    every beat would then wait on alike); it is bounded by ``interval`` so the loop still
    comes round.
    """
    interval = heartbeat_interval_s(ack_wait_s)
    while True:
        await trio.sleep(interval)
        for holder, delivery in list(beating.items()):
            if holder.stalled or holder.killed:
                continue
            if holder not in beating:  # settled during an earlier beat of this pass
                continue
            if holder.fenced:
                holder.lose_lease(holder.fenced_because)
                continue
            with trio.move_on_after(interval):
                try:
                    await delivery.in_progress()
                except TransportError as exc:
                    _log.debug("in_progress for %s failed: %s", delivery.subject, exc)
                    holder.lose_lease(f"its heartbeat failed: {exc}")
