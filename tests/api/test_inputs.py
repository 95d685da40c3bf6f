"""Input routes: submit (201 new, 200 repeat), get with a bounded wait, withdraw (204, 409)."""

from __future__ import annotations

import trio

from dagnats_trio.inputs import Mode

from ._stack import (
    ECHO_WORKFLOW,
    RUN_FINISH_S,
    TEST_MAX_WAIT_S,
    Stack,
    error_code,
    idle_run,
    unique,
)


def inputs_path(run_id: str, step: str = "agent") -> str:
    return f"/runs/{run_id}/steps/{step}/inputs"


async def test_submit_repeat_get_withdraw(api: Stack) -> None:
    run_id = await idle_run(api)
    body = {"request_id": "msg-1", "mode": "steer", "content": {"text": "use staging"}}
    r = await api.client.post(inputs_path(run_id), json=body)
    assert r.status_code == 201
    sub = r.json()
    assert sub["request_id"] == "msg-1"
    assert sub["status"] == "queued"
    assert sub["mode"] == "steer"
    assert sub["content"] == {"text": "use staging"}

    # A repeat returns the original, whatever its content.
    r = await api.client.post(inputs_path(run_id), json={**body, "content": "other"})
    assert r.status_code == 200
    assert r.json()["content"] == {"text": "use staging"}

    r = await api.client.get(f"{inputs_path(run_id)}/msg-1")
    assert r.status_code == 200
    assert r.json()["status"] == "queued"

    r = await api.client.delete(f"{inputs_path(run_id)}/msg-1")
    assert r.status_code == 204
    assert r.content == b""
    r = await api.client.get(f"{inputs_path(run_id)}/msg-1")
    assert r.json()["status"] == "withdrawn"
    # A retried DELETE is still a 204.
    r = await api.client.delete(f"{inputs_path(run_id)}/msg-1")
    assert r.status_code == 204


async def test_get_with_wait_is_bounded(api: Stack) -> None:
    run_id = await idle_run(api)
    body = {"request_id": "w-1", "mode": "follow_up", "content": 1}
    assert (await api.client.post(inputs_path(run_id), json=body)).status_code == 201

    start = trio.current_time()
    r = await api.client.get(f"{inputs_path(run_id)}/w-1", params={"wait": "300ms"})
    elapsed = trio.current_time() - start
    assert r.status_code == 200
    assert r.json()["status"] == "queued"
    assert 0.25 <= elapsed < 0.3 + 2.0

    # Asking for an hour waits no longer than the server's bound.
    start = trio.current_time()
    r = await api.client.get(f"{inputs_path(run_id)}/w-1", params={"wait": "3600000"})
    assert r.status_code == 200
    assert trio.current_time() - start < TEST_MAX_WAIT_S + 2.0

    # A change during the wait answers at once with the new status.
    async def withdraw_soon() -> None:
        await api.inputs.withdraw(run_id, "agent", "w-1")

    with trio.fail_after(TEST_MAX_WAIT_S + 2.0):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(withdraw_soon)
            r = await api.client.get(
                f"{inputs_path(run_id)}/w-1", params={"wait": "30s", "since": "queued"}
            )
    assert r.json()["status"] == "withdrawn"

    for bad in ({"wait": "soon"}, {"wait": "-5"}, {"since": "later"}, {"color": "x"}):
        r = await api.client.get(f"{inputs_path(run_id)}/w-1", params=bad)
        assert r.status_code == 400, bad


async def test_withdraw_of_placed_input_conflicts(api: Stack) -> None:
    run_id = await idle_run(api)
    body = {"request_id": "p-1", "mode": "steer", "content": "x"}
    assert (await api.client.post(inputs_path(run_id), json=body)).status_code == 201
    [stored] = await api.inputs.placement_candidates(run_id, "agent", Mode.STEER)
    assert await api.inputs.claim(stored, 0) is not None

    r = await api.client.delete(f"{inputs_path(run_id)}/p-1")
    assert r.status_code == 409
    assert error_code(r) == "not_withdrawable"
    r = await api.client.get(f"{inputs_path(run_id)}/p-1")
    assert r.json()["status"] == "placed"


async def test_input_errors(api: Stack) -> None:
    run_id = await idle_run(api)
    ok = {"request_id": "e-1", "mode": "steer", "content": "x"}
    r = await api.client.post(inputs_path(run_id, "nostep"), json=ok)
    assert r.status_code == 404
    assert error_code(r) == "step_not_found"
    r = await api.client.post(inputs_path(unique("run")), json=ok)
    assert r.status_code == 404
    assert error_code(r) == "run_not_found"
    r = await api.client.get(f"{inputs_path(run_id)}/never-sent")
    assert r.status_code == 404
    r = await api.client.delete(f"{inputs_path(run_id)}/never-sent")
    assert r.status_code == 404

    for bad in (
        {**ok, "mode": "shout"},
        {**ok, "request_id": "has\nnewline"},  # (a dot is fine: see test_ids.py)
        {**ok, "request_id": 7},
        {"mode": "steer", "content": 1},
        {"request_id": "e-2", "mode": "steer"},
        {**ok, "extra": True},
    ):
        r = await api.client.post(inputs_path(run_id), json=bad)
        assert r.status_code == 400, bad
    r = await api.client.post(inputs_path(run_id), content=b"[")
    assert r.status_code == 400

    r = await api.client.post(inputs_path(run_id), json={**ok, "content": "x" * 20_000})
    assert r.status_code == 413


async def test_input_to_finished_step_conflicts(api: Stack) -> None:
    r = await api.client.post("/runs", json={"workflow": ECHO_WORKFLOW, "input": 0})
    run_id = r.json()["run_id"]
    await api.service.wait_for_run(run_id, RUN_FINISH_S)
    body = {"request_id": "late", "mode": "steer", "content": "too late"}
    r = await api.client.post(inputs_path(run_id, "echo"), json=body)
    assert r.status_code == 409
