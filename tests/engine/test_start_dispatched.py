"""A start the service dispatched itself (``engine.start_dispatched``), on a real server and the
simulator: the first snapshot already holds the dispatch, the task and ``workflow.started`` are
published by the start, and the engine, given the event, repeats the task (deduplicated by its
msg id) without deciding again or saving: one task, one dispatch, the run completes once."""

from __future__ import annotations

from typing import Any, cast

import trio

from dagnats_trio.api import Service
from dagnats_trio.engine import SERVICE_START_SEQ, StepStatus, service_start_entry
from dagnats_trio.protocol import (
    LifecycleEvent,
    RunStatus,
    TaskMessage,
    WorkflowStarted,
    decode_event,
    decode_task,
    layout,
)
from dagnats_trio.transport import Transport

from ._fakes import RUN_TIMEOUT_S, FakeWorker, complete_with, running, test_engine, uid


class KvWrites:
    """A transport that records the keys of the KV updates made through it."""

    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self.updates: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != "kv_update":
            return attr

        async def recorded(bucket: str, key: str, *args: Any, **kwargs: Any) -> int:
            self.updates.append(key)
            result: int = await attr(bucket, key, *args, **kwargs)
            return result

        return recorded


async def test_the_engine_settles_a_dispatched_start_without_a_second_dispatch(
    transport: Transport,
) -> None:
    service = Service(transport)
    task_type, wf = uid("t"), uid("wf")
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": task_type}]})
    await service.get_workflow(wf)  # read before: the service dispatches the step
    run = await service.start_run(wf, "x")  # no engine yet

    # What the start left: the dispatch saved first, then its task and the event published.
    snap = await service.get_run(run)
    entry = service_start_entry(snap)
    assert snap.started and snap.steps["a"].status is StepStatus.RUNNING
    assert entry is not None and entry.seq == SERVICE_START_SEQ and len(entry.effects) == 1
    dispatch = snap.steps["a"].dispatch
    tasks = await transport.read_subject(
        layout.TASK_STREAM, layout.task_subject(task_type, run), 1, 8
    )
    assert [decode_task(m.data).dispatch for m in tasks] == [dispatch]
    (started,) = [
        decode_event(m.data)
        for m in await transport.read_subject(
            layout.HISTORY_STREAM, layout.history_subject(run), 1, 8
        )
    ]
    # No undispatched snapshot named (an engine deciding the start on one would dispatch
    # twice): the dispatched one, its revision and the id its decision drew, for the engine to
    # rebuild it (engine._store.started_with).
    assert isinstance(started, WorkflowStarted) and started.snapshot_revision is None
    revision = (await transport.kv_get(layout.RUNS_BUCKET, layout.run_key(run))).revision  # type: ignore[union-attr]
    assert started.dispatched is not None and dispatch is not None
    assert started.dispatched.snapshot_revision == revision
    assert started.dispatched.nonces == (dispatch.nonce,)

    taken, release = trio.Event(), trio.Event()

    async def held(t: TaskMessage) -> LifecycleEvent:
        taken.set()
        await release.wait()
        return await complete_with(t, f"{t.step_id}:{t.input}")

    writes = KvWrites(transport)
    engine = test_engine(cast(Transport, writes))
    worker = FakeWorker(transport, task_type, held)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, worker):
            # The engine takes the start: the task repeated (stored once), nothing saved.
            await engine.wait_stats(lambda s: s.replayed >= 1)
            assert engine.stats.derived >= 1
            await taken.wait()
            again = await transport.read_subject(
                layout.TASK_STREAM, layout.task_subject(task_type, run), 1, 8
            )
            assert [m.seq for m in again] == [m.seq for m in tasks]
            current = await transport.kv_get(layout.RUNS_BUCKET, layout.run_key(run))
            assert current is not None and current.revision == revision
            assert layout.run_key(run) not in writes.updates
            release.set()
            done = await service.wait_for_run(run, RUN_TIMEOUT_S)
    assert done.status is RunStatus.COMPLETED and done.output == "a:x"
    assert [(t.run_id, t.dispatch) for t in worker.seen] == [(run, dispatch)]
    # The step's completion was the run's first save by the engine, decided on the copy it
    # kept from the start (no read): one compare-and-set, on the service's revision.
    assert writes.updates.count(layout.run_key(run)) == 1
