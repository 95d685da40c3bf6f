"""The in-process 90 s outage scenario of tests/e2e/test_nats_outage.py, run by the ``outages``
fixture (tests/conftest.py) beside the other outage scenarios; the test asserts on what it
returns.

The real server is stopped while the unsafe tool runs, kept down for :data:`OUTAGE_S` (the
outage is what is tested, so it is waited out in full), and restarted on the same store and
port. The API and the engine share one connection, the worker has its own.
"""

from __future__ import annotations

from typing import Any, Final

import attrs
import trio
from _outage import LOOK_EVERY_S, OUTAGE_S, RECOVERY_BOUND_S, START_BOUND_S, health_answer
from api._stack import open_stack

from dagnats_trio.journal import Replay, ToolCall, read_journal
from dagnats_trio.protocol import JournalRecord
from dagnats_trio.server import open_nats_server
from dagnats_trio.transport import Client, open_nats_transport, provision
from dagnats_trio.worker import TaskContext, Worker

#: The worker's AckWait: the held task comes back soon after the server does.
ACK_WAIT_S: Final = 2.0
TASK: Final = "outage_agent"
WORKFLOW: Final = "outage-wf"


@attrs.frozen
class StackOutage:
    """What the scenario saw: the outage's length, the run once it finished, its journal."""

    outage_s: float
    recovered_s: float
    run: dict[str, Any]
    tool_starts: list[int]
    records: list[tuple[int, JournalRecord]]
    down: dict[str, str]
    up: dict[str, str]


async def ride_out_in_process(client: Client) -> StackOutage:
    """One run through API, engine and worker in this process (on ``client``), across a
    :data:`OUTAGE_S` outage of a nats-server of its own."""
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
        open_nats_server() as server,
        open_nats_transport(server.url, name="outage-api-engine", client=client) as shared,
        open_nats_transport(server.url, name="outage-worker", client=client) as worker_nats,
    ):
        url = server.url
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
    return StackOutage(outage_s, recovered_s, run, tool_starts, records, down, up)
