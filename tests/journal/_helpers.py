"""Task messages, history reads and transport wrappers for journal and worker tests."""

from __future__ import annotations

import uuid
from typing import Any

import trio

from dagnats_trio.protocol import (
    DispatchId,
    RunEvent,
    TaskMessage,
    decode_event,
    encode_task,
)
from dagnats_trio.protocol.layout import HISTORY_STREAM, history_subject, task_subject
from dagnats_trio.transport import (
    Headers,
    StoredMsg,
    Transport,
    TransportTimeout,
    WrongLastSequence,
)

#: Bound on any wait in these tests.
WAIT_S = 10.0


def uid(prefix: str = "r") -> str:
    return f"{prefix}{uuid.uuid4().hex[:12]}"


def make_task(
    run_id: str,
    *,
    step_id: str = "agent",
    task_type: str = "agent",
    iteration: int = 0,
    attempt: int = 1,
    nonce: str | None = None,
    journal_seq: int | None = None,
    input: Any = None,
    loop_state_max_bytes: int | None = None,
) -> TaskMessage:
    return TaskMessage(
        run_id=run_id,
        step_id=step_id,
        task=task_type,
        workflow="wf",
        dispatch=DispatchId(iteration, attempt, nonce or uid("n")),
        input=input,
        journal_seq=journal_seq,
        loop_state_max_bytes=loop_state_max_bytes,
        is_loop=True,
    )


async def publish_task(transport: Transport, task: TaskMessage) -> int:
    return await transport.publish(task_subject(task.task, task.run_id), encode_task(task))


async def history(transport: Transport, run_id: str) -> list[RunEvent]:
    msgs = await transport.read_subject(HISTORY_STREAM, history_subject(run_id), 1, 1000)
    return [decode_event(m.data) for m in msgs]


async def wait_history(transport: Transport, run_id: str, n: int) -> list[RunEvent]:
    """Wait (bounded) until the run's history holds at least ``n`` events."""
    with trio.fail_after(WAIT_S):
        while True:
            events = await history(transport, run_id)
            if len(events) >= n:
                return events
            await trio.sleep(0.02)


class LoseAck:
    """Wraps a transport: the next journal publish stores, then fails as if its ack was lost."""

    def __init__(self, inner: Transport, error: type[Exception] = TransportTimeout) -> None:
        self._inner = inner
        self.armed = False
        self.error = error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def publish(
        self,
        subject: str,
        data: bytes,
        *,
        headers: Headers | None = None,
        msg_id: str | None = None,
        expected_last_subject_seq: int | None = None,
    ) -> int:
        seq = await self._inner.publish(
            subject,
            data,
            headers=headers,
            msg_id=msg_id,
            expected_last_subject_seq=expected_last_subject_seq,
        )
        if self.armed and subject.startswith("journal."):
            self.armed = False
            if self.error is WrongLastSequence:
                # what a client's own retry of the stored publish would answer
                raise WrongLastSequence("wrong last sequence")
            raise self.error("lost ack")
        return seq

    async def get_last_msg(self, stream: str, subject: str) -> StoredMsg | None:
        return await self._inner.get_last_msg(stream, subject)
