"""Publishing lifecycle events, shared by the journal (commits) and the worker (plain steps)."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from dagnats_trio.protocol import LifecycleEvent, encode_event
from dagnats_trio.protocol.layout import history_subject
from dagnats_trio.transport import Transport, retry_transient


def settle_msg_id(event: LifecycleEvent) -> str:
    """One id per dispatch: a republished event (a crash after commit) is deduplicated by the
    stream, and the engine's acceptance rule drops whatever gets past the window."""
    nonce = event.dispatch.nonce if event.dispatch is not None else "legacy"
    return f"{event.run_id}.{event.step_id}.settled.{nonce}"


def publish_lifecycle(transport: Transport, event: LifecycleEvent) -> Coroutine[Any, Any, int]:
    """Publish on ``history.{run}``; transient failures are retried (the msg id makes it safe).

    Await what this returns, at once: it is the retry's coroutine, with no frame of this
    function in between (one frame fewer passed through when the ack wakes the caller)."""
    data = encode_event(event)
    subject = history_subject(event.run_id)
    msg_id = settle_msg_id(event)
    return retry_transient(lambda: transport.publish(subject, data, msg_id=msg_id))
