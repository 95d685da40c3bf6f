"""The one settlement path of a delivery, for the worker's ``tc.complete`` and the bridge's
``POST .../complete`` alike.

Settling is fencing-critical: a journaled step settles through its journal (commit, then the
lifecycle event carrying the commit's sequence); a plain step publishes its lifecycle event only
while its holder may still write, and only then is the delivery marked for an ack. Written once
here so the two callers cannot drift apart; each keeps only its own preconditions (the worker's
"the journal was never claimed", the bridge's lease checks) and its own way of telling the
outcome (exceptions for a handler, HTTP answers for a client).
"""

from __future__ import annotations

from typing import final

import attrs

from dagnats_trio._seams import Seam, current_hook
from dagnats_trio.protocol import CommitAction, JsonValue, Wait, lifecycle_event
from dagnats_trio.transport import Transport

from ._calls import require_json_value
from ._events import publish_lifecycle
from ._handle import Journal
from ._holder import DeliveryState, Settlement


@final
@attrs.frozen
class SettleRequest:
    """What a caller asks a settlement to say: the commit's action and its payload."""

    action: CommitAction
    output: JsonValue = None
    wait: Wait | None = None
    error: str | None = None
    retriable: bool = True
    pause_ms: int | None = None
    #: The caller has checked ``output`` by the JSON policy (and refused it before settling
    #: when it broke it): the settlement does not walk it again. False: it is checked here.
    output_checked: bool = False


async def settle_delivery(
    transport: Transport,
    holder: DeliveryState,
    journal: Journal | None,
    request: SettleRequest,
) -> int | None:
    """Settle one delivery; returns the commit's journal sequence (None for a plain step).

    With a journal the commit decides (it raises ``Fenced``, ``Stale``, ... as the journal does);
    without one the holder must still be writable (``Fenced``, ``HolderKilled``), the event is
    published, and the delivery is marked for its ack before the after-event crash seam.
    """
    if journal is not None:
        return await journal.settle_checked(
            request.action,
            output=request.output,
            wait=request.wait,
            error=request.error,
            retriable=request.retriable,
            pause_ms=request.pause_ms,
            output_checked=request.output_checked,
        )
    holder.check_writable()
    t = holder.task
    if not request.output_checked:
        require_json_value("step output", request.output)
    await publish_lifecycle(
        transport,
        lifecycle_event(
            t.run_id,
            t.step_id,
            t.dispatch,
            request.action,
            output=request.output,
            wait=request.wait,
            error=request.error,
            retriable=request.retriable,
            pause_ms=request.pause_ms,
        ),
    )
    holder.settlement = Settlement.ACK
    if current_hook() is not None:
        await holder.seam(Seam.AFTER_LIFECYCLE_EVENT)
    return None
