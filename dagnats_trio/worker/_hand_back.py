"""Deliveries a leaving worker has not begun, handed back (nakked) once its puller has left.

The native transport starts a delivery's task from the connection's reader (``Transport.pull``'s
``on_delivery``), so a delivery that arrives while the worker is leaving (its scope cancelled,
its pull loop not out of its puller yet), or whose task had not run a step when the worker
began to leave, gets a task that is cancelled at its first step. It has claimed nothing and run
nothing, so it is given back to the server to redeliver at once, to whichever worker asks, as
the puller gives back what it holds when it leaves; left unsettled it would wait for its
AckWait.

Not before the puller has left: a nak while the puller's request still waits on the server
would be redelivered into the same inbox, to another task cancelled at its first step, each
round a delivery more (a longer lease: ``_lease``). So the pull loop keeps such deliveries
until its puller has left (its inbox gone, its requests with it), then naks them; one whose
task runs later is nakked by that task.
"""

from __future__ import annotations

import logging
from typing import Final, final

import trio

from dagnats_trio.transport import Delivery, TransportError

_log = logging.getLogger(__name__)

#: Bound on handing back a leaving loop's deliveries (shielded: the worker is leaving).
HAND_BACK_TIMEOUT_S: Final = 1.0


@final
class HandBack:
    """One pull loop's deliveries to give back: held while its puller is in place."""

    __slots__ = ("_held", "_left")

    def __init__(self) -> None:
        self._held: list[Delivery] = []
        self._left = False

    async def give(self, delivery: Delivery) -> None:
        """Give ``delivery`` back: kept for :meth:`puller_left` while the puller is in place
        (no wait), nakked now once it has left."""
        if self._left:
            await _nak_each((delivery,))
        else:
            self._held.append(delivery)

    async def puller_left(self) -> None:
        """The loop's puller has left: nak what was kept, and from now on what is given."""
        self._left = True
        held, self._held = self._held, []
        if held:
            await _nak_each(held)


async def _nak_each(deliveries: tuple[Delivery, ...] | list[Delivery]) -> None:
    """Nak each delivery, shielded and bounded by :data:`HAND_BACK_TIMEOUT_S`; one that fails
    or times out is left to its AckWait, as before."""
    with trio.CancelScope(shield=True), trio.move_on_after(HAND_BACK_TIMEOUT_S):
        for delivery in deliveries:
            try:
                await delivery.nak()
            except TransportError as exc:
                _log.debug("hand-back of %s failed: %s", delivery.subject, exc)
