"""An engine process SIGKILLed on this session's paths, on a real nats-server of the test's own:
just before the first save that names the run's definition by reference (stored just before,
``engine._definition_refs``), and at the first removal of a finished run's end, which the
run-end task makes after the history loop handed it off (``engine._run_ends``; the run's last
event may be acked by then, so nothing redelivers it).

A new engine takes over: the run completes, its step ran once, it is listed and not as running
(the stale active marker a lost run end leaves is removed by the listing that meets it), its
definition resolves for a reader that never saw it, and a run started next completes.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest
import trio

from dagnats_trio.api import Service
from dagnats_trio.protocol import RunStatus, TaskMessage, layout
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import Transport, open_nats_transport, provision

from ._engine_victim import KV_UPDATE, PURGE_SUBJECTS, READY_LINE
from ._fakes import RUN_TIMEOUT_S, FakeWorker, complete_with, running, test_engine, uid, wait_until

VICTIM: Final = Path(__file__).with_name("_engine_victim.py")
#: Bound on the engine process starting (a Python start on a loaded machine), and on its death.
PROCESS_START_S: Final = 60.0


async def _read_ready(proc: trio.Process) -> None:
    assert proc.stdout is not None
    seen = b""
    while READY_LINE.encode() not in seen:
        chunk = await proc.stdout.receive_some()
        assert chunk, f"the engine process exited before it was ready: {seen!r}"
        seen += chunk


async def _marker(transport: Transport, run_id: str) -> object:
    return await transport.get_last_msg(layout.RUN_ACTIVE_STREAM, layout.run_active_subject(run_id))


async def _complete(task: TaskMessage) -> object:
    return await complete_with(task, {"ok": task.run_id})


@pytest.mark.parametrize("kill_at", [KV_UPDATE, PURGE_SUBJECTS])
async def test_an_engine_killed_on_a_new_path_loses_no_run(
    kill_at: str, fresh_nats_server: NatsServer
) -> None:
    url = fresh_nats_server.url
    async with open_nats_transport(url, name="engine-kills") as t:
        await provision(t)
        service = Service(t)
        wf, task_type = uid("kills"), uid("t")
        await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": task_type}]})
        definition = await service.get_workflow(wf)
        worker = FakeWorker(t, task_type, _complete)
        async with trio.open_nursery() as nursery:
            argv = [sys.executable, str(VICTIM), url, kill_at]
            process = functools.partial(trio.run_process, argv, stdout=subprocess.PIPE, check=False)
            proc: trio.Process = await nursery.start(process)
            try:
                with trio.fail_after(PROCESS_START_S):
                    await _read_ready(proc)
                async with running(worker):
                    run_id = await service.start_run(wf, {"n": 1})
                    with trio.fail_after(PROCESS_START_S):
                        code = await proc.wait()
            finally:
                if proc.returncode is None:
                    proc.kill()
        assert code == -9, code
        before = await service.get_run(run_id)
        marker_after_kill = await _marker(t, run_id)

        async with running(test_engine(t), worker):
            done = await wait_until(
                service, run_id, lambda s: s.status is RunStatus.COMPLETED, RUN_TIMEOUT_S
            )
            listed = [r.run_id for r in (await service.list_runs(workflow=wf)).runs]
            running_ = [
                r.run_id for r in (await service.list_runs(workflow=wf, status="running")).runs
            ]
            next_run = await service.start_run(wf, {"n": 2})
            await wait_until(
                service, next_run, lambda s: s.status is RunStatus.COMPLETED, RUN_TIMEOUT_S
            )
        cold = await Service(t).get_run(run_id)  # a reader that never saw the definition
        marker_after_listing = await _marker(t, run_id)

    ran = [task.run_id for task in worker.seen]
    print(
        f"killed at {kill_at}: run {before.status.value} after the kill, "
        f"{done.status.value} after the takeover; marker after the kill "
        f"{marker_after_kill is not None}, after the listing {marker_after_listing is not None}; "
        f"step runs {ran.count(run_id)}; definition ref {cold.definition_ref}"
    )
    assert done.output == {"ok": run_id}, done.output
    assert ran.count(run_id) == 1 and ran.count(next_run) == 1, ran
    assert listed == [run_id] and running_ == []  # listed, not as running
    assert marker_after_listing is None
    assert cold.status is RunStatus.COMPLETED and cold.definition == definition
    if kill_at == PURGE_SUBJECTS:
        assert before.status is RunStatus.COMPLETED  # the finished save came before the kill
    else:
        assert before.status is RunStatus.RUNNING and before.definition == definition
