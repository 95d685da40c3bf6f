"""A handler whose journal never got its claim must not settle the step outside the journal.

Found by the chaos soak (seed 33): a holder whose claim kept failing published a plain
``step.failed`` while a second holder of the same dispatch claimed and committed; the engine
took the failure, dispatched a new attempt, and the run hung. Now the first holder leaves the
task unacked, and the redelivery goes through the journal's fencing.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from dagnats_trio.protocol import RunEvent, StepCompleted
from dagnats_trio.protocol.layout import JOURNAL_STREAM, journal_subject
from dagnats_trio.transport import TemporarilyUnavailable, open_sim_transport, provision
from dagnats_trio.worker import TaskContext, Worker

from ._helpers import history, make_task, publish_task, uid

#: Bound (Trio time; the clock autojumps) on waiting for the step's event.
EVENT_WAIT_S = 120.0


class JournalOutage:
    """Delegates to a transport, but reads of the journal's tail and appends to the journal
    fail while ``down`` is set: the journal retries for TRANSIENT_RETRY_DEADLINE_S, then
    ``tc.journal()`` gives up (whether its claim reads the tail first or, on a first delivery,
    is predicted: journal ``_open``), while everything else (the lifecycle event a plain settle
    would publish) still works."""

    def __init__(self, inner: Any, journal: str) -> None:
        self._inner = inner
        self._journal = journal
        self.down = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def get_last_msg(self, stream: str, subject: str) -> Any:
        if self.down and stream == JOURNAL_STREAM:
            raise TemporarilyUnavailable("journal leader moving")
        return await self._inner.get_last_msg(stream, subject)

    async def publish(self, subject: str, data: bytes, **kwargs: Any) -> int:
        if self.down and subject == self._journal:
            raise TemporarilyUnavailable("journal leader moving")
        seq: int = await self._inner.publish(subject, data, **kwargs)
        return seq


async def _wait_events(transport: Any, run_id: str) -> list[RunEvent]:
    with trio.fail_after(EVENT_WAIT_S):
        while True:
            events = await history(transport, run_id)
            if events:
                return events
            await trio.sleep(0.5)


async def test_unclaimed_journal_leaves_the_task_for_redelivery(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_sim_transport() as transport:
        await provision(transport)
        deliveries: list[int] = []
        run_id = uid()
        task = make_task(run_id)
        flaky = JournalOutage(transport, journal_subject(run_id, task.step_id))

        async def handler(tc: TaskContext) -> None:
            deliveries.append(tc.num_delivered)
            flaky.down = tc.num_delivered == 1
            await tc.journal()
            await tc.complete("done")

        await publish_task(transport, task)
        async with trio.open_nursery() as nursery:
            await nursery.start(Worker(flaky, {"agent": handler}, ack_wait_s=2.0).run)
            events = await _wait_events(transport, run_id)
            nursery.cancel_scope.cancel()

    # One event only: the completion by the second delivery; no step.failed from the first.
    assert len(events) == 1, events
    assert isinstance(events[0], StepCompleted)
    assert events[0].dispatch == task.dispatch and events[0].output == "done"
    assert deliveries == [1, 2]
