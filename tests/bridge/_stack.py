"""The stack under the bridge tests: hypercorn on a free port serving the REST app with a
:class:`Bridge`, a real engine, a real nats-server. Each test registers its own workflow with its
own task type, so tests sharing the session server never lease each other's tasks."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx
import trio
from _http import plain_http_client

from dagnats_trio.api import Service
from dagnats_trio.api.rest import create_app
from dagnats_trio.api.server import ApiServer
from dagnats_trio.bridge import Bridge
from dagnats_trio.engine import Engine
from dagnats_trio.inputs import InputsService
from dagnats_trio.protocol import DispatchId, TaskMessage, encode_task, layout
from dagnats_trio.transport import Transport

TOKEN = "bridge-s3cret"
#: AckWait of the bridge's consumers: short, so a lapsed lease is redelivered quickly.
ACK_WAIT_S = 1.0
#: The restart limit the stack's bridge uses (a third claim in a row without progress fails).
RESTART_LIMIT = 2
STACK_START_S = 10.0
RUN_FINISH_S = 10.0
#: Longest a test's poll waits: covers one AckWait expiry and redelivery.
POLL_WAIT = "6s"
#: Bound on a test's own waiting loops.
WAIT_S = 10.0
POLL_STEP_S = 0.05


def unique(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(4)}"


def error_code(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"error"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert "Traceback" not in response.text
    return str(body["error"]["code"])


@attrs.frozen
class Stack:
    transport: Transport
    service: Service
    bridge: Bridge
    client: httpx.AsyncClient

    async def workflow(
        self, *, loop: bool = False, max_attempts: int | None = None
    ) -> tuple[str, str]:
        """Register a one-step workflow with a fresh task type: (workflow name, task type)."""
        task_type = unique("bt_")
        name = unique("bw-")
        step: dict[str, Any] = {"id": "agent", "task": task_type}
        if loop:
            step["type"] = "agent_loop"
            step["agent_loop"] = {"max_iterations": 10}
        if max_attempts is not None:
            step["retry"] = {"max_attempts": max_attempts}
        await self.service.register_workflow({"name": name, "steps": [step]})
        return name, task_type

    async def start(self, workflow: str, input: Any = None) -> str:
        r = await self.client.post("/runs", json={"workflow": workflow, "input": input})
        assert r.status_code == 201, r.text
        return str(r.json()["run_id"])

    async def poll(self, task_type: str, wait: str = POLL_WAIT) -> dict[str, Any]:
        r = await self.client.post(f"/bridge/tasks/{task_type}/poll", params={"wait": wait})
        assert r.status_code == 200, (r.status_code, r.text)
        lease: dict[str, Any] = r.json()
        return lease

    async def act(self, lease: dict[str, Any], action: str, body: Any = None) -> httpx.Response:
        path = f"/bridge/leases/{lease['token']}/{action}"
        if body is None:
            return await self.client.post(path)
        return await self.client.post(path, json=body)

    async def ok(self, lease: dict[str, Any], action: str, body: Any = None) -> dict[str, Any]:
        r = await self.act(lease, action, body)
        assert r.status_code == 200, (action, r.status_code, r.text)
        answer: dict[str, Any] = r.json()
        return answer

    async def redeliver(self, lease: dict[str, Any]) -> None:
        """Publish the leased task message again, as a redelivery of the same dispatch would
        hand it out (no AckWait to wait for)."""
        task = TaskMessage(
            run_id=lease["run_id"],
            step_id=lease["step_id"],
            task=lease["task_type"],
            workflow=lease["workflow"],
            dispatch=DispatchId(lease["iteration"], lease["attempt"], lease["nonce"]),
            input=lease["input"],
            journal_seq=lease["journal_seq"],
            loop_state_max_bytes=lease["loop_state_max_bytes"],
            is_loop=lease["is_loop"],
        )
        await self.transport.publish(layout.task_subject(task.task, task.run_id), encode_task(task))

    async def run_view(self, run_id: str) -> dict[str, Any]:
        r = await self.client.get(f"/runs/{run_id}")
        assert r.status_code == 200
        view: dict[str, Any] = r.json()
        return view

    async def finished(self, run_id: str) -> dict[str, Any]:
        with trio.fail_after(RUN_FINISH_S):
            while True:
                view = await self.run_view(run_id)
                if view["status"] != "running":
                    return view
                await trio.sleep(POLL_STEP_S)


@asynccontextmanager
async def open_stack(
    transport: Transport, *, token: str | None = None, engine: bool = True
) -> AsyncIterator[Stack]:
    service = Service(transport)
    inputs = InputsService(transport)
    bridge = Bridge(transport, ack_wait_s=ACK_WAIT_S, restart_limit=RESTART_LIMIT, inputs=inputs)
    app = create_app(service, inputs, transport, token=token, bridge=bridge)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(STACK_START_S):
            if engine:
                await nursery.start(Engine(transport, inputs=inputs, legacy_step_events=False).run)
            await nursery.start(bridge.run)
            url = await nursery.start(ApiServer(app, "127.0.0.1", 0).run)
        headers = {"authorization": f"Bearer {token}"} if token else {}
        async with plain_http_client(url, timeout=15.0, headers=headers) as client:
            yield Stack(transport, service, bridge, client)
        nursery.cancel_scope.cancel()
