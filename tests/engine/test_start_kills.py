"""A client process SIGKILLed inside a start that took the early path (the run indexed, or its
idempotency key claimed, while the definition is read: ``api.service``; its first step
dispatched by the start itself: ``engine.start_dispatched``), on a real nats-server: just
before the run's first snapshot is created; after it, before the task and ``workflow.started``
are sent; after the task, before the event; after both.

A run is listed exactly when its snapshot exists (never hidden, never listed without one); a
retry with the key completes that run, once (same run id, its step run once, one
``workflow.started``); a start without a key killed before its snapshot leaves no run to start.
A run whose dispatch is saved completes once when its task or its event was stored (the
engine repeats the outbox's task on the event, as after its own crash); with neither, it waits
as a start killed before its ``workflow.started`` always has: a retry with its key publishes
the event, a cancel ends it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

import pytest
import trio

from dagnats_trio.api import RunNotFound, Service
from dagnats_trio.protocol import RunStatus, TaskMessage, WorkflowStarted, decode_event, layout
from dagnats_trio.transport import Transport, TrioNatsTransport

from ._fakes import RUN_TIMEOUT_S, FakeWorker, complete_with, running, test_engine, uid, wait_until
from ._start_victim import ANNOUNCED, DISPATCH, NO_KEY, SNAPSHOT, TASK
from .test_engine_kills import PROCESS_START_S
from .test_start_path import _indexed

VICTIM: Final = Path(__file__).with_name("_start_victim.py")


async def _complete(task: TaskMessage) -> object:
    return await complete_with(task, {"ok": task.run_id})


async def _listed(service: Service, wf: str) -> tuple[list[str], list[str]]:
    every = await service.list_runs(workflow=wf)
    active = await service.list_runs(workflow=wf, status="running")
    return [r.run_id for r in every.runs], [r.run_id for r in active.runs]


async def _started_events(transport: Transport, run_id: str) -> int:
    msgs = await transport.read_subject(
        layout.HISTORY_STREAM, layout.history_subject(run_id), 1, 100
    )
    return sum(isinstance(decode_event(m.data), WorkflowStarted) for m in msgs)


async def _tasks_stored(transport: Transport, task_type: str, run_id: str) -> int:
    subject = layout.task_subject(task_type, run_id)
    return len(await transport.read_subject(layout.TASK_STREAM, subject, 1, 100))


async def _kill_start(nats_url: str, wf: str, run_id: str, key: str, kill_at: str) -> None:
    argv = [sys.executable, str(VICTIM), nats_url, wf, run_id, key, kill_at]
    with trio.fail_after(PROCESS_START_S):
        done = await trio.run_process(argv, check=False, capture_stderr=True)
    assert done.returncode == -9, done.stderr.decode()


@pytest.mark.parametrize(
    ("keyed", "kill_at"),
    [(True, SNAPSHOT), (True, DISPATCH), (False, SNAPSHOT)],
    ids=["keyed-before-snapshot", "keyed-before-task-and-started", "unkeyed-before-snapshot"],
)
async def test_a_start_killed_on_its_early_path_is_listed_iff_its_snapshot_exists(
    keyed: bool, kill_at: str, nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    t = trio_transport
    service = Service(t)
    wf, task_type, run_id = uid("startkill"), uid("t"), uid("run")
    key = uid("key") if keyed else NO_KEY
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": task_type}]})
    await _kill_start(nats_url, wf, run_id, key, kill_at)
    indexed = await _indexed(t, run_id)
    after_kill = await _listed(service, wf)
    snapshot_written = kill_at == DISPATCH
    assert after_kill == (([run_id], [run_id]) if snapshot_written else ([], []))
    assert await _started_events(t, run_id) == 0  # never announced
    assert await _tasks_stored(t, task_type, run_id) == 0  # nor dispatched

    worker = FakeWorker(t, task_type, _complete)
    if keyed:
        async with running(test_engine(t), worker):
            assert await service.start_run(wf, {"n": 1}, key) == run_id  # the retry
            snap = await wait_until(
                service, run_id, lambda s: s.status is RunStatus.COMPLETED, RUN_TIMEOUT_S
            )
        assert snap.output == {"ok": run_id}
        assert [task.run_id for task in worker.seen] == [run_id]
        assert await _started_events(t, run_id) == 1
        assert await _listed(service, wf) == ([run_id], [])
    else:
        with pytest.raises(RunNotFound):
            await service.get_run(run_id)
    print(
        f"{'keyed' if keyed else 'unkeyed'} start killed before its {kill_at}: index entry and "
        f"active marker {indexed}; listed after the kill {after_kill}; after: "
        f"{await _listed(service, wf)}, index entry and marker {await _indexed(t, run_id)}"
    )


@pytest.mark.parametrize("kill_at", [DISPATCH, TASK, ANNOUNCED])
async def test_an_unkeyed_start_killed_after_its_dispatch_was_saved(
    kill_at: str, nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    t = trio_transport
    service = Service(t)
    wf, task_type, run_id = uid("startkill"), uid("t"), uid("run")
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": task_type}]})
    await _kill_start(nats_url, wf, run_id, NO_KEY, kill_at)
    assert await _listed(service, wf) == ([run_id], [run_id])
    saved = await service.get_run(run_id)
    assert saved.started and saved.steps["a"].dispatch is not None
    stored = (await _tasks_stored(t, task_type, run_id), await _started_events(t, run_id))
    assert stored == {DISPATCH: (0, 0), TASK: (1, 0), ANNOUNCED: (1, 1)}[kill_at]

    worker = FakeWorker(t, task_type, _complete)
    async with running(test_engine(t), worker):
        if kill_at == DISPATCH:
            # Nothing names the run to the engine or a worker (as a start killed before its
            # workflow.started, today and before): a cancel ends it.
            await service.cancel_run(run_id)
            want = RunStatus.CANCELLED
        else:
            want = RunStatus.COMPLETED
        snap = await wait_until(service, run_id, lambda s: s.status is want, RUN_TIMEOUT_S)
    assert [(task.run_id, task.dispatch) for task in worker.seen] == (
        [] if kill_at == DISPATCH else [(run_id, saved.steps["a"].dispatch)]
    )
    if want is RunStatus.COMPLETED:
        assert snap.output == {"ok": run_id}
    assert await _tasks_stored(t, task_type, run_id) == 0  # purged by the run's end
    assert await _started_events(t, run_id) == stored[1]
    assert await _listed(service, wf) == ([run_id], [])
    print(f"unkeyed start killed at {kill_at}: (tasks, events) stored {stored}; {snap.status}")
