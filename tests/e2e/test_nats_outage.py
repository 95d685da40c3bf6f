"""The whole stack rides out a 90 s NATS outage mid-run (issue 16, item 1).

Before: nats-py gave a connection up after 120 reconnect attempts 0.25 s apart (~30 s), so an
outage of 40 s killed every worker (``connection closed``, rc 1) and left runs ``running``. Now
the transport reconnects for as long as it takes (capped, jittered backoff), each connection
says once that NATS is unreachable and once that it is back, ``/healthz`` answers 503 ``nats:
down`` meanwhile, and the run finishes afterwards with its unsafe tool started once.

The real server is stopped while the unsafe tool runs, kept down for :data:`OUTAGE_S` (the
outage is what is tested, so it is waited out in full), and restarted on the same store and
port. The API and the engine share one connection, the worker has its own.
"""

from __future__ import annotations

import logging
from typing import Final

import pytest
import trio
from _outage import LOOK_EVERY_S, OUTAGE_S, RECOVERY_BOUND_S, START_BOUND_S, health_answer
from api._stack import open_stack

from dagnats_trio.journal import Replay, ToolCall, check, read_journal
from dagnats_trio.protocol import ToolIntentRecord, ToolResultRecord
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import Client, open_nats_transport, provision
from dagnats_trio.worker import TaskContext, Worker

#: The worker's AckWait: the held task comes back soon after the server does.
ACK_WAIT_S: Final = 2.0
TASK: Final = "outage_agent"
WORKFLOW: Final = "outage-wf"
#: Where each client says that NATS is unreachable and that it is back.
TRANSPORT_LOGGER: Final = {
    "nats-py": "dagnats_trio.transport._nats_connect",
    "native": "dagnats_trio.nats._dialer",
}


@pytest.mark.slow
@pytest.mark.parametrize("client", ["native", "nats-py"])
async def test_a_90s_outage_mid_run_is_ridden_out(
    fresh_nats_server: NatsServer, caplog: pytest.LogCaptureFixture, client: Client
) -> None:
    server = fresh_nats_server
    url = server.url
    caplog.set_level(logging.INFO, logger="dagnats_trio")
    in_tool, server_gone = trio.Event(), trio.Event()
    tool_starts: list[int] = []

    async def agent(tc: TaskContext) -> None:
        j = await tc.journal()

        async def charge(call: ToolCall) -> str:
            tool_starts.append(tc.num_delivered)
            in_tool.set()
            await server_gone.wait()  # the charge completes while NATS is away
            return "charged"

        result = await j.tool(ToolCall("charge", 5), Replay.UNSAFE, charge)
        await tc.complete({"interrupted": result.interrupted, "output": result.output})

    async with (
        open_nats_transport(url, name="outage-api-engine", client=client) as shared,
        open_nats_transport(url, name="outage-worker", client=client) as worker_nats,
    ):
        await provision(shared)
        async with open_stack(shared, None) as api, trio.open_nursery() as nursery:
            await api.service.register_workflow(
                {"name": WORKFLOW, "steps": [{"id": "agent", "task": TASK}]}
            )
            worker = Worker(worker_nats, {TASK: agent}, ack_wait_s=ACK_WAIT_S)
            await nursery.start(worker.run)
            r = await api.client.post("/runs", json={"workflow": WORKFLOW})
            assert r.status_code == 201
            run_id = r.json()["run_id"]
            assert await health_answer(api.client, 200, START_BOUND_S) == {
                "status": "ok",
                "nats": "up",
            }
            with trio.fail_after(START_BOUND_S):
                await in_tool.wait()

            await server.stop_process()
            stopped_at = trio.current_time()
            server_gone.set()
            down = await health_answer(api.client, 503, START_BOUND_S)
            assert down == {"status": "unavailable", "nats": "down"}
            await trio.sleep(max(0.0, OUTAGE_S - (trio.current_time() - stopped_at)))
            await server.start()
            outage_s = trio.current_time() - stopped_at
            assert server.url == url, "the restarted server moved: the clients cannot follow"

            back_at = trio.current_time()
            with trio.fail_after(RECOVERY_BOUND_S):
                while True:
                    r = await api.client.get(f"/runs/{run_id}")
                    if r.status_code == 200 and r.json()["status"] != "running":
                        break
                    await trio.sleep(LOOK_EVERY_S)
            recovered_s = trio.current_time() - back_at
            run = r.json()
            up = await health_answer(api.client, 200, RECOVERY_BOUND_S)
            records = await read_journal(shared, run_id, "agent")
            nursery.cancel_scope.cancel()

    said = [r.getMessage() for r in caplog.records if r.name == TRANSPORT_LOGGER[client]]
    unreachable = [m for m in said if m.startswith("NATS is unreachable")]
    back = [m for m in said if m.startswith("NATS is back")]
    print(
        f"outage {outage_s:.1f} s; run {run['status']} {recovered_s:.1f} s after the restart; "
        f"tool started {len(tool_starts)}x; records {[rec.TYPE for _, rec in records]}; "
        f"said: {unreachable + back}"
    )
    assert run["status"] == "completed", run
    assert tool_starts == [1]  # started once, by the first delivery; never again
    # Depending on what the held delivery managed to store when the connection came back (its
    # buffered result, or a retriable failure that a retry then honours), a later attempt may
    # record the call again, but only ever as interrupted: it never runs the tool.
    intents = [rec for _, rec in records if isinstance(rec, ToolIntentRecord)]
    results = [rec for _, rec in records if isinstance(rec, ToolResultRecord)]
    assert intents and {i.name for i in intents} == {"charge"}
    assert len([r for r in results if not r.interrupted]) <= 1
    assert len(results) == len(intents)
    assert check(records, engine_iterations=1).ok
    assert up == {"status": "ok", "nats": "up"}
    # Each of the two connections said it once, and said once that NATS was back.
    assert len(unreachable) == 2 and len(back) == 2, said
    assert all(float(m.rsplit(" after ", 1)[1].split()[0]) >= OUTAGE_S - 1 for m in back), back
