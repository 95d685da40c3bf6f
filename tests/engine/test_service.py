"""The service layer on a real server: workflows, runs, idempotency, signals, typed errors."""

from __future__ import annotations

import pytest
import trio

from dagnats_trio.api import (
    InvalidRequest,
    RunNotFound,
    RunWaitTimeout,
    Service,
    WorkflowNotFound,
)
from dagnats_trio.dag import WorkflowInvalid
from dagnats_trio.engine import StepStatus
from dagnats_trio.protocol import (
    DecodeError,
    InvalidId,
    RunStatus,
    SignalSent,
    decode_event,
    decode_run_header,
    is_id,
    layout,
)
from dagnats_trio.transport import NatsTransport

from ._fakes import uid


async def test_register_get_list_workflows(nats_transport: NatsTransport) -> None:
    service = Service(nats_transport)
    name = uid("wf")
    step = f'{{"id": "a", "task": "{uid("t")}", "timeout": "5s"}}'
    d = await service.register_workflow(f'{{"name": "{name}", "version": 2, "steps": [{step}]}}')
    assert d.version == 2 and d.step("a").timeout == 5_000
    assert await service.get_workflow(name) == d
    assert name in {w.name for w in await service.list_workflows()}
    with pytest.raises(WorkflowNotFound):
        await service.get_workflow(uid("missing"))
    with pytest.raises(InvalidId) as bad:
        await service.get_workflow("not a token")
    assert bad.value.field == "name"
    with pytest.raises(InvalidId) as bad:
        await service.start_run("noop\n")
    assert bad.value.field == "workflow"
    with pytest.raises(WorkflowInvalid) as info:
        await service.register_workflow(
            {
                "name": name,
                "steps": [
                    {"id": "a", "task": "x", "depends_on": ["zz"]},
                    {"id": "b", "task": "x", "timeout": "soon"},
                ],
            }
        )
    assert {(p.step, p.field) for p in info.value.problems} == {
        ("a", "depends_on"),
        ("b", "timeout"),
    }
    # The bad definition did not replace the good one.
    assert await service.get_workflow(name) == d


async def test_start_run_records_snapshot_and_history(nats_transport: NatsTransport) -> None:
    service = Service(nats_transport)
    name = uid("wf")
    await service.register_workflow({"name": name, "steps": [{"id": "a", "task": uid("t")}]})
    run = await service.start_run(name, {"k": "v"})
    assert is_id(run)
    snap = await service.get_run(run)
    assert snap.run_id == run and snap.workflow == name and snap.input == {"k": "v"}
    assert snap.status is RunStatus.RUNNING and not snap.started
    assert snap.steps["a"].status is StepStatus.PENDING
    entry = await nats_transport.kv_get(layout.RUNS_BUCKET, layout.run_key(run))
    assert entry is not None and entry.value is not None
    assert decode_run_header(entry.value).status is RunStatus.RUNNING
    last = await nats_transport.get_last_msg(layout.HISTORY_STREAM, layout.history_subject(run))
    assert last is not None and decode_event(last.data).TYPE == "workflow.started"
    with pytest.raises(WorkflowNotFound):
        await service.start_run(uid("nope"))
    with pytest.raises(RunNotFound):
        await service.get_run(uid("nope"))
    with pytest.raises(InvalidId) as bad:
        await service.get_run("bad.id")
    assert bad.value.field == "run_id"


async def test_idempotency_key_returns_the_same_run(nats_transport: NatsTransport) -> None:
    service = Service(nats_transport)
    name = uid("wf")
    await service.register_workflow({"name": name, "steps": [{"id": "a", "task": uid("t")}]})
    key = f"order {uid('k')} / with spaces"
    first = await service.start_run(name, 1, idempotency_key=key)
    again = await service.start_run(name, 2, idempotency_key=key)
    other = await service.start_run(name, 1, idempotency_key=key + "-other")
    plain1, plain2 = await service.start_run(name), await service.start_run(name)
    assert first == again
    assert len({first, other, plain1, plain2}) == 4
    assert (await service.get_run(first)).input == 1
    with pytest.raises(InvalidRequest):
        await service.start_run(name, idempotency_key="")


async def test_list_runs_filters_and_pages(nats_transport: NatsTransport) -> None:
    service = Service(nats_transport)
    name = uid("wf")
    await service.register_workflow({"name": name, "steps": [{"id": "a", "task": uid("t")}]})
    runs = [await service.start_run(name, n) for n in range(5)]
    page = await service.list_runs(workflow=name, limit=1000)
    assert [r.run_id for r in page.runs] == runs[::-1]  # newest first
    assert all(r.status is RunStatus.RUNNING for r in page.runs)
    assert (await service.list_runs(workflow=name, status="completed", limit=1000)).runs == ()
    seen: list[str] = []
    cursor = None
    while True:
        page = await service.list_runs(workflow=name, limit=2, cursor=cursor)
        seen.extend(r.run_id for r in page.runs)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == runs[::-1]
    with pytest.raises(InvalidRequest):
        await service.list_runs(status="sleeping")
    with pytest.raises(InvalidRequest):
        await service.list_runs(limit=0)


async def test_signal_is_stored_and_recorded(nats_transport: NatsTransport) -> None:
    service = Service(nats_transport)
    name = uid("wf")
    await service.register_workflow({"name": name, "steps": [{"id": "a", "task": uid("t")}]})
    run = await service.start_run(name)
    await service.send_signal(run, "approve", {"by": "ann"})
    assert await service.get_signal(run, "approve") == {"by": "ann"}
    assert await service.get_signal(run, "other") is None
    last = await nats_transport.get_last_msg(layout.HISTORY_STREAM, layout.history_subject(run))
    assert last is not None and decode_event(last.data) == SignalSent(run, "approve", {"by": "ann"})
    with pytest.raises(InvalidId) as bad:
        await service.send_signal(run, "bad name", None)
    assert bad.value.field == "name"
    with pytest.raises(RunNotFound):
        await service.send_signal(uid("ghost"), "approve", None)


async def test_wait_for_run_is_bounded(nats_transport: NatsTransport) -> None:
    service = Service(nats_transport)
    name = uid("wf")
    await service.register_workflow({"name": name, "steps": [{"id": "a", "task": uid("t")}]})
    run = await service.start_run(name)  # no engine runs in this test: it never finishes
    with trio.fail_after(5):
        with pytest.raises(RunWaitTimeout):
            await service.wait_for_run(run, 0.3)
    with pytest.raises(InvalidRequest):
        await service.wait_for_run(run, 0)
    with pytest.raises(RunNotFound):
        await service.wait_for_run(uid("ghost"), 1)


#: Decodes of a stored definition by starts of runs of it (issue 12 goal 3): one per start
#: (and per read) while each read decoded the bytes it got; one per stored version since the
#: service keeps the definition decoded with its bytes (``protocol.DecodedByBytes``).
STARTS_OF_ONE_VERSION = 3


async def test_starts_decode_each_stored_definition_once(nats_transport: NatsTransport) -> None:
    service = Service(nats_transport)
    name, task = uid("wf"), uid("t")
    first = await service.register_workflow({"name": name, "steps": [{"id": "a", "task": task}]})
    runs = [await service.start_run(name, {"n": n}) for n in range(STARTS_OF_ONE_VERSION)]
    got = await service.get_workflow(name)
    assert got == first and got is await service.get_workflow(name)  # frozen: shared
    assert service.definitions.decodes == 1
    for n, run in enumerate(runs):
        snap = await service.get_run(run)
        # Dispatched by the service once it has read the workflow (engine.start_dispatched).
        status = StepStatus.PENDING if n == 0 else StepStatus.RUNNING
        assert snap.definition == first and snap.steps["a"].status is status

    # A new version is read as soon as it is stored: other bytes, decoded again.
    steps = [{"id": "b", "task": task}]
    second = await service.register_workflow({"name": name, "version": 2, "steps": steps})
    run = await service.start_run(name)
    assert service.definitions.decodes == 2
    snap = await service.get_run(run)
    assert snap.definition == second and list(snap.steps) == ["b"]
    # Bytes that are no definition are still refused at every read, and nothing is kept.
    await nats_transport.kv_put(layout.DEFS_BUCKET, name, b'{"name": 5}')
    for _ in range(2):
        with pytest.raises(DecodeError, match="not a valid workflow definition"):
            await service.start_run(name)
    assert service.definitions.decodes == 4
    await nats_transport.kv_delete(layout.DEFS_BUCKET, name)
    with pytest.raises(WorkflowNotFound):
        await service.start_run(name)
