"""Workflow and run routes, over HTTP against a real engine and nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import trio

from dagnats_trio.api.service import CANCEL_REASON_MAX_CHARS
from dagnats_trio.protocol import layout

from ._stack import (
    ECHO_WORKFLOW,
    IDLE_WORKFLOW,
    RUN_FINISH_S,
    TEST_MAX_BODY_BYTES,
    Stack,
    error_code,
    unique,
)


async def test_healthz_and_openapi(api: Stack) -> None:
    r = await api.client.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok", "nats": "up"}
    r = await api.client.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc["openapi"].startswith("3.")
    assert "/runs/{run_id}/steps/{step_id}/journal" in doc["paths"]


async def test_unknown_path_and_wrong_method(api: Stack) -> None:
    r = await api.client.get("/nope")
    assert r.status_code == 404
    assert error_code(r) == "not_found"
    r = await api.client.delete("/workflows")
    assert r.status_code == 405
    assert error_code(r) == "method_not_allowed"
    assert "POST" in r.headers["allow"]


async def test_register_get_and_list_workflows(api: Stack) -> None:
    name = unique("wf")
    definition = {
        "name": name,
        "steps": [
            {"id": "a", "task": "t", "timeout": "30s"},
            {"id": "b", "task": "t", "depends_on": ["a"]},
        ],
    }
    r = await api.client.post("/workflows", json=definition)
    assert r.status_code == 201
    assert r.json()["name"] == name
    assert r.json()["steps"][0]["timeout"] == 30_000

    r = await api.client.get(f"/workflows/{name}")
    assert r.status_code == 200
    assert [s["id"] for s in r.json()["steps"]] == ["a", "b"]

    r = await api.client.get("/workflows")
    assert r.status_code == 200
    names = [w["name"] for w in r.json()["workflows"]]
    assert name in names and ECHO_WORKFLOW in names

    r = await api.client.get(f"/workflows/{unique('missing')}")
    assert r.status_code == 404
    assert error_code(r) == "workflow_not_found"
    r = await api.client.get("/workflows/bad.name")
    assert r.status_code == 400  # not an id at all: a bad request naming the field
    assert error_code(r) == "invalid_name"


async def test_register_invalid_workflow_lists_problems(api: Stack) -> None:
    r = await api.client.post(
        "/workflows",
        json={
            "name": unique("wf"),
            "steps": [
                {"id": "a", "task": "t", "timeout": "soon"},
                {"id": "b", "task": "t", "depends_on": ["ghost"]},
            ],
        },
    )
    assert r.status_code == 400
    assert error_code(r) == "invalid_workflow"
    problems = r.json()["error"]["problems"]
    where = {(p["step"], p["field"]) for p in problems}
    assert ("a", "timeout") in where
    assert ("b", "depends_on") in where
    assert all(p["message"] for p in problems)


async def test_register_bad_json_and_oversized(api: Stack) -> None:
    r = await api.client.post(
        "/workflows", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert error_code(r) == "invalid_json"
    r = await api.client.post("/workflows", content=b"")
    assert r.status_code == 400
    big = b'{"name": "x", "pad": "' + b"x" * TEST_MAX_BODY_BYTES + b'"}'
    r = await api.client.post("/workflows", content=big)
    assert r.status_code == 413
    assert error_code(r) == "body_too_large"


async def test_oversized_body_without_content_length_is_refused_while_reading(api: Stack) -> None:
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(64):
            sent += 1024
            yield b"x" * 1024

    r = await api.client.post("/runs", content=chunks())
    assert "content-length" not in r.request.headers
    assert r.status_code == 413
    assert error_code(r) == "body_too_large"


async def test_start_run_to_completion_and_get(api: Stack) -> None:
    r = await api.client.post("/runs", json={"workflow": ECHO_WORKFLOW, "input": {"n": 1}})
    assert r.status_code == 201
    run_id = r.json()["run_id"]
    await api.service.wait_for_run(run_id, RUN_FINISH_S)

    r = await api.client.get(f"/runs/{run_id}")
    assert r.status_code == 200
    run = r.json()
    assert run["run_id"] == run_id
    assert run["status"] == "completed"
    assert run["input"] == {"n": 1}
    assert run["output"] == {"echo": {"n": 1}}
    [step] = run["steps"]
    assert step["step_id"] == "echo"
    assert step["status"] == "completed"
    assert step["iteration"] == 0
    assert step["attempt"] == 1
    assert step["output"] == {"echo": {"n": 1}}
    assert step["error"] is None

    r = await api.client.get(f"/runs/{unique('run')}")
    assert r.status_code == 404
    assert error_code(r) == "run_not_found"
    r = await api.client.get("/runs/bad.id")
    assert r.status_code == 400  # not an id at all: a bad request naming the field
    assert error_code(r) == "invalid_run_id"


async def test_start_run_errors(api: Stack) -> None:
    r = await api.client.post("/runs", json={"input": 1})
    assert r.status_code == 400
    assert "workflow" in r.json()["error"]["message"]
    r = await api.client.post("/runs", json={"workflow": 5})
    assert r.status_code == 400
    r = await api.client.post("/runs", json={"workflow": ECHO_WORKFLOW, "inptu": 1})
    assert r.status_code == 400
    assert "inptu" in r.json()["error"]["message"]
    r = await api.client.post("/runs", json=[1, 2])
    assert r.status_code == 400
    r = await api.client.post("/runs", json={"workflow": unique("missing")})
    assert r.status_code == 404
    assert error_code(r) == "workflow_not_found"
    r = await api.client.post("/runs", json={"workflow": ECHO_WORKFLOW, "idempotency_key": ""})
    assert r.status_code == 400


async def test_idempotency_key_returns_the_same_run(api: Stack) -> None:
    key = unique("key")
    body = {"workflow": ECHO_WORKFLOW, "input": 1, "idempotency_key": key}
    first = await api.client.post("/runs", json=body)
    again = await api.client.post("/runs", json=body)
    assert first.status_code == again.status_code == 201
    assert first.json()["run_id"] == again.json()["run_id"]
    other = await api.client.post("/runs", json={**body, "idempotency_key": unique("key")})
    assert other.json()["run_id"] != first.json()["run_id"]


async def test_list_runs_filters_and_pages(api: Stack) -> None:
    name = unique("wf")
    await api.service.register_workflow({"name": name, "steps": [{"id": "s", "task": "never"}]})
    started = []
    for i in range(3):
        r = await api.client.post("/runs", json={"workflow": name, "input": i})
        started.append(r.json()["run_id"])

    seen: list[str] = []
    cursor: str | None = None
    for _ in range(10):
        params = {"workflow": name, "limit": "2"}
        if cursor:
            params["cursor"] = cursor
        r = await api.client.get("/runs", params=params)
        assert r.status_code == 200
        page = r.json()
        assert len(page["runs"]) <= 2
        assert all(run["workflow"] == name for run in page["runs"])
        seen += [run["run_id"] for run in page["runs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == started[::-1]  # newest first (issue 13), across pages

    r = await api.client.get("/runs", params={"workflow": name, "status": "completed"})
    assert r.status_code == 200
    assert r.json()["runs"] == []
    r = await api.client.get("/runs", params={"workflow": name, "status": "running"})
    assert len(r.json()["runs"]) == 3

    # Each a 400 invalid_query naming the parameter (found from outside: `limit=` was the
    # default, and a bad status or cursor said `bad_request`).
    for bad, named in (
        ({"status": "sleeping"}, "status"),
        ({"limit": "0"}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"limit": ""}, "limit"),
        ({"colour": "red"}, "colour"),
        ({"cursor": "x1"}, "cursor"),
        ({"status": "running", "cursor": "i5"}, "cursor"),
    ):
        r = await api.client.get("/runs", params=bad)
        assert r.status_code == 400, bad
        assert error_code(r) == "invalid_query", (bad, r.text)
        assert named in r.json()["error"]["message"], (bad, r.text)
    r = await api.client.get("/runs", params={"workflow": name, "status": ""})
    assert r.status_code == 200  # an empty filter is no filter


async def test_cancel_run(api: Stack) -> None:
    r = await api.client.post("/runs", json={"workflow": IDLE_WORKFLOW})
    run_id = r.json()["run_id"]
    r = await api.client.post(f"/runs/{run_id}/cancel", json={"reason": "test"})
    assert r.status_code == 202
    assert r.json()["run_id"] == run_id
    snap = await api.service.wait_for_run(run_id, RUN_FINISH_S)
    assert snap.status.value == "cancelled"

    r = await api.client.post(f"/runs/{run_id}/cancel")
    assert r.status_code == 409
    assert error_code(r) == "run_finished"
    assert f"run {run_id!r} has already finished (cancelled)" in r.text
    r = await api.client.post(f"/runs/{unique('run')}/cancel")
    assert r.status_code == 404
    r = await api.client.post(f"/runs/{run_id}/cancel", json={"reason": 3})
    assert r.status_code == 400
    r = await api.client.get(f"/runs/{run_id}/cancel")
    assert r.status_code == 405


async def test_send_signal(api: Stack) -> None:
    r = await api.client.post("/runs", json={"workflow": IDLE_WORKFLOW})
    run_id = r.json()["run_id"]
    r = await api.client.post(f"/runs/{run_id}/signal/approve", json={"payload": {"ok": True}})
    assert r.status_code == 202
    assert r.json() == {"run_id": run_id, "name": "approve"}
    assert await api.service.get_signal(run_id, "approve") == {"ok": True}

    r = await api.client.post(f"/runs/{run_id}/signal/nudge")
    assert r.status_code == 202
    # Read the stored payload directly: Service.get_signal only decodes objects for now.
    entry = await api.transport.kv_get(layout.SIGNALS_BUCKET, layout.signal_key(run_id, "nudge"))
    assert entry is not None and entry.value == b"null"

    r = await api.client.post(f"/runs/{unique('run')}/signal/approve", json={})
    assert r.status_code == 404
    r = await api.client.post(f"/runs/{run_id}/signal/bad.name", json={})
    assert r.status_code == 400
    r = await api.client.post(f"/runs/{run_id}/signal/approve", json={"payload": 1, "x": 2})
    assert r.status_code == 400
    await api.service.cancel_run(run_id)
    with trio.fail_after(RUN_FINISH_S):
        await api.service.wait_for_run(run_id, RUN_FINISH_S)


async def test_a_step_view_carries_its_timers(api: Stack) -> None:
    """The step timeout and a loop's max_duration of a dispatched step, as epoch ms (issue 14
    item 3: the console shows them); none once the step has finished."""
    name = unique("wf-timers")
    step = {
        "id": "s",
        "task": unique("unserved"),
        "timeout": "1h",
        "type": "agent_loop",
        "agent_loop": {"max_iterations": 3, "max_duration": "2h"},
    }
    await api.service.register_workflow({"name": name, "steps": [step]})
    run_id = (await api.client.post("/runs", json={"workflow": name})).json()["run_id"]
    key = layout.run_key(run_id)
    with trio.fail_after(RUN_FINISH_S):
        async with api.transport.kv_watch(layout.RUNS_BUCKET, key) as changes:
            snap = await api.service.get_run(run_id)  # watch first, then read: none missed
            if snap.steps["s"].dispatched_at_ms is None:
                async for _ in changes:
                    snap = await api.service.get_run(run_id)
                    if snap.steps["s"].dispatched_at_ms is not None:
                        break
    st = snap.steps["s"]
    assert st.dispatched_at_ms is not None and st.started_at_ms is not None
    view = (await api.client.get(f"/runs/{run_id}")).json()["steps"][0]
    assert view["timeout_at_ms"] == st.dispatched_at_ms + 3_600_000
    assert view["max_duration_at_ms"] == st.started_at_ms + 7_200_000
    assert view["waiting_for"] is None and view["wake_at_ms"] is None
    assert view["wakes_on_input"] is False
    await api.service.cancel_run(run_id)
    await api.service.wait_for_run(run_id, RUN_FINISH_S)
    view = (await api.client.get(f"/runs/{run_id}")).json()["steps"][0]
    assert view["timeout_at_ms"] is None and view["max_duration_at_ms"] is None


async def test_a_cancel_reason_over_the_bound_is_refused_and_one_at_it_cancels(api: Stack) -> None:
    """Found from outside: a reason near the body limit was accepted (202) and made the run's
    snapshot too large for NATS, so the engine retried the cancel forever and the run never
    ended. Over :data:`CANCEL_REASON_MAX_CHARS` it is a 400 naming the reason, and nothing is
    sent to the engine."""
    r = await api.client.post("/runs", json={"workflow": IDLE_WORKFLOW})
    run_id = r.json()["run_id"]
    r = await api.client.post(
        f"/runs/{run_id}/cancel", json={"reason": "r" * (CANCEL_REASON_MAX_CHARS + 1)}
    )
    assert r.status_code == 400, r.text[:200]
    assert r.json()["error"]["message"].startswith(f"reason is {CANCEL_REASON_MAX_CHARS + 1}")
    last = await api.transport.get_last_msg(layout.HISTORY_STREAM, layout.history_subject(run_id))
    assert last is not None and b"cancel" not in last.data.lower()
    reason = "r" * CANCEL_REASON_MAX_CHARS
    r = await api.client.post(f"/runs/{run_id}/cancel", json={"reason": reason})
    assert r.status_code == 202, r.text[:200]
    snap = await api.service.wait_for_run(run_id, RUN_FINISH_S)
    assert snap.status.value == "cancelled" and snap.error == reason


async def test_a_query_parameter_given_twice_is_refused(api: Stack) -> None:
    """Found from outside: ``?workflow=a&workflow=b`` listed the runs of ``b`` alone, and
    ``?limit=1&limit=2`` took 2; a client meaning both got neither said. Each is a 400 naming
    the parameter; one of each is answered as before."""
    for query in ("workflow=a&workflow=b", "limit=1&limit=2", "status=running&status=failed"):
        r = await api.client.get(f"/runs?{query}")
        assert r.status_code == 400, (query, r.text)
        assert error_code(r) == "invalid_query"
        assert query.split("=")[0] in r.json()["error"]["message"], r.text
    r = await api.client.get(f"/runs?workflow={IDLE_WORKFLOW}&limit=1&status=running")
    assert r.status_code == 200, r.text
