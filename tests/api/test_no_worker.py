"""A run waiting on a task type that no worker polls says so (issue 13): ``no_worker`` on the
step in ``GET /runs/{id}``, gone once a worker for the type polls, never on a served type.

On a real nats-server, then on SimTransport; the bounds are shortened (the API's to
:data:`UNSERVED_TEST_S`, the worker's mark interval to :data:`MARK_TEST_S`) so the test does
not wait the production 30 s.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from dagnats_trio.api import no_worker_verdict
from dagnats_trio.transport import (
    Transport,
    open_nats_transport,
    open_sim_transport,
    provision,
)
from dagnats_trio.worker import TaskContext, Worker

from ._stack import Stack, open_stack, unique

#: The API's bound in this test (production: ``UNSERVED_AFTER_S`` = 30 s).
UNSERVED_TEST_S = 1.5
#: The workers' mark interval in this test (production: ``POLL_MARK_INTERVAL_S`` = 5 s).
MARK_TEST_S = 0.2
#: Bound on each wait for the API to show (or stop showing) the hint: generous, loaded machine.
HINT_WAIT_S = 20.0
#: The console script of this environment.
DAGNATS = Path(sys.executable).with_name("dagnats")
#: How often the test reads the run.
READ_INTERVAL_S = 0.1


async def _start(api: Stack, task_type: str) -> str:
    name = unique("nowork")
    r = await api.client.post(
        "/workflows", json={"name": name, "steps": [{"id": "s", "task": task_type}]}
    )
    assert r.status_code in (200, 201), r.text
    r = await api.client.post("/runs", json={"workflow": name})
    assert r.status_code == 201, r.text
    return str(r.json()["run_id"])


async def _step(api: Stack, run_id: str) -> dict[str, Any]:
    r = await api.client.get(f"/runs/{run_id}")
    assert r.status_code == 200, r.text
    (step,) = r.json()["steps"]
    assert isinstance(step, dict)
    return step


async def _until(api: Stack, run_id: str, ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    with trio.fail_after(HINT_WAIT_S):
        while True:
            step = await _step(api, run_id)
            if ok(step):
                return step
            await trio.sleep(READ_INTERVAL_S)


def _blocking(release: trio.Event) -> Callable[[TaskContext], Any]:
    async def handler(tc: TaskContext) -> None:
        await release.wait()
        await tc.complete({"ok": True})

    return handler


@pytest.fixture(params=["nats", "sim"])
async def transport(request: pytest.FixtureRequest, nats_url: str) -> AsyncIterator[Transport]:
    if request.param == "nats":
        async with open_nats_transport(nats_url, name="pytest-no-worker") as nats:
            await provision(nats)
            yield nats
    else:
        async with open_sim_transport() as sim:
            await provision(sim)
            yield sim


async def test_unserved_task_type_is_named_until_a_worker_polls(transport: Transport) -> None:
    nobody = unique("nobody_task")
    served = unique("served_task")
    release = trio.Event()
    async with (
        open_stack(transport, None, unserved_after_s=UNSERVED_TEST_S) as api,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(
            Worker(transport, {served: _blocking(release)}, poll_mark_interval_s=MARK_TEST_S).run
        )
        lonely = await _start(api, nobody)
        busy = await _start(api, served)
        started = trio.current_time()

        hinted = await _until(api, lonely, lambda s: s.get("no_worker") is not None)
        waited = trio.current_time() - started
        assert hinted["status"] == "running"
        assert hinted["no_worker"]["task_type"] == nobody
        assert hinted["no_worker"]["last_polled_at_ms"] is None
        assert nobody in hinted["no_worker"]["message"]
        # Not before the bound: a fresh dispatch gets time for a worker to come.
        assert waited >= UNSERVED_TEST_S * 0.9, waited
        # ``dagnats run get`` says it too.
        shown = await trio.run_process(
            [str(DAGNATS), "run", "get", lonely, "--api", api.url],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert shown.returncode == 0, shown.stderr
        out = shown.stdout.decode()
        assert f"step s: no worker has polled task type {nobody!r}" in out, out

        # The served type's step is running too (its handler holds it), and never hinted,
        # read after read, for well over the bound.
        reads = 0
        with trio.move_on_after(UNSERVED_TEST_S * 2):
            while True:
                step = await _step(api, busy)
                assert step["status"] == "running", step
                assert step.get("no_worker") is None, step
                reads += 1
                await trio.sleep(READ_INTERVAL_S)
        assert reads >= 3

        # A worker for the lonely type starts polling: the hint goes (its handler holds the
        # step, so the step is still running when it does).
        await nursery.start(
            Worker(transport, {nobody: _blocking(release)}, poll_mark_interval_s=MARK_TEST_S).run
        )
        cleared = await _until(api, lonely, lambda s: s.get("no_worker") is None)
        assert cleared["status"] == "running"
        print(f"hint after {waited:.1f} s (bound {UNSERVED_TEST_S} s); {reads} served reads clean")
        release.set()
        nursery.cancel_scope.cancel()


def test_the_verdict_waits_for_the_bound_from_dispatch_and_from_the_last_poll() -> None:
    """The pure rule under the hint, at its edges (bound 30 s, times in ms)."""
    bound_s = 30.0
    now = 1_000_000
    # A fresh dispatch gets the bound for a worker to come, mark or none.
    assert no_worker_verdict("t", None, now - 29_999, now, bound_s) is None
    # A recent poll: served.
    assert no_worker_verdict("t", now - 29_999, now - 60_000, now, bound_s) is None
    never = no_worker_verdict("t", None, now - 30_000, now, bound_s)
    assert never is not None and never.last_polled_at_ms is None
    assert never.message == "no worker has polled task type 't' (none seen)"
    gone = no_worker_verdict("t", now - 45_000, now - 60_000, now, bound_s)
    assert gone is not None and gone.last_polled_at_ms == now - 45_000
    assert gone.message == "no worker has polled task type 't' for 45 s"
