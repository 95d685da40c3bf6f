"""``dagnats run purge`` against a real API, engine and worker on a real nats-server: exit codes
0 (purged), 1 (still running) and 3 (unknown or already purged), and ``--json``."""

from __future__ import annotations

import functools
import json
import secrets
from collections.abc import AsyncIterator

import pytest
import trio
from typer.testing import Result

from dagnats_trio.api import Service
from dagnats_trio.api.rest import create_app
from dagnats_trio.api.server import ApiServer
from dagnats_trio.cli import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_OK
from dagnats_trio.engine import Engine
from dagnats_trio.inputs import InputsService
from dagnats_trio.protocol import RunStatus, layout
from dagnats_trio.transport import NatsTransport
from dagnats_trio.worker import TaskContext, Worker

from ._inproc import invoke

#: Bound of starting the stack and of each wait on a run.
WAIT_S = 15.0
WORKER_ACK_WAIT_S = 2.0


async def echo(tc: TaskContext) -> None:
    await tc.complete(tc.input)


class Api:
    def __init__(self, service: Service, url: str, echo_wf: str, idle_wf: str) -> None:
        self.service = service
        self.url = url
        self.echo_wf = echo_wf
        self.idle_wf = idle_wf

    async def cli(self, *args: str) -> Result:
        """The command as a user runs it (its own ``trio.run``, so in a thread)."""
        env = {"DAGNATS_API_URL": self.url, "COLUMNS": "200"}

        with trio.fail_after(WAIT_S):
            result = await trio.to_thread.run_sync(functools.partial(invoke, args, env=env))
        out = result.stdout + (result.stderr or "")
        assert "Traceback" not in out, out
        assert result.exception is None or isinstance(result.exception, SystemExit), out
        return result


@pytest.fixture
async def api(nats_transport: NatsTransport) -> AsyncIterator[Api]:
    t = nats_transport
    service, inputs = Service(t), InputsService(t)
    task = f"clipurge_{secrets.token_hex(4)}"
    echo_wf, idle_wf = f"clipurge-echo-{task}", f"clipurge-idle-{task}"
    await service.register_workflow({"name": echo_wf, "steps": [{"id": "e", "task": task}]})
    await service.register_workflow(
        {"name": idle_wf, "steps": [{"id": "i", "task": f"{task}_idle"}]}
    )
    app_ = create_app(service, inputs, t)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(WAIT_S):
            await nursery.start(Engine(t, inputs=inputs, legacy_step_events=False).run)
            worker = Worker(t, {task: echo}, inputs=inputs, ack_wait_s=WORKER_ACK_WAIT_S)
            await nursery.start(worker.run)
            url = await nursery.start(ApiServer(app_, "127.0.0.1", 0).run)
        yield Api(service, url, echo_wf, idle_wf)
        nursery.cancel_scope.cancel()


async def test_run_purge_exit_codes_and_json(api: Api) -> None:
    run_id = await api.service.start_run(api.echo_wf, {"n": 1})
    assert (await api.service.wait_for_run(run_id, WAIT_S)).status is RunStatus.COMPLETED

    res = await api.cli("run", "purge", run_id)
    assert res.exit_code == EXIT_OK, res.stdout + res.stderr
    assert f"purged run {run_id}" in res.stdout
    assert await api.service.transport.kv_get(layout.RUNS_BUCKET, layout.run_key(run_id)) is None
    res = await api.cli("run", "get", run_id)
    assert res.exit_code == EXIT_NOT_FOUND
    res = await api.cli("run", "purge", run_id)
    assert res.exit_code == EXIT_NOT_FOUND and "does not exist" in res.stderr

    other = await api.service.start_run(api.echo_wf, 2)
    await api.service.wait_for_run(other, WAIT_S)
    res = await api.cli("run", "purge", other, "--json")
    assert res.exit_code == EXIT_OK
    assert json.loads(res.stdout) == {"run_id": other, "purged": True}
    res = await api.cli("run", "purge", other, "--json")
    # --json: the error is JSON on stdout too (issue 13), with the same exit code
    assert res.exit_code == EXIT_NOT_FOUND
    error = json.loads(res.stdout)["error"]
    assert error["status"] == 404 and error["exit_code"] == EXIT_NOT_FOUND
    assert other in error["message"]


async def test_run_purge_of_a_running_run_exits_1_and_keeps_it(api: Api) -> None:
    run_id = await api.service.start_run(api.idle_wf, None)
    res = await api.cli("run", "purge", run_id)
    assert res.exit_code == EXIT_FAILED
    assert "still running" in res.stderr and "409 run_running" in res.stderr
    assert (await api.service.get_run(run_id)).status is RunStatus.RUNNING
    await api.service.cancel_run(run_id)
    snap = await api.service.wait_for_run(run_id, WAIT_S)
    assert snap.status is RunStatus.CANCELLED
    res = await api.cli("run", "purge", run_id)
    assert res.exit_code == EXIT_OK
