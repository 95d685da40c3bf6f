"""With a token configured, every route but /healthz needs it (inputs and journal included)."""

from __future__ import annotations

import trio

from dagnats_trio.api._rest_openapi import ROUTES

from ._sse import sse_events
from ._stack import IDLE_WORKFLOW, TOKEN, Stack, error_code
from .test_journal import claim

GOOD = {"Authorization": f"Bearer {TOKEN}"}
STREAM_WAIT_S = 5.0


def concrete(path: str) -> str:
    return (
        path.replace("{run_id}", "r1")
        .replace("{step_id}", "agent")
        .replace("{request_id}", "q1")
        .replace("{name}", "n1")
    )


async def test_every_route_but_healthz_needs_the_token(authed_api: Stack) -> None:
    client = authed_api.client
    bad_headers: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": TOKEN},
        {"Authorization": f"Basic {TOKEN}"},
    ]
    for route in ROUTES:
        for headers in bad_headers:
            r = await client.request(
                route.method, concrete(route.path), headers=headers, json={"x": 1}
            )
            if not route.auth:
                assert r.status_code == 200, route.path
                continue
            assert r.status_code == 401, (route.method, route.path, headers)
            assert error_code(r) == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"
            # a missing token and a wrong one are told apart
            told = "bearer token is wrong" if headers else "a bearer token is required"
            assert told in r.json()["error"]["message"], (route.path, headers)
    # Unknown paths too: nothing is revealed without the token.
    r = await client.get("/no/such/path")
    assert r.status_code == 401


async def test_the_token_opens_runs_inputs_and_journal(authed_api: Stack) -> None:
    client = authed_api.client
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/openapi.json", headers=GOOD)).status_code == 200
    assert (await client.get("/runs", headers=GOOD)).status_code == 200

    r = await client.post("/runs", json={"workflow": IDLE_WORKFLOW}, headers=GOOD)
    assert r.status_code == 201
    run_id = r.json()["run_id"]
    inputs = f"/runs/{run_id}/steps/agent/inputs"
    body = {"request_id": "a1", "mode": "steer", "content": "hi"}
    assert (await client.post(inputs, json=body)).status_code == 401
    assert (await client.post(inputs, json=body, headers=GOOD)).status_code == 201
    assert (await client.get(f"{inputs}/a1")).status_code == 401
    assert (await client.get(f"{inputs}/a1", headers=GOOD)).status_code == 200
    assert (await client.delete(f"{inputs}/a1")).status_code == 401
    assert (await client.delete(f"{inputs}/a1", headers=GOOD)).status_code == 204

    await authed_api.append(run_id, "agent", claim())
    journal = f"/runs/{run_id}/steps/agent/journal"
    assert (await client.get(journal)).status_code == 401
    r = await client.get(journal, headers=GOOD)
    assert r.status_code == 200
    assert len(r.json()["records"]) == 1
    r = await client.get(journal, params={"follow": "1"})
    assert r.status_code == 401
    with trio.fail_after(STREAM_WAIT_S):
        async with client.stream("GET", journal, params={"follow": "1"}, headers=GOOD) as response:
            assert response.status_code == 200
            first = await anext(sse_events(response))
    assert first.event == "claim"

    signal = f"/runs/{run_id}/signal/go"
    assert (await client.post(signal, json={})).status_code == 401
    assert (await client.post(signal, json={}, headers=GOOD)).status_code == 202
    cancel = f"/runs/{run_id}/cancel"
    assert (await client.post(cancel)).status_code == 401
    assert (await client.post(cancel, headers=GOOD)).status_code == 202
