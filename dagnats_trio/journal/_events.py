"""Publishing lifecycle events, shared by the journal (commits) and the worker (plain steps)."""

from __future__ import annotations

from dagnats_trio.protocol import LifecycleEvent, encode_event
from dagnats_trio.protocol.layout import history_subject
from dagnats_trio.transport import Transport, retry_transient


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
    return await retry_transient(lambda: transport.publish(subject, data, msg_id=msg_id))
