"""A client process SIGKILLed inside a start that took the early path (the run indexed, or its
idempotency key claimed, while the definition is read: ``api.service``; its first step
dispatched by the start itself: ``engine.start_dispatched``), on a real nats-server: just
before the run's first snapshot is created; after it, before the task and ``workflow.started``
are sent; after the task, before the event; after both.

A run is listed exactly when its snapshot exists (never hidden, never listed without one); a
retry with the key completes that run, once (same run id, its step run once, one
``workflow.started``); a start without a key killed before its snapshot leaves no run to start.
A run created and never announced (the service's dispatch saved and nothing sent, or only its
task; on the engine's path, the snapshot created and no event) is found by the engine's start
sweep (``engine._start_sweep``), which publishes its ``workflow.started``; one whose start was
stored is never published again. Either way the run completes once, its step run once, with one
``workflow.started`` stored. An index entry left without a snapshot is left (listed nowhere).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

import pytest
import trio

from dagnats_trio.api import RunNotFound, Service
from dagnats_trio.engine import StartSweep, SweepReport
from dagnats_trio.protocol import RunStatus, TaskMessage, WorkflowStarted, decode_event, layout
from dagnats_trio.transport import Transport, TrioNatsTransport

from ._fakes import RUN_TIMEOUT_S, FakeWorker, complete_with, running, test_engine, uid, wait_until
from ._start_victim import ANNOUNCED, DISPATCH, NO_KEY, SNAPSHOT, STARTED, TASK
from .test_engine_kills import PROCESS_START_S
from .test_start_path import _indexed

VICTIM: Final = Path(__file__).with_name("_start_victim.py")
#: The engine's sweep bound and pace in the test that lets the engine sweep by itself.
SWEEP_AFTER_S: Final = 0.5
SWEEP_EVERY_S: Final = 0.1


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


@pytest.mark.parametrize("kill_at", [DISPATCH, TASK, ANNOUNCED, STARTED])
async def test_an_unkeyed_start_killed_after_its_snapshot_completes_once(
    kill_at: str, nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    """The sweep publishes the start of a run created and never announced (``dispatch``: the
    service's dispatch saved, nothing sent; ``task``: its task stored, no event; ``started``:
    the engine's path, the snapshot created, no event), and never one that was stored
    (``announced``). The run then completes once, its step run once, one start stored."""
    t = trio_transport
    service = Service(t)
    wf, task_type, run_id = uid("startkill"), uid("t"), uid("run")
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": task_type}]})
    await _kill_start(nats_url, wf, run_id, NO_KEY, kill_at)
    assert await _listed(service, wf) == ([run_id], [run_id])
    saved = await service.get_run(run_id)
    assert saved.started == (kill_at != STARTED)
    assert (saved.steps["a"].dispatch is None) == (kill_at == STARTED)
    stored = (await _tasks_stored(t, task_type, run_id), await _started_events(t, run_id))
    assert stored == {DISPATCH: (0, 0), TASK: (1, 0), ANNOUNCED: (1, 1), STARTED: (0, 0)}[kill_at]

    # Two sweeps at once (two engines), then one more: the start is published by one of them
    # at most, and stored once.
    reports: list[SweepReport] = []

    async def sweep() -> None:
        reports.append(await StartSweep(t, after_s=0.0).sweep_once())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sweep)
        nursery.start_soon(sweep)
    await sweep()
    published = sum(run_id in r.published for r in reports)
    found_stored = sum(run_id in r.stored for r in reports)
    if kill_at == ANNOUNCED:
        assert (published, found_stored) == (0, 3)
    else:
        # The two at once may both read an empty history (then both publish: one is stored,
        # the other deduplicated by its msg id); the third reads the stored start.
        assert published in (1, 2) and published + found_stored == 3
        assert run_id in reports[-1].stored
    assert await _started_events(t, run_id) == 1
    assert await _tasks_stored(t, task_type, run_id) == stored[0]

    worker = FakeWorker(t, task_type, _complete)
    async with running(test_engine(t), worker):
        snap = await wait_until(
            service, run_id, lambda s: s.status is RunStatus.COMPLETED, RUN_TIMEOUT_S
        )
    assert snap.output == {"ok": run_id}
    want_dispatch = saved.steps["a"].dispatch or snap.steps["a"].dispatch
    assert [(task.run_id, task.dispatch) for task in worker.seen] == [(run_id, want_dispatch)]
    assert await _tasks_stored(t, task_type, run_id) == 0  # purged by the run's end
    assert await _started_events(t, run_id) == 1
    assert await _listed(service, wf) == ([run_id], [])
    print(f"unkeyed start killed at {kill_at}: (tasks, events) stored {stored}; swept {reports}")


async def test_an_index_entry_without_a_snapshot_is_left_listed_nowhere(
    nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    """A start killed before its snapshot left an index entry and a marker: the sweep publishes
    nothing for it (there is no run) and leaves both (a stalled start may still create the run
    where they are: docs/listing.md); listings skip it."""
    t = trio_transport
    service = Service(t)
    wf, task_type, run_id = uid("startkill"), uid("t"), uid("run")
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": task_type}]})
    await _kill_start(nats_url, wf, run_id, NO_KEY, SNAPSHOT)
    sweep = StartSweep(t, after_s=0.0)
    report = await sweep.sweep_once()
    assert run_id in report.no_snapshot and run_id not in report.published
    assert sweep.stats.no_snapshot >= 1
    assert await _indexed(t, run_id) == (True, True)
    assert await _started_events(t, run_id) == 0
    assert await _listed(service, wf) == ([], [])
    # Examined once per process: the next pass reads from past it.
    assert run_id not in (await sweep.sweep_once()).no_snapshot


async def test_the_engine_sweeps_a_start_that_died(
    nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    """The engine runs the sweep itself: a run whose starter died after its snapshot completes
    with no one retrying it, once the run's marker was seen for the bound."""
    t = trio_transport
    service = Service(t)
    wf, task_type, run_id = uid("startkill"), uid("t"), uid("run")
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": task_type}]})
    await _kill_start(nats_url, wf, run_id, NO_KEY, DISPATCH)
    # Started after the kill, so the sweep holds the marker for the bound before it publishes.
    engine = test_engine(t, start_sweep_after_s=SWEEP_AFTER_S, start_sweep_every_s=SWEEP_EVERY_S)
    worker = FakeWorker(t, task_type, _complete)
    async with running(engine, worker):
        snap = await wait_until(
            service, run_id, lambda s: s.status is RunStatus.COMPLETED, RUN_TIMEOUT_S
        )
    assert snap.output == {"ok": run_id}
    assert engine.start_sweep.stats.published >= 1
    assert [task.run_id for task in worker.seen] == [run_id]
    assert await _started_events(t, run_id) == 1


async def test_a_live_start_is_never_published_by_the_sweep(
    trio_transport: TrioNatsTransport,
) -> None:
    """Runs started by a living service (the engine's path and the service's dispatch), with no
    engine running: the sweep finds their starts stored and publishes nothing."""
    t = trio_transport
    service = Service(t)
    wf, task_type = uid("startlive"), uid("t")
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": task_type}]})
    engine_path = await service.start_run(wf, {"n": 1})  # a name this service never read
    dispatched = await service.start_run(wf, {"n": 2})  # read before: the service dispatches
    assert (await service.get_run(dispatched)).started
    assert not (await service.get_run(engine_path)).started
    sweep = StartSweep(t, after_s=0.0)
    report = await sweep.sweep_once()
    assert {engine_path, dispatched} <= set(report.stored)
    assert not {engine_path, dispatched} & set(report.published)
    for run_id in (engine_path, dispatched):
        assert await _started_events(t, run_id) == 1
