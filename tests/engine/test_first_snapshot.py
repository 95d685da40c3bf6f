"""A started run's first snapshot is derived from its ``workflow.started``, not read back
(issue 12: one waited round trip fewer per run), and only when that is exactly what is stored:
a definition registered again since the start, or a run that moved on, is read as before."""

from __future__ import annotations

from typing import Any, cast

import pytest
import trio

from dagnats_trio.api import Service
from dagnats_trio.protocol import (
    LifecycleEvent,
    RunStatus,
    TaskMessage,
    WorkflowStarted,
    decode_event,
    layout,
)
from dagnats_trio.transport import KvEntry, Transport

from ._fakes import RUN_TIMEOUT_S, FakeWorker, complete_with, running, test_engine, uid


@pytest.fixture(params=["own_nats", "sim"])
def transport(request: pytest.FixtureRequest) -> Transport:
    """The suite's ``transport``, with the real server one of the test's own: these tests count
    what the engine derives or meets in conflict, which on the session server would include the
    events earlier tests left on the engine's durable consumer."""
    value: Transport = request.getfixturevalue(f"{request.param}_transport")
    return value


class KvGets:
    """A transport that records each ``kv_get`` made through it and passes every call on."""

    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self.gets: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != "kv_get":
            return attr

        async def recorded(bucket: str, key: str) -> KvEntry | None:
            self.gets.append((bucket, key))
            result: KvEntry | None = await attr(bucket, key)
            return result

        return recorded


async def _echo(t: TaskMessage) -> LifecycleEvent:
    return await complete_with(t, f"{t.step_id}:{t.input}")


async def test_a_started_run_is_dispatched_without_reading_its_snapshot(
    transport: Transport,
) -> None:
    service = Service(transport)
    task, wf = uid("t"), uid("wf")
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": task}]})
    recorder = KvGets(transport)
    engine = test_engine(cast(Transport, recorder))
    worker = FakeWorker(transport, task, _echo)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, worker):
            first = await service.start_run(wf, "one")
            s1 = await service.wait_for_run(first, RUN_TIMEOUT_S)
            gets_first = list(recorder.gets)
            second = await service.start_run(wf, "two")
            s2 = await service.wait_for_run(second, RUN_TIMEOUT_S)
    assert s1.status is RunStatus.COMPLETED and s1.output == "a:one"
    assert s2.status is RunStatus.COMPLETED and s2.output == "a:two"
    # Each run dispatched once: the second's start, decided by the service, is not decided
    # again by the engine (which it would be on a snapshot derived as undispatched).
    assert [t.run_id for t in worker.seen] == [first, second]
    # The first start (the service's first of the workflow: the engine dispatches) reads the
    # definition once (then kept by its revision), no snapshot. The second was dispatched by
    # the service (engine.start_dispatched): its snapshot, the dispatch in it, is derived from
    # the event too (the ids its decision drew), and its outbox's task repeated: no read
    # either. (The shared history consumer may hand this engine an earlier test's leftover
    # event: only this test's keys are looked at.)
    ours = {
        (layout.DEFS_BUCKET, wf),
        (layout.RUNS_BUCKET, layout.run_key(first)),
        (layout.RUNS_BUCKET, layout.run_key(second)),
    }
    assert [g for g in gets_first if g in ours] == [(layout.DEFS_BUCKET, wf)]
    assert [g for g in recorder.gets if g in ours] == [(layout.DEFS_BUCKET, wf)]
    assert engine.stats.derived >= 2


@pytest.mark.parametrize("dispatched", [False, True])
async def test_a_definition_registered_again_since_the_start_is_not_derived(
    transport: Transport, dispatched: bool
) -> None:
    service = Service(transport)
    task, wf = uid("t"), uid("wf")
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": task}]})
    if dispatched:  # read before: the service dispatches the start (engine.start_dispatched)
        await service.get_workflow(wf)
    run = await service.start_run(wf, "x")  # no engine yet: the event waits
    await service.register_workflow({"name": wf, "steps": [{"id": "b", "task": task}]})
    recorder = KvGets(transport)
    engine = test_engine(cast(Transport, recorder))
    worker = FakeWorker(transport, task, _echo)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, worker):
            snap = await service.wait_for_run(run, RUN_TIMEOUT_S)
    # The run keeps the definition it was started with (step a), read from its snapshot.
    assert snap.status is RunStatus.COMPLETED and snap.output == "a:x"
    assert set(snap.steps) == {"a"}
    assert [t.step_id for t in worker.seen] == ["a"]
    assert engine.stats.derived == 0
    assert (layout.RUNS_BUCKET, layout.run_key(run)) in recorder.gets


async def test_a_start_delivered_again_after_the_run_moved_on_is_dropped(
    transport: Transport,
) -> None:
    service = Service(transport)
    task, wf = uid("t"), uid("wf")
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": task}]})
    engine = test_engine(transport)
    worker = FakeWorker(transport, task, _echo)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, worker):
            run = await service.start_run(wf, "x")
            done = await service.wait_for_run(run, RUN_TIMEOUT_S)
            (started_msg,) = [
                m
                for m in await transport.read_subject(
                    layout.HISTORY_STREAM, layout.history_subject(run), 1, 16
                )
                if isinstance(decode_event(m.data), WorkflowStarted)
            ]
            started = decode_event(started_msg.data)
            assert isinstance(started, WorkflowStarted)
            assert started.snapshot_revision is not None
            assert started.definition_revision is not None
            # The same start again (another msg id): derived at a revision long gone, so the
            # compare-and-set fails, the snapshot is read, and the start is dropped.
            dropped = engine.stats.dropped
            await transport.publish(layout.history_subject(run), started_msg.data)
            await engine.wait_stats(lambda s: s.dropped > dropped)
    assert engine.stats.conflicts == 1
    after = await service.get_run(run)
    assert after.status is RunStatus.COMPLETED and after.output == done.output == "a:x"
    assert [t.step_id for t in worker.seen] == ["a"]  # dispatched once
