"""Publishing lifecycle events, shared by the journal (commits) and the worker (plain steps)."""

from __future__ import annotations

import trio

from dagnats_trio.protocol import LifecycleEvent, encode_event
from dagnats_trio.protocol.layout import history_subject
from dagnats_trio.transport import TemporarilyUnavailable, Transport, TransportTimeout

#: How long a transient failure (no leader, timeout) is retried before giving up.
TRANSIENT_RETRY_DEADLINE_S = 10.0
#: First pause between retries; doubles up to the cap.
TRANSIENT_BACKOFF_START_S = 0.05
TRANSIENT_BACKOFF_MAX_S = 1.0


def settle_msg_id(event: LifecycleEvent) -> str:
    """One id per dispatch: a republished event (a crash after commit) is deduplicated by the
    stream, and the engine's acceptance rule drops whatever gets past the window."""
    nonce = event.dispatch.nonce if event.dispatch is not None else "legacy"
    return f"{event.run_id}.{event.step_id}.settled.{nonce}"


async def publish_lifecycle(transport: Transport, event: LifecycleEvent) -> int:
    """Publish on ``history.{run}``; transient failures are retried (the msg id makes it safe)."""
    data = encode_event(event)
    subject = history_subject(event.run_id)
    msg_id = settle_msg_id(event)
    backoff = TRANSIENT_BACKOFF_START_S
    deadline = trio.current_time() + TRANSIENT_RETRY_DEADLINE_S
    while True:
        try:
            return await transport.publish(subject, data, msg_id=msg_id)
        except (TemporarilyUnavailable, TransportTimeout):
            if trio.current_time() + backoff > deadline:
                raise
            await trio.sleep(backoff)
            backoff = min(backoff * 2, TRANSIENT_BACKOFF_MAX_S)
