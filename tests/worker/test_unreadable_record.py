"""A record that cannot be decoded fails the step, loudly, and the unsafe tool never restarts.

Issue 16, item 2: one truncated record published onto ``journal.{run}.agent`` while the unsafe
tool ran left the run ``running`` for good (25 deliveries in 90 s, each logged at INFO), and the
holder was told a successor had claimed the journal, though none existed. Now the holder is told
what is really there, the next delivery commits and publishes a retriable ``step.failed`` naming
the sequence and what was wrong (logged at ERROR), and a retry fails the same way.
"""

from __future__ import annotations

import logging
from typing import Final

import pytest
import trio

from dagnats_trio.journal import (
    UNREADABLE_REASON,
    Fenced,
    JournalUnreadable,
    Replay,
    ToolCall,
)
from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    CommitRecord,
    RunEvent,
    StepFailed,
    decode_record,
)
from dagnats_trio.protocol.layout import JOURNAL_STREAM, journal_subject
from dagnats_trio.transport import NatsTransport
from dagnats_trio.worker import TaskContext, Worker

from ._helpers import history, make_task, publish_task, uid

#: Bound on each wait: a redelivery after the default AckWait, on a loaded machine.
WAIT_S: Final = 30.0
#: What a truncated record looks like (a writer that died halfway through its body).
TRUNCATED: Final = b'{"type":"tool.result","iteration":0,"attempt":1,"claim_id":"x","ca'


async def _wait_events(t: NatsTransport, run_id: str, n: int) -> list[RunEvent]:
    with trio.fail_after(WAIT_S):
        while True:
            events = await history(t, run_id)
            if len(events) >= n:
                return events
            await trio.sleep(0.05)


async def test_unreadable_record_fails_the_step_and_the_tool_never_restarts(
    nats_transport: NatsTransport, caplog: pytest.LogCaptureFixture
) -> None:
    t = nats_transport
    task = make_task(uid(), task_type=uid("t"))
    subject = journal_subject(task.run_id, task.step_id)
    in_tool, corrupted = trio.Event(), trio.Event()
    tool_starts: list[int] = []
    fenced: list[str] = []
    unreadable: list[tuple[int, str]] = []

    async def agent(tc: TaskContext) -> None:
        try:
            j = await tc.journal()
        except JournalUnreadable as exc:
            unreadable.append((tc.attempt, str(exc)))
            raise

        async def charge(call: ToolCall) -> str:
            tool_starts.append(tc.num_delivered)
            in_tool.set()
            await corrupted.wait()
            return "charged"

        try:
            await j.tool(ToolCall("charge", 5), Replay.UNSAFE, charge)
        except Fenced as exc:
            fenced.append(str(exc))
            raise
        await tc.complete("done")

    caplog.set_level(logging.ERROR, logger="dagnats_trio")
    async with trio.open_nursery() as nursery:
        await nursery.start(Worker(t, {task.task: agent}).run)
        await publish_task(t, task)
        with trio.fail_after(WAIT_S):
            await in_tool.wait()
        bad_seq = await t.publish(subject, TRUNCATED)
        corrupted.set()
        (first,) = await _wait_events(t, task.run_id, 1)
        # The retry the engine would send: attempt 2 of the same iteration fails the same way.
        retry = make_task(task.run_id, task_type=task.task, attempt=2)
        await publish_task(t, retry)
        events = await _wait_events(t, task.run_id, 2)
        nursery.cancel_scope.cancel()

    print(f"corrupt record at {bad_seq}; fenced: {fenced}; failed: {[e for e in events]}")
    assert tool_starts == [1]  # started once, by the first delivery; never again
    (fence_msg,) = fenced
    assert f"the record at sequence {bad_seq} is not a claim but unreadable" in fence_msg
    assert "no successor claimed it" in fence_msg and "a successor claimed it" not in fence_msg
    assert len(events) == 2
    for event, attempt in zip(events, (1, 2), strict=True):
        assert isinstance(event, StepFailed)
        assert event.dispatch is not None and event.dispatch.attempt == attempt
        assert event.retriable and event.reason == UNREADABLE_REASON
        assert event.error.startswith(f"journal record at sequence {bad_seq} is unreadable: ")
        assert "JSON" in event.error or "json" in event.error  # says what was wrong
    assert first == events[0] and first.dispatch == task.dispatch
    assert [a for a, _ in unreadable] == [1, 2]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(f"journal record at sequence {bad_seq} is unreadable" in m for m in errors), errors
    assert not any(
        f"sequence {bad_seq} is unreadable" in r.getMessage()
        for r in caplog.records
        if r.levelno < logging.ERROR
    )
    # After the bad record: a claim and a failing commit per attempt, all readable.
    msgs = await t.read_subject(JOURNAL_STREAM, subject, bad_seq + 1, 100)
    after = [decode_record(m.data) for m in msgs]
    assert [type(r) for r in after] == [ClaimRecord, CommitRecord] * 2
    commits = [r for r in after if isinstance(r, CommitRecord)]
    assert [(c.attempt, c.action, c.state) for c in commits] == [
        (1, CommitAction.FAIL, None),
        (2, CommitAction.FAIL, None),
    ]
