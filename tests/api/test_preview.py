"""``GET /runs/{run}/steps/{step}/preview``: what a handler puts with ``put_stream``, live."""

from __future__ import annotations

import base64

import trio

from dagnats_trio.protocol import layout
from dagnats_trio.worker import TaskContext, Worker

from ._sse import SseEvent, sse_events
from ._stack import Stack, error_code, idle_run, unique

#: Bound on the whole exchange between the client and the handler.
PREVIEW_BOUND_S = 20.0
#: A chunk that is not UTF-8: the API hands it on as base64.
RAW_CHUNK = b"\xff\x00\xfe"


async def test_preview_stream_carries_what_the_handler_put(any_api: Stack) -> None:
    api = any_api  # the session nats-server, then SimTransport
    task = unique("apitest_preview").replace("-", "_")
    workflow = unique("apitest-preview")
    await api.service.register_workflow({"name": workflow, "steps": [{"id": "talk", "task": task}]})
    handler_started = trio.Event()
    client_following = trio.Event()
    client_read = trio.Event()

    async def talk(tc: TaskContext) -> None:
        await tc.put_stream("before anyone follows")  # a preview is live: nobody gets this
        handler_started.set()
        await client_following.wait()
        await tc.put_stream("hello ")
        await tc.put_stream(RAW_CHUNK)
        await tc.put_stream("world")
        await client_read.wait()
        await tc.complete("done")

    got: list[SseEvent] = []
    with trio.fail_after(PREVIEW_BOUND_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(Worker(api.transport, {task: talk}, ack_wait_s=5.0).run)
            r = await api.client.post("/runs", json={"workflow": workflow})
            assert r.status_code == 201
            run_id = r.json()["run_id"]
            await handler_started.wait()
            async with api.client.stream("GET", f"/runs/{run_id}/steps/talk/preview") as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                # Another step's preview is not this one's.
                await api.transport.core_publish(
                    layout.preview_subject(run_id, "other"), b"not for this stream"
                )
                client_following.set()
                events = sse_events(response)
                for _ in range(3):
                    got.append(await anext(events))
                client_read.set()
                async for event in events:
                    got.append(event)
            nursery.cancel_scope.cancel()

    print(f"preview events: {[(e.event, e.data) for e in got]}")
    assert [e.event for e in got] == ["preview", "preview", "preview", "end"]
    assert all(e.id is None for e in got)  # not resumable: nothing is stored
    assert got[0].json() == {"text": "hello ", "base64": None}
    assert got[1].json() == {"text": None, "base64": base64.b64encode(RAW_CHUNK).decode()}
    assert got[2].json() == {"text": "world", "base64": None}
    assert got[3].json() == {"step_status": "completed", "run_status": "completed"}


async def test_preview_of_a_finished_step_ends_at_once(api: Stack) -> None:
    run_id = await idle_run(api)
    await api.service.cancel_run(run_id, "test")
    with trio.fail_after(PREVIEW_BOUND_S):
        async with api.client.stream("GET", f"/runs/{run_id}/steps/agent/preview") as response:
            assert response.status_code == 200
            events = [e async for e in sse_events(response)]
    assert [e.event for e in events] == ["end"]
    assert events[0].json()["run_status"] == "cancelled"


async def test_preview_errors(api: Stack) -> None:
    run_id = await idle_run(api)
    r = await api.client.get("/runs/nope/steps/agent/preview")
    assert r.status_code == 404
    assert error_code(r) == "run_not_found"
    r = await api.client.get(f"/runs/{run_id}/steps/nope/preview")
    assert r.status_code == 404
    assert error_code(r) == "step_not_found"
    r = await api.client.get(f"/runs/{run_id}/steps/agent/preview", params={"from": "1"})
    assert r.status_code == 400
    assert error_code(r) == "invalid_query"
    r = await api.client.post(f"/runs/{run_id}/steps/agent/preview")
    assert r.status_code == 405
