"""A start the service dispatched itself (``engine.start_dispatched``) names what the engine
cannot recompute (``WorkflowStarted.dispatched``: the snapshot's revision, the ids its decision
drew), so the engine rebuilds that first snapshot instead of reading it (issue 12: one waited
round trip fewer per run). What it rebuilds must be exactly what the service stored, and
nothing it is given may make it decide the start a second time."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

from dagnats_trio.api import Service
from dagnats_trio.dag import WorkflowDef, parse_workflow
from dagnats_trio.engine import (
    AdvanceContext,
    RunSnapshot,
    advance,
    decode_snapshot,
    encode_snapshot,
    first_dispatch,
    first_dispatch_again,
)
from dagnats_trio.engine._store import first_snapshot, started_with
from dagnats_trio.protocol import (
    CancelRequested,
    RunStatus,
    StartDispatch,
    TaskMessage,
    WorkflowStarted,
    decode_event,
    decode_task,
    encode_event,
    from_json,
    layout,
)
from dagnats_trio.transport import Transport

from ._fakes import RUN_TIMEOUT_S, FakeWorker, complete_with, running, test_engine, uid


def _definition(name: str, task: str) -> dict[str, Any]:
    """Two steps dispatched at the start (two ids drawn), a third after both."""
    return {
        "name": name,
        "steps": [
            {"id": "a", "task": task},
            {"id": "b", "task": task},
            {"id": "c", "task": task, "depends_on": ["a", "b"]},
        ],
    }


async def _dispatched_start(
    transport: Transport, service: Service, wf: str, key: str | None
) -> tuple[str, WorkflowStarted]:
    await service.get_workflow(wf)  # read before: the service dispatches the start itself
    run = await service.start_run(wf, {"text": "é ✓", "n": [1, 2.5, None, True]}, key)
    (msg,) = await transport.read_subject(layout.HISTORY_STREAM, layout.history_subject(run), 1, 8)
    event = decode_event(msg.data)
    assert isinstance(event, WorkflowStarted)
    return run, event


@pytest.mark.parametrize("key", [None, "idem-derived"])
async def test_the_derived_snapshot_is_the_stored_one(
    nats_transport: Transport, key: str | None
) -> None:
    transport = nats_transport
    service = Service(transport)
    task, wf = uid("t"), uid("wf")
    await service.register_workflow(_definition(wf, task))
    run, event = await _dispatched_start(transport, service, wf, key and uid(key))

    stored = await transport.kv_get(layout.RUNS_BUCKET, layout.run_key(run))
    definition = await transport.kv_get(layout.DEFS_BUCKET, wf)
    assert stored is not None and stored.value is not None
    assert definition is not None and definition.value is not None
    # The event names the dispatched snapshot in its own field, never as an undispatched one.
    assert event.snapshot_revision is None
    assert event.definition_revision == definition.revision
    assert event.dispatched is not None
    assert event.dispatched.snapshot_revision == stored.revision
    assert len(event.dispatched.nonces) == 2

    derived = started_with(event, from_json(definition.value, WorkflowDef, "definition"))
    assert derived is not None
    snapshot, revision = derived
    assert revision == stored.revision
    assert decode_snapshot(stored.value) == snapshot  # the same fields...
    assert encode_snapshot(snapshot) == stored.value  # ...and the same bytes
    assert snapshot.started and snapshot.steps["c"].dispatch is None
    nonces = {s.dispatch.nonce for s in snapshot.steps.values() if s.dispatch is not None}
    assert nonces == set(event.dispatched.nonces)


def _event_and_definition() -> tuple[WorkflowStarted, WorkflowDef, RunSnapshot]:
    definition = parse_workflow(_definition("wf", "t"))
    ids = iter(["n1", "n2", "n3"])
    plain = WorkflowStarted("r1", "wf", input=[1], started_at_ms=1_000, definition_revision=4)
    out = first_dispatch(plain, definition, lambda: next(ids))
    assert out is not None and out.snapshot is not None
    event = attrs.evolve(plain, dispatched=StartDispatch(9, ("n1", "n2")))
    return event, definition, out.snapshot


def test_the_dispatch_is_made_again_only_from_exactly_the_ids_drawn() -> None:
    event, definition, made = _event_and_definition()
    assert first_dispatch_again(event, definition) == made
    assert started_with(event, definition) == (made, 9)
    assert event.dispatched is not None
    for nonces in [(), ("n1",), ("n1", "n2", "n3")]:  # fewer or more than the decision draws
        other = attrs.evolve(event, dispatched=StartDispatch(9, nonces))
        assert first_dispatch_again(other, definition) is None
        assert started_with(other, definition) is None
    # Other ids are another decision's (its snapshot is not the stored one).
    swapped = attrs.evolve(event, dispatched=StartDispatch(9, ("n2", "n1")))
    assert started_with(swapped, definition) != (made, 9)


def test_a_dispatched_start_is_never_derived_as_an_undispatched_one() -> None:
    event, definition, made = _event_and_definition()
    # Both kinds named (no service of ours publishes that): nothing is derived.
    both = attrs.evolve(event, snapshot_revision=9)
    assert started_with(both, definition) is None
    # An engine from before the field ignores it (unknown keys are skipped by the converter):
    # it sees no snapshot revision, so it derives nothing and reads the stored snapshot, which
    # holds the dispatch; it never decides the start on an undispatched first snapshot.
    old_view = attrs.evolve(event, dispatched=None)
    assert decode_event(encode_event(event).replace(b'"dispatched"', b'"unknown"')) == old_view
    assert started_with(old_view, definition) is None
    assert (
        first_snapshot(event, definition) != made and not first_snapshot(event, definition).started
    )
    # No definition revision named: nothing is derived either.
    assert started_with(attrs.evolve(event, definition_revision=None), definition) is None


async def test_a_derived_copy_of_a_run_that_moved_on_is_never_saved_over_it(
    own_nats_transport: Transport,
) -> None:
    """The derived copy is the snapshot at the event's revision: a run moved on since (here a
    cancel saved before any engine saw the start) has a later revision. The start's tasks are
    repeated (duplicates, stored once) and the copy kept; the run's next event, decided on it,
    fails its compare-and-set, is decided again on the store's snapshot, and is dropped."""
    transport = own_nats_transport  # it counts what the engine applied: a server of its own
    service = Service(transport)
    task, wf = uid("t"), uid("wf")
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": task}]})
    run, event = await _dispatched_start(transport, service, wf, None)
    assert event.dispatched is not None
    tasks = await transport.read_subject(layout.TASK_STREAM, layout.task_subject(task, run), 1, 8)
    # Another engine's save: the run cancelled at the next revision.
    stored = await transport.kv_get(layout.RUNS_BUCKET, layout.run_key(run))
    assert stored is not None and stored.value is not None
    ctx = AdvanceContext(now_ms=event.started_at_ms + 1, new_id=lambda: "unused", seq=7)
    moved, _ = advance(decode_snapshot(stored.value), CancelRequested(run, "moved on"), ctx)
    assert moved is not None and moved.status is RunStatus.CANCELLED
    await transport.kv_update(
        layout.RUNS_BUCKET, layout.run_key(run), encode_snapshot(moved), stored.revision
    )

    worker_took = trio.Event()

    async def done(t: TaskMessage) -> Any:
        worker_took.set()
        return await complete_with(t, "late")

    engine = test_engine(transport)
    worker = FakeWorker(transport, task, done)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, worker):
            await worker_took.wait()
            await engine.wait_stats(lambda s: s.conflicts >= 1 and s.dropped >= 1)
    again = await transport.read_subject(layout.TASK_STREAM, layout.task_subject(task, run), 1, 8)
    assert [m.seq for m in again] == [m.seq for m in tasks]
    assert [decode_task(m.data).run_id for m in again] == [run]
    after = await service.get_run(run)
    assert after.status is RunStatus.CANCELLED and after.output is None
    assert engine.stats.derived >= 1 and engine.stats.applied == 0
