"""Listing runs from the run index (issue 12 item 4, issue 13, issue 14 item 2), on a
nats-server of each test's own (the session server holds other tests' runs): newest first across
pages while runs start, the status and workflow filters through the engine's index updates, a
crash between a snapshot write and an index write, purge, and a store from before the index."""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import pytest
import trio

from dagnats_trio.api import InvalidRequest, Service
from dagnats_trio.engine import (
    create_snapshot,
    encode_snapshot,
    ensure_run_index,
    index_run,
    new_run_snapshot,
)
from dagnats_trio.protocol import RunStatus, TaskMessage, WorkflowStarted, layout
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import Transport, open_trio_nats_transport, provision

from ._fakes import RUN_TIMEOUT_S, FakeWorker, complete_with, running, test_engine, uid


@pytest.fixture
async def own(fresh_nats_server: NatsServer) -> AsyncIterator[Transport]:
    async with open_trio_nats_transport(fresh_nats_server.url, name="run-list") as t:
        await provision(t)
        yield t


async def _register(service: Service, name: str, task: str) -> None:
    await service.register_workflow({"name": name, "steps": [{"id": "a", "task": task}]})


async def _all_pages(service: Service, limit: int, **filters: str) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = await service.list_runs(limit=limit, cursor=cursor, **filters)
        assert len(page.runs) <= limit
        seen += [r.run_id for r in page.runs]
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


async def test_newest_first_across_pages_while_runs_start(own: Transport) -> None:
    service = Service(own)
    wf = uid("wf")
    await _register(service, wf, uid("t"))
    older = [await service.start_run(wf, n) for n in range(7)]
    first = await service.list_runs(limit=3)
    assert [r.run_id for r in first.runs] == older[:-4:-1]
    assert first.next_cursor is not None
    newer = [await service.start_run(wf, n) for n in range(2)]  # started while paging
    seen = [r.run_id for r in first.runs]
    cursor: str | None = first.next_cursor
    while cursor is not None:
        page = await service.list_runs(limit=3, cursor=cursor)
        seen += [r.run_id for r in page.runs]
        cursor = page.next_cursor
    assert seen == older[::-1]  # no duplicates, no gaps, none of the newer ones
    assert await _all_pages(service, 4) == (older + newer)[::-1]
    assert [r.run_id for r in (await service.list_runs(limit=1)).runs] == [newer[-1]]
    with pytest.raises(InvalidRequest, match="cursor"):
        await service.list_runs(cursor="zz")
    with pytest.raises(InvalidRequest, match="cursor"):
        await service.list_runs(status="running", cursor=first.next_cursor)


async def test_status_and_workflow_filters_follow_the_engine(own: Transport) -> None:
    service = Service(own)
    done_task, stuck_task = uid("done"), uid("stuck")
    done_wf, stuck_wf = uid("wf-done"), uid("wf-stuck")
    await _register(service, done_wf, done_task)
    await _register(service, stuck_wf, stuck_task)

    async def complete(t: TaskMessage) -> object:
        return await complete_with(t, "ok")

    engine = test_engine(own)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, FakeWorker(own, done_task, complete)):
            done = [await service.start_run(done_wf) for _ in range(3)]
            stuck = [await service.start_run(stuck_wf) for _ in range(4)]
            for run in done:
                assert (await service.wait_for_run(run, RUN_TIMEOUT_S)).status.finished
            await service.cancel_run(stuck[1])
            await service.wait_for_run(stuck[1], RUN_TIMEOUT_S)
    alive = [stuck[3], stuck[2], stuck[0]]
    assert await _all_pages(service, 2, status="running") == alive
    assert await _all_pages(service, 2, status="running", workflow=stuck_wf) == alive
    assert await _all_pages(service, 2, status="running", workflow=done_wf) == []
    assert await _all_pages(service, 2, status="completed") == done[::-1]
    assert await _all_pages(service, 2, status="cancelled") == [stuck[1]]
    assert await _all_pages(service, 1, workflow=done_wf) == done[::-1]
    assert await _all_pages(service, 10) == (done + stuck)[::-1]
    # The engine removed the markers of the runs it finished; the running ones keep theirs.
    for run in [*done, stuck[1]]:
        marker = layout.run_active_subject(run)
        assert await own.get_last_msg(layout.RUN_ACTIVE_STREAM, marker) is None
    for run in alive:
        assert await own.get_last_msg(layout.RUN_ACTIVE_STREAM, layout.run_active_subject(run))


async def test_a_crash_between_snapshot_and_index_writes_converges(own: Transport) -> None:
    service = Service(own)
    wf = uid("wf")
    await _register(service, wf, uid("t"))
    definition = await service.get_workflow(wf)
    # Crash after the index entry and marker, before the snapshot: listed nowhere (the
    # snapshot is the truth); a retried start puts the run where its entry already is.
    lost = WorkflowStarted(run_id=uid("lost"), workflow=wf, started_at_ms=1)
    half = new_run_snapshot(lost, definition, 1)
    await index_run(own, half)
    later = await service.start_run(wf)
    assert await _all_pages(service, 5) == [later]
    assert await _all_pages(service, 5, status="running") == [later]
    await create_snapshot(own, half)
    assert await _all_pages(service, 5) == [later, lost.run_id]
    # Crash after saving a finished snapshot, before its marker was removed: the run is not
    # listed as running, and the listing that met the stale marker removed it.
    finished = attrs.evolve(half, status=RunStatus.COMPLETED)
    entry = await own.kv_get(layout.RUNS_BUCKET, layout.run_key(lost.run_id))
    assert entry is not None
    await own.kv_update(
        layout.RUNS_BUCKET, layout.run_key(lost.run_id), encode_snapshot(finished), entry.revision
    )
    marker = layout.run_active_subject(lost.run_id)
    assert await own.get_last_msg(layout.RUN_ACTIVE_STREAM, marker) is not None
    assert await _all_pages(service, 5, status="running") == [later]
    assert await own.get_last_msg(layout.RUN_ACTIVE_STREAM, marker) is None
    assert await _all_pages(service, 5, status="completed") == [lost.run_id]


async def test_purge_removes_the_run_from_the_index(own: Transport) -> None:
    service = Service(own)
    wf, task = uid("wf"), uid("t")
    await _register(service, wf, task)

    async def complete(t: TaskMessage) -> object:
        return await complete_with(t, "ok")

    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(test_engine(own), FakeWorker(own, task, complete)):
            runs = [await service.start_run(wf) for _ in range(3)]
            for run in runs:
                await service.wait_for_run(run, RUN_TIMEOUT_S)
    assert await service.purge_run(runs[1]) == (runs[1],)
    assert await _all_pages(service, 1) == [runs[2], runs[0]]
    subject = layout.run_index_subject(runs[1])
    assert await own.get_last_msg(layout.RUN_INDEX_STREAM, subject) is None


async def test_a_store_from_before_the_index_still_lists(own: Transport) -> None:
    service = Service(own)
    wf = uid("wf")
    await _register(service, wf, uid("t"))
    definition = await service.get_workflow(wf)
    # Snapshots written the old way (no index), in an order unlike their start times.
    created = {uid("old"): at for at in (3_000, 1_000, 2_000, 5_000, 4_000)}
    for run_id, at in created.items():
        snap = new_run_snapshot(WorkflowStarted(run_id=run_id, workflow=wf), definition, at)
        await own.kv_create(layout.RUNS_BUCKET, layout.run_key(run_id), encode_snapshot(snap))
    oldest_first = sorted(created, key=created.__getitem__)
    # The first listing indexes them (a host does it at start, before it serves).
    assert await _all_pages(service, 2) == oldest_first[::-1]
    newest = await service.start_run(wf)
    assert await _all_pages(service, 2) == [newest, *oldest_first[::-1]]
    assert await _all_pages(service, 4, status="running") == [newest, *oldest_first[::-1]]
    # Done once: the key says so, and a second pass indexes nothing.
    assert await own.kv_get(layout.RUNS_BUCKET, layout.RUN_INDEX_COMPLETE_KEY) is not None
    assert await ensure_run_index(own) == 0
