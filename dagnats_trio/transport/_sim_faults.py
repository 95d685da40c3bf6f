"""Faults of the simulated server, turned on and off by the chaos soak and the crash tests.

Mutable on purpose, shared by every connection of one :class:`~._sim_server.SimServer`.

- ``delay_s``: every call waits this long (Trio time) before the server sees it;
- ``unavailable_until``: until this Trio time every JetStream call (streams, KV, consumers, acks)
  raises :class:`TemporarilyUnavailable`, as during a stream-leader step-down; core NATS works;
- ``lose_next_publish_acks(n, subject)``: the next ``n`` stream publishes matching ``subject`` are
  stored, then the caller gets :class:`TransportTimeout` (a lost publish ack); an atomic batch
  counts as one publish, on its last message's subject;
- ``drop_next(durable, n)``: the next ``n`` deliveries of that consumer vanish on the way: they
  count as delivered and stay pending, so they come back after the AckWait;
- ``duplicate_next(durable, n)``: the next ``n`` deliveries of that consumer become deliverable
  again at once, so another fetch gets the same message (``num_delivered`` + 1) while the first
  holder still has it.
"""

from __future__ import annotations

import math
from typing import final

import attrs
import trio

from ._sim_subjects import subject_matches


@final
@attrs.define
class SimFaults:
    """Faults the chaos soak turns on and off; see the module docstring. Mutable on purpose."""

    delay_s: float = 0.0
    unavailable_until: float = -math.inf
    lose_publish_acks: int = 0
    lose_publish_acks_subject: str = ">"
    drop_deliveries: dict[str, int] = attrs.field(factory=dict)
    duplicate_deliveries: dict[str, int] = attrs.field(factory=dict)

    def unavailable_for(self, seconds: float) -> None:
        """Fail JetStream calls for ``seconds`` of Trio time from now (a leader step-down)."""
        self.unavailable_until = trio.current_time() + seconds

    def lose_next_publish_acks(self, n: int = 1, subject: str = ">") -> None:
        self.lose_publish_acks = n
        self.lose_publish_acks_subject = subject

    def drop_next(self, durable: str, n: int = 1) -> None:
        self.drop_deliveries[durable] = self.drop_deliveries.get(durable, 0) + n

    def duplicate_next(self, durable: str, n: int = 1) -> None:
        self.duplicate_deliveries[durable] = self.duplicate_deliveries.get(durable, 0) + n

    def clear(self) -> None:
        """Turn every fault off."""
        self.delay_s = 0.0
        self.unavailable_until = -math.inf
        self.lose_publish_acks = 0
        self.drop_deliveries.clear()
        self.duplicate_deliveries.clear()

    def _spend(self, counters: dict[str, int], durable: str) -> bool:
        left = counters.get(durable, 0)
        if left <= 0:
            return False
        if left == 1:
            del counters[durable]
        else:
            counters[durable] = left - 1
        return True

    def _spend_lost_ack(self, subject: str) -> bool:
        if self.lose_publish_acks > 0 and subject_matches(self.lose_publish_acks_subject, subject):
            self.lose_publish_acks -= 1
            return True
        return False
