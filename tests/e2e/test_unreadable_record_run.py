"""The issue's scenario end to end (issue 16, item 2): one truncated record published onto
``journal.{run}.agent`` while the agent's unsafe tool runs, with the engine and a worker on a
real nats-server. Before, the run stayed ``running`` with no error (25 deliveries in 90 s, each
logged at INFO). Now each attempt fails with a reason naming the sequence, the step's retry
policy runs out, and the run fails with that reason; the tool is never started again.
"""

from __future__ import annotations

import logging
from typing import Final

import pytest
import trio

from dagnats_trio.journal import UNREADABLE_REASON, Fenced, JournalUnreadable, Replay, ToolCall
from dagnats_trio.protocol import RunStatus
from dagnats_trio.protocol.layout import journal_subject
from dagnats_trio.transport import Transport
from dagnats_trio.worker import TaskContext

from ._stack import WAIT_S, new_engine, new_worker, open_stack, uid

#: A writer that died halfway through its body.
TRUNCATED: Final = b'{"type":"tool.result","iteration":0,"attempt":1,"claim_id":"x","ca'
#: The step's retry policy: one retry, soon.
MAX_ATTEMPTS: Final = 2
STEP: Final = "agent"


async def test_a_truncated_record_fails_the_run_by_its_retry_policy(
    nats_transport: Transport, caplog: pytest.LogCaptureFixture
) -> None:
    t = nats_transport
    task = uid("unreadable")
    in_tool, corrupted = trio.Event(), trio.Event()
    tool_starts: list[int] = []
    fenced: list[str] = []
    unreadable: list[int] = []

    async def agent(tc: TaskContext) -> None:
        try:
            j = await tc.journal()
        except JournalUnreadable:
            unreadable.append(tc.attempt)
            raise

        async def charge(call: ToolCall) -> str:
            tool_starts.append(tc.attempt)
            in_tool.set()
            await corrupted.wait()
            return "charged"

        try:
            result = await j.tool(ToolCall("charge", 5), Replay.UNSAFE, charge)
        except Fenced as exc:
            fenced.append(str(exc))
            raise
        await tc.complete(result.output)

    caplog.set_level(logging.INFO, logger="dagnats_trio")
    async with open_stack(t) as stack:
        await stack.start(new_engine(t, stack.inputs))
        await stack.start(new_worker(t, stack.inputs, {task: agent}))
        workflow = await stack.workflow(
            {
                "name": uid("wf"),
                "steps": [
                    {
                        "id": STEP,
                        "task": task,
                        "retry": {
                            "max_attempts": MAX_ATTEMPTS,
                            "strategy": "fixed",
                            "initial_delay": "100ms",
                        },
                    }
                ],
            }
        )
        run_id = await stack.service.start_run(workflow)
        with trio.fail_after(WAIT_S):
            await in_tool.wait()
        bad_seq = await t.publish(journal_subject(run_id, STEP), TRUNCATED)
        corrupted.set()
        snap = await stack.wait_run(run_id, lambda s: s.status.finished)

    step = snap.steps[STEP]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    named = f"journal record at sequence {bad_seq} is unreadable"
    print(
        f"corrupt record at {bad_seq}: run {snap.status.value} ({snap.error!r}); step reason "
        f"{step.reason!r}; tool starts {tool_starts}; unreadable at attempts {unreadable}; "
        f"fenced {fenced}"
    )
    assert snap.status is RunStatus.FAILED
    assert step.reason == UNREADABLE_REASON
    assert step.error is not None and step.error.startswith(f"{named}: ")
    assert snap.error is not None and named in snap.error
    assert tool_starts == [1]  # started once; never again
    (fence_msg,) = fenced
    assert f"the record at sequence {bad_seq} is not a claim but unreadable" in fence_msg
    assert "a successor claimed it" not in fence_msg
    assert unreadable == list(range(1, MAX_ATTEMPTS + 1))  # each attempt, then no more
    assert sum(named in m for m in errors) >= MAX_ATTEMPTS, errors
    below = [r for r in caplog.records if r.levelno < logging.ERROR and named in r.getMessage()]
    assert not below, [r.getMessage() for r in below]
