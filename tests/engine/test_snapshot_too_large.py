"""A run whose snapshot would be over the bound it may be stored at fails, once and for good.

Found from outside: three steps each completing with a ~400 KB output made a ~1.6 MB snapshot,
over nats-server's 1 MiB ``max_payload``; the run stayed "running" forever while the engine
retried the save about twice a second. The engine now fails the run with the reason
``snapshot_too_large``, decided on the stored snapshot (the oversize output left out).

The bound is the server's own ``max_payload`` (``Transport.max_payload_bytes``): on a server
configured with a quarter of the default, outputs the default server holds fail the run the
same way instead of being retried forever.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from dagnats_trio.api import Service
from dagnats_trio.engine import StepStatus
from dagnats_trio.engine.core import REASON_SNAPSHOT_TOO_LARGE
from dagnats_trio.protocol import LifecycleEvent, RunStatus, StepFailed, TaskMessage
from dagnats_trio.server import open_nats_server
from dagnats_trio.transport import NatsTransport, Transport, open_nats_transport, provision

from ._fakes import RUN_TIMEOUT_S, FakeWorker, complete_with, running, test_engine, uid

#: Steps of the workflow, none depending on another (their tasks carry no output onwards).
STEPS = ("a", "b", "c")
#: Each step's output when together they overflow the snapshot (three: ~1.2 MB).
BIG_OUTPUT_CHARS = 400 * 1024
#: Each step's output when together they fit (kept in the steps and in the run's output).
SMALL_OUTPUT_CHARS = 100 * 1024
#: A ``max_payload`` a server may be configured with: a quarter of the default.
SMALL_MAX_PAYLOAD_BYTES = 256 * 1024
#: Each step's output when together they fit a small server's snapshot.
TINY_OUTPUT_CHARS = 30 * 1024
#: A failure message that alone overflows the snapshot, in a history event that still fits.
BIG_ERROR_CHARS = 1000 * 1024 - 4096


async def _one_run(
    nats_transport: Transport, output_chars: int, *, fail_c: bool = False
) -> tuple[Service, str]:
    service = Service(nats_transport)
    task, wf = uid("big"), uid("big-out")
    await service.register_workflow({"name": wf, "steps": [{"id": s, "task": task} for s in STEPS]})

    async def script(t: TaskMessage) -> LifecycleEvent:
        if fail_c and t.step_id == "c":
            error = "x" * BIG_ERROR_CHARS
            return StepFailed(t.run_id, t.step_id, t.dispatch, error=error, retriable=False)
        return await complete_with(t, t.step_id * output_chars)

    worker = FakeWorker(nats_transport, task, script)
    engine = test_engine(nats_transport)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, worker):
            run = await service.start_run(wf)
            await service.wait_for_run(run, RUN_TIMEOUT_S)
    return service, run


async def test_outputs_over_the_snapshot_bound_fail_the_run(nats_transport: NatsTransport) -> None:
    service, run = await _one_run(nats_transport, BIG_OUTPUT_CHARS)
    snap = await service.get_run(run)  # read back from the store: what GET /runs/{id} shows
    assert snap.status is RunStatus.FAILED
    assert snap.error is not None and REASON_SNAPSHOT_TOO_LARGE in snap.error
    failed = [st for st in snap.steps.values() if st.reason == REASON_SNAPSHOT_TOO_LARGE]
    assert len(failed) == 1 and failed[0].status is StepStatus.FAILED
    assert snap.failed_step == failed[0].step_id
    assert failed[0].output is None  # the output that did not fit is left out
    completed = [st for st in snap.steps.values() if st.status is StepStatus.COMPLETED]
    assert len(completed) == 2


async def test_a_failure_message_over_the_bound_fails_the_run(
    nats_transport: NatsTransport,
) -> None:
    service, run = await _one_run(nats_transport, 10, fail_c=True)
    snap = await service.get_run(run)
    assert snap.status is RunStatus.FAILED and snap.failed_step == "c"
    assert snap.steps["c"].reason == REASON_SNAPSHOT_TOO_LARGE
    assert snap.error is not None and len(snap.error) < 1024


async def test_outputs_under_the_bound_complete(nats_transport: NatsTransport) -> None:
    service, run = await _one_run(nats_transport, SMALL_OUTPUT_CHARS)
    snap = await service.get_run(run)
    assert snap.status is RunStatus.COMPLETED
    assert all(st.reason is None for st in snap.steps.values())
    assert snap.steps["c"].output == "c" * SMALL_OUTPUT_CHARS


@pytest.fixture
async def small_transport() -> AsyncIterator[Transport]:
    """A provisioned transport on a server of its own, configured with a small ``max_payload``."""
    async with open_nats_server(max_payload_bytes=SMALL_MAX_PAYLOAD_BYTES) as server:
        url = server.url
        async with open_nats_transport(url) as transport:
            await provision(transport)
            yield transport


async def test_the_bound_is_the_servers_own_max_payload(small_transport: Transport) -> None:
    assert small_transport.max_payload_bytes == SMALL_MAX_PAYLOAD_BYTES
    # Outputs the default server holds (test_outputs_under_the_bound_complete) are over this
    # server's bound: the run fails, where the save was retried forever against a 1 MiB bound.
    service, run = await _one_run(small_transport, SMALL_OUTPUT_CHARS)
    snap = await service.get_run(run)
    assert snap.status is RunStatus.FAILED
    assert snap.error is not None and REASON_SNAPSHOT_TOO_LARGE in snap.error
    failed = [st for st in snap.steps.values() if st.reason == REASON_SNAPSHOT_TOO_LARGE]
    assert len(failed) == 1 and failed[0].output is None


async def test_outputs_under_a_small_servers_bound_complete(small_transport: Transport) -> None:
    service, run = await _one_run(small_transport, TINY_OUTPUT_CHARS)
    snap = await service.get_run(run)
    assert snap.status is RunStatus.COMPLETED
    assert snap.steps["c"].output == "c" * TINY_OUTPUT_CHARS
