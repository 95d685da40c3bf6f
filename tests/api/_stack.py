"""The stack under the REST tests: hypercorn on a free port, a real engine, a real nats-server.

``api`` gives a running stack without a token, ``authed_api`` one with :data:`TOKEN`. A real
:class:`Worker` serves :data:`ECHO_TASK` so runs can finish; :data:`IDLE_TASK` has no worker, so a
step of that type stays running until a test settles it (that is how journal tests control a
step).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import httpx
import trio
from _http import plain_http_client

from dagnats_trio.api import UNSERVED_AFTER_S, Service
from dagnats_trio.api.rest import create_app
from dagnats_trio.api.server import ApiServer
from dagnats_trio.engine import Engine
from dagnats_trio.inputs import InputsService
from dagnats_trio.protocol import (
    JournalRecord,
    encode_group,
    encode_record,
    group_headers,
    layout,
    record_headers,
)
from dagnats_trio.transport import Transport
from dagnats_trio.worker import TaskContext, Worker

TOKEN = "s3cret-token"
ECHO_TASK = "apitest_echo"
IDLE_TASK = "apitest_idle"
ECHO_WORKFLOW = "apitest-echo"
IDLE_WORKFLOW = "apitest-idle"
#: Bounds of the tests' own waits.
STACK_START_S = 10.0
WORKER_ACK_WAIT_S = 2.0
#: A small body limit so 413 is cheap to provoke.
TEST_MAX_BODY_BYTES = 8 * 1024
TEST_MAX_WAIT_S = 2.0
TEST_POLL_INTERVAL_S = 0.2


async def echo(tc: TaskContext) -> None:
    """The handler of :data:`ECHO_TASK`: completes with ``{"echo": <input>}``."""
    await tc.complete({"echo": tc.input})


@attrs.frozen
class Stack:
    transport: Transport
    service: Service
    inputs: InputsService
    url: str
    client: httpx.AsyncClient

    async def append(self, run_id: str, step_id: str, record: JournalRecord) -> int:
        """Append a journal record the way a worker does (fenced on the subject's tail)."""
        return await self._publish(run_id, step_id, encode_record(record), record_headers(record))

    async def append_group(self, run_id: str, step_id: str, records: list[JournalRecord]) -> int:
        """Append ``records`` as one message (a record group), as a worker stores a pair."""
        return await self._publish(run_id, step_id, encode_group(records), group_headers(records))

    async def _publish(
        self, run_id: str, step_id: str, data: bytes, headers: dict[str, str]
    ) -> int:
        subject = layout.journal_subject(run_id, step_id)
        last = await self.transport.get_last_msg(layout.JOURNAL_STREAM, subject)
        return await self.transport.publish(
            subject,
            data,
            headers=headers,
            expected_last_subject_seq=last.seq if last is not None else 0,
        )


async def register_workflows(service: Service) -> None:
    await service.register_workflow(
        {"name": ECHO_WORKFLOW, "steps": [{"id": "echo", "task": ECHO_TASK}]}
    )
    await service.register_workflow(
        {
            "name": IDLE_WORKFLOW,
            "steps": [
                {
                    "id": "agent",
                    "task": IDLE_TASK,
                    "type": "agent_loop",
                    "agent_loop": {"max_iterations": 10},
                }
            ],
        }
    )


@asynccontextmanager
async def open_stack(
    transport: Transport,
    token: str | None,
    *,
    unserved_after_s: float = UNSERVED_AFTER_S,
    max_body_bytes: int = TEST_MAX_BODY_BYTES,
    listen_host: str | None = None,
) -> AsyncIterator[Stack]:
    """``listen_host`` is the bind the app is told of (the server binds 127.0.0.1 whatever it
    says); None leaves out the loopback Host rule, as for an app served some other way."""
    service = Service(transport, unserved_after_s=unserved_after_s)
    inputs = InputsService(transport)
    await register_workflows(service)
    app = create_app(
        service,
        inputs,
        transport,
        token=token,
        max_body_bytes=max_body_bytes,
        max_wait_s=TEST_MAX_WAIT_S,
        poll_interval_s=TEST_POLL_INTERVAL_S,
        listen_host=listen_host,
    )
    async with trio.open_nursery() as nursery:
        with trio.fail_after(STACK_START_S):
            await nursery.start(Engine(transport, inputs=inputs, legacy_step_events=False).run)
            worker = Worker(transport, {ECHO_TASK: echo}, ack_wait_s=WORKER_ACK_WAIT_S)
            await nursery.start(worker.run)
            url = await nursery.start(ApiServer(app, "127.0.0.1", 0).run)
        async with plain_http_client(url, timeout=10.0) as client:
            yield Stack(transport, service, inputs, url, client)
        nursery.cancel_scope.cancel()


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


#: Bound on waiting for a run to finish.
RUN_FINISH_S = 10.0


def error_code(response: httpx.Response) -> str:
    """The code of a JSON error answer, after checking its shape."""
    body = response.json()
    assert set(body) == {"error"}
    assert {"code", "message"} <= set(body["error"]) <= {"code", "message", "problems"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return str(body["error"]["code"])


async def idle_run(api: Stack) -> str:
    """A run whose one step (``agent``, a loop) stays running: no worker serves it."""
    r = await api.client.post("/runs", json={"workflow": IDLE_WORKFLOW})
    assert r.status_code == 201
    return str(r.json()["run_id"])
