"""The service's start path (issue 12 goal 1, session 9 T1): a start of a workflow the service
has read before indexes the run while it reads the definition, so it waits on 3 round trips in
a row instead of 4, and still writes the index before the snapshot and the snapshot before
``workflow.started``. A start refused (the workflow deleted meanwhile) takes its index writes
back; a name never read (a fuzzer's) writes nothing; a start killed between two writes leaves
a run listed exactly when its snapshot exists."""

from __future__ import annotations

import itertools
import json
from typing import Any, cast

import attrs
import pytest

from bench.latency import Step, TimingTransport, waited_in_a_row
from dagnats_trio._env import RuntimeEnv
from dagnats_trio.api import Service, WorkflowNotFound
from dagnats_trio.protocol import decode_run_index_entry, layout
from dagnats_trio.transport import Transport, TrioNatsTransport

from ._fakes import uid

#: A first start's calls that wait on the server, in the order they are made.
START_CALLS = (
    "kv_get workflow_defs",
    "publish_many runindex",
    "kv_create workflow_runs",
    "publish history",
)
#: A later start's: the definition read and the index pair are one call (three requests at once),
#: and the first task goes with ``workflow.started`` (the service dispatched the step itself,
#: ``engine.start_dispatched``: one call, the two sent at once).
READ_AND_INDEX = "kv_get_and_publish_many workflow_defs"
TASK_AND_STARTED = "publish_many task"
EARLY_START_CALLS = (READ_AND_INDEX, "kv_create workflow_runs", TASK_AND_STARTED)
#: Fuzzed starts of names never registered: each reads, none writes.
UNKNOWN_STARTS = 20


def _ended_before(steps: list[Step], first: str, then: str) -> bool:
    ends = [s.end for s in steps if s.kind == first]
    starts = [s.start for s in steps if s.kind == then]
    return bool(ends) and bool(starts) and max(ends) <= min(starts)


def _kinds(steps: list[Step]) -> list[str]:
    return sorted(s.kind for s in steps)


def _ids(prefix: str) -> RuntimeEnv:
    counter = itertools.count()
    return RuntimeEnv(new_id=lambda: f"{prefix}{next(counter)}")


async def _indexed(transport: Transport, run_id: str) -> tuple[bool, bool]:
    """Whether the run has an index entry, and an active marker."""
    entry = await transport.get_last_msg(layout.RUN_INDEX_STREAM, layout.run_index_subject(run_id))
    marker = await transport.get_last_msg(
        layout.RUN_ACTIVE_STREAM, layout.run_active_subject(run_id)
    )
    return entry is not None, marker is not None


async def test_a_start_of_a_workflow_read_before_waits_on_three_round_trips(
    trio_transport: TrioNatsTransport,
) -> None:
    steps: list[Step] = []
    service = Service(cast(Transport, TimingTransport(trio_transport, "client", steps)))
    wf = uid("wf")
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": uid("t")}]})
    chains = []
    for n in range(3):
        steps.clear()
        run = await service.start_run(wf, n)
        t0 = min(s.start for s in steps)
        spans = [(s.kind, round((s.start - t0) * 1e6), round((s.end - t0) * 1e6)) for s in steps]
        print(f"start {n} (kind, start us, end us): {spans}")
        # The same 5 requests on both paths (and the first task after the first start);
        # after the first, the read and the index pair in one call.
        assert _kinds(steps) == sorted(START_CALLS if n == 0 else EARLY_START_CALLS)
        # The index before the snapshot, the definition read before it, then the event (with
        # the task, later: the snapshot holds their dispatch before either is sent).
        befores = START_CALLS[:2] if n == 0 else (READ_AND_INDEX,)
        for before in befores:
            assert _ended_before(steps, before, "kv_create workflow_runs")
        announce = "publish history" if n == 0 else TASK_AND_STARTED
        assert _ended_before(steps, "kv_create workflow_runs", announce)
        chains.append(waited_in_a_row(steps))
        assert (await service.get_run(run)).input == n
    print(f"waited in a row per start: {chains}")
    # The first start reads the name before it writes anything (4 in a row: the read, the index
    # pair, the snapshot, the event); later ones index beside the read: 3 (main: 4, 4, 4).
    assert chains == [4, 3, 3]
    # With an idempotency key the run id is the key's: the key is claimed beside the read, then
    # index, create, publish (main: read, claim, index, create, publish: 5). A name never read
    # reads before it claims: 5.
    steps.clear()
    await service.start_run(wf, "k", idempotency_key=uid("key"))
    assert waited_in_a_row(steps) == 4
    fresh = Service(cast(Transport, TimingTransport(trio_transport, "client", steps)))
    steps.clear()
    await fresh.start_run(wf, "k", idempotency_key=uid("key"))
    assert waited_in_a_row(steps) == 5


async def test_a_refused_start_leaves_no_index_entry(trio_transport: TrioNatsTransport) -> None:
    steps: list[Step] = []
    timed = cast(Transport, TimingTransport(trio_transport, "client", steps))
    prefix = uid("run")
    service = Service(timed, _ids(prefix))
    wf = uid("wf")
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": uid("t")}]})
    kept = await service.start_run(wf)
    assert await _indexed(trio_transport, kept) == (True, True)
    # Deleted after this service read it: the start is refused as before, and the index entry
    # and marker it wrote beside the read are taken back.
    await trio_transport.kv_delete(layout.DEFS_BUCKET, wf)
    steps.clear()
    with pytest.raises(WorkflowNotFound):
        await service.start_run(wf)
    refused = f"{prefix}1"
    assert READ_AND_INDEX in _kinds(steps)
    assert await _indexed(trio_transport, refused) == (False, False)
    # The name is forgotten: a further start reads, is refused, and writes nothing.
    steps.clear()
    with pytest.raises(WorkflowNotFound):
        await service.start_run(wf)
    assert _kinds(steps) == ["kv_get workflow_defs"]
    assert await _indexed(trio_transport, f"{prefix}2") == (False, False)
    # Names never registered (a fuzzer's starts): one read each, no write, no run id drawn.
    steps.clear()
    for _ in range(UNKNOWN_STARTS):
        with pytest.raises(WorkflowNotFound):
            await service.start_run(uid("nowf"))
    assert _kinds(steps) == ["kv_get workflow_defs"] * UNKNOWN_STARTS
    assert await _indexed(trio_transport, kept) == (True, True)  # the run started is still there


@attrs.define
class CrashBefore:
    """Passes every call on until the first call of kind ``kind`` (``"publish history"``...),
    which raises instead of reaching the server: a start killed just before that write."""

    inner: Transport
    kind: str

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in {"publish", "publish_many", "kv_create"}:
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            if name == "publish_many":
                target = args[0][0].subject.split(".", 1)[0]
            else:
                target = str(args[0]).split(".", 1)[0] if name == "publish" else str(args[0])
            if f"{name} {target}" == self.kind:
                raise _Killed(self.kind)
            return await attr(*args, **kwargs)

        return call


class _Killed(Exception):
    pass


@pytest.mark.parametrize(
    ("killed_before", "snapshot_written"),
    [("kv_create workflow_runs", False), (TASK_AND_STARTED, True)],
    ids=["before-create", "before-task-and-started"],
)
async def test_a_start_killed_between_two_writes_is_listed_iff_its_snapshot_exists(
    transport: Transport, killed_before: str, snapshot_written: bool
) -> None:
    prefix = uid("run")
    wf, task = uid("wf"), uid("t")
    reader = Service(transport)
    await reader.register_workflow({"name": wf, "steps": [{"id": "a", "task": task}]})
    crashing = Service(cast(Transport, CrashBefore(transport, killed_before)), _ids(prefix))
    await crashing.get_workflow(wf)  # read before: the start indexes beside its read
    with pytest.raises(_Killed):
        await crashing.start_run(wf)
    run = f"{prefix}0"
    assert await _indexed(transport, run) == (True, True)  # the index goes first
    page = await reader.list_runs(workflow=wf)
    running = await reader.list_runs(workflow=wf, status="running")
    listed = [r.run_id for r in page.runs]
    assert listed == [r.run_id for r in running.runs] == ([run] if snapshot_written else [])
    history = await transport.get_last_msg(layout.HISTORY_STREAM, layout.history_subject(run))
    assert history is None  # never announced: the engine starts nothing
    # Nor a worker (tests/engine/test_start_kills.py: what converges such a run).
    assert await transport.get_last_msg(layout.TASK_STREAM, layout.task_subject(task, run)) is None


async def test_a_start_alone_leaves_the_end_of_the_pass_unwatched(
    trio_transport: TrioNatsTransport,
) -> None:
    """A start's three requests at once (the definition read and the two index publishes) do
    not make the connection busy: the end of every scheduler pass would then be watched (a
    Trio instrument's call per pass, ``nats._outbox``) for the runs that follow, one at a time.
    Seen through a frame nobody waits on, sent ``soon``: at once while nothing is watched, left
    for the end of the pass otherwise."""
    service = Service(trio_transport)
    wf = uid("wf")
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": uid("t")}]})
    left: list[int] = []
    for n in range(3):
        await service.start_run(wf, n)
        trio_transport.core_publish_soon(f"{uid('soon')}", b"")
        left.append(trio_transport.connection.stats().pending_bytes)
    print(f"bytes left for the end of the pass after each start: {left}")
    assert left == [0, 0, 0]  # three in flight made it busy: [0, >0, >0]


async def test_a_definition_stored_under_another_name_is_indexed_under_its_own(
    trio_transport: TrioNatsTransport,
) -> None:
    """The run takes the name its definition holds (as a start of a name never read does); a
    run indexed early under the key's name is indexed again under it, never left listed under
    the other."""
    prefix = uid("run")
    service = Service(trio_transport, _ids(prefix))
    key, other, task = uid("wf"), uid("wf"), uid("t")
    await service.register_workflow({"name": key, "steps": [{"id": "a", "task": task}]})
    await service.get_workflow(key)  # read before: the next start indexes beside its read
    renamed = {"name": other, "steps": [{"id": "a", "task": task}]}
    await trio_transport.kv_put(layout.DEFS_BUCKET, key, json.dumps(renamed).encode())
    run = await service.start_run(key)
    assert run == f"{prefix}0"
    assert (await service.get_run(run)).workflow == other
    assert [r.run_id for r in (await service.list_runs(workflow=other)).runs] == [run]
    assert (await service.list_runs(workflow=key)).runs == ()
    entry = await trio_transport.get_last_msg(
        layout.RUN_INDEX_STREAM, layout.run_index_subject(run)
    )
    assert entry is not None and decode_run_index_entry(entry.data).workflow == other


async def test_a_keyed_start_refused_after_its_claim_is_completed_by_a_retry(
    trio_transport: TrioNatsTransport,
) -> None:
    """A start with an idempotency key of a workflow deleted after this service read it: refused
    as before, its key claimed beside the read (as a crash after the claim leaves it); once the
    workflow is back, a retry with the key completes that very run, and a second retry returns
    it: one run, never two."""
    prefix = uid("run")
    service = Service(trio_transport, _ids(prefix))
    wf, task, key = uid("wf"), uid("t"), uid("key")
    definition = {"name": wf, "steps": [{"id": "a", "task": task}]}
    await service.register_workflow(definition)
    await service.get_workflow(wf)
    await trio_transport.kv_delete(layout.DEFS_BUCKET, wf)
    with pytest.raises(WorkflowNotFound):
        await service.start_run(wf, "x", idempotency_key=key)
    claimed = f"{prefix}0"
    assert await _indexed(trio_transport, claimed) == (False, False)  # nothing but the key
    await service.register_workflow(definition)
    again = Service(trio_transport, _ids(uid("other")))
    assert await again.start_run(wf, "x", idempotency_key=key) == claimed
    assert await again.start_run(wf, "x", idempotency_key=key) == claimed
    assert (await again.get_run(claimed)).input == "x"
    assert await _indexed(trio_transport, claimed) == (True, True)
    assert [r.run_id for r in (await again.list_runs(workflow=wf)).runs] == [claimed]
