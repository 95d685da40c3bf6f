"""``Service.wait_for_run`` sees a run finish even when its watch was lost on the way.

A watch is an ephemeral consumer held by one server; a server restarted (or a cluster node
killed or cut off) takes it along, and nothing tells the watcher. The cluster chaos soak found
it: runs that had completed were waited on until their bound. ``wait_for_run`` now reads the run
again, and opens a new watch, every ``WAIT_FOR_RUN_RESYNC_S``.
"""

from __future__ import annotations

import json

import trio

from dagnats_trio.api import Service
from dagnats_trio.api.service import WAIT_FOR_RUN_RESYNC_S
from dagnats_trio.engine import RunSnapshot
from dagnats_trio.protocol import LifecycleEvent, RunStatus, TaskMessage, layout
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import Transport, TransportError, open_nats_transport, provision

from ._fakes import FakeWorker, complete_with, running, test_engine, uid

#: What the caller gives ``wait_for_run``: far more than the test's own bound.
WAIT_S = 300.0
#: Bound on the test: the restart, the run's end, and one resync interval with room to spare.
TEST_BOUND_S = 20.0 + 3 * WAIT_FOR_RUN_RESYNC_S
POLL_S = 0.05
KV_RUNS_STREAM = "KV_" + layout.RUNS_BUCKET


async def until_watched(t: Transport) -> None:
    """Until the runs bucket has a consumer: the waiter's watch."""
    while True:
        try:
            raw = await t.request(f"$JS.API.STREAM.INFO.{KV_RUNS_STREAM}", b"", timeout_s=2.0)
            if json.loads(raw)["state"].get("consumer_count", 0) >= 1:
                return
        except TransportError:
            pass
        await trio.sleep(POLL_S)


async def until_connected(t: Transport) -> None:
    while True:
        try:
            await t.ping()
            return
        except TransportError:
            await trio.sleep(POLL_S)


async def test_wait_for_run_sees_a_finish_after_its_watch_was_lost(
    fresh_nats_server: NatsServer,
) -> None:
    release = trio.Event()
    held = trio.Event()
    waited: list[RunSnapshot] = []
    finished = trio.Event()

    async def script(task: TaskMessage) -> LifecycleEvent:
        held.set()
        await release.wait()
        return await complete_with(task, "done")

    async with open_nats_transport(fresh_nats_server.url, name="wait-resync") as t:
        await provision(t)
        service = Service(t)
        task_type, workflow = uid("resync"), uid("resync")
        steps = [{"id": "a", "task": task_type}]
        await service.register_workflow({"name": workflow, "steps": steps})

        async def waiter(run_id: str) -> None:
            waited.append(await service.wait_for_run(run_id, WAIT_S))
            finished.set()

        with trio.fail_after(TEST_BOUND_S):
            async with running(test_engine(t), FakeWorker(t, task_type, script)) as nursery:
                run_id = await service.start_run(workflow)
                await held.wait()
                nursery.start_soon(waiter, run_id)
                await until_watched(t)
                # The watch's consumer lives in the server's memory: the restart ends it.
                await fresh_nats_server.restart()
                await until_connected(t)  # the fake worker does not retry its publish
                release.set()
                await finished.wait()
    (snap,) = waited
    assert snap.run_id == run_id
    assert snap.status is RunStatus.COMPLETED and snap.output == "done"
