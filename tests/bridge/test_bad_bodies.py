"""Hypothesis-generated bad bodies and queries on the bridge routes never give a 500.

Examples run in a worker thread and send each request on the test's Trio loop
(``trio.from_thread``), so one stack serves them all.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ._stack import Stack, error_code, unique

MAX_EXAMPLES = 25

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)
KEYS = (
    "type", "call", "response", "name", "input", "replay", "key", "output", "error",
    "retriable", "state", "mode", "delay_ms", "until_ms", "until_input", "duration_ms",
    "chunk", "partial", "interrupted", "iteration", "claim_id",
)  # fmt: skip
TYPES = ("model", "tool.intent", "tool.output", "tool.result", "commit", "claim", "input.placed")
near_misses = st.dictionaries(
    st.sampled_from(KEYS), json_values | st.sampled_from(TYPES), max_size=5
)
bodies = st.one_of(
    near_misses.map(lambda v: json.dumps(v).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=32),
)
ACTIONS = (
    "heartbeat", "journal/read", "journal/append", "inputs/place", "load_checkpoint",
    "checkpoint", "complete", "fail", "continue", "pause",
)  # fmt: skip


def check_answer(status: int, text: str) -> None:
    assert status < 500, (status, text)
    if status >= 400:
        body = json.loads(text)
        assert set(body) == {"error"} and isinstance(body["error"]["code"], str)
        assert "Traceback" not in text


async def test_generated_bad_requests_never_give_500(stack: Stack) -> None:
    workflow, task_type = await stack.workflow(loop=True)
    await stack.start(workflow)
    lease = await stack.poll(task_type)
    tokens = [lease["token"], "no-such-lease"]

    async def post(path: str, body: bytes, params: dict[str, str]) -> tuple[int, str]:
        r = await stack.client.post(
            path, content=body, params=params, headers={"content-type": "application/json"}
        )
        return r.status_code, r.text

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(token=st.sampled_from(tokens), action=st.sampled_from(ACTIONS), body=bodies)
    def bad_bodies(token: str, action: str, body: bytes) -> None:
        check_answer(*trio.from_thread.run(post, f"/bridge/leases/{token}/{action}", body, {}))

    @settings(max_examples=MAX_EXAMPLES // 2, deadline=None, database=None)
    @given(
        task=st.sampled_from([task_type, "bad.type", "x" * 200]),
        params=st.dictionaries(
            st.sampled_from(["wait", "x"]),
            st.one_of(st.text(max_size=8), st.integers(-5, 10**25).map(str)),
            max_size=2,
        ),
    )
    def bad_polls(task: str, params: dict[str, Any]) -> None:
        params = {**params, "wait": params.get("wait", "0")}
        if params["wait"].isdigit() and int(params["wait"]) > 200:
            params["wait"] = "0"  # keep the examples fast: long waits are the bridge's to cut
        check_answer(*trio.from_thread.run(post, f"/bridge/tasks/{task}/poll", b"", params))

    await trio.to_thread.run_sync(bad_bodies)
    await trio.to_thread.run_sync(bad_polls)
    # The lease survived the noise: it can still be settled.
    r = await stack.act(lease, "complete", {"output": 1})
    assert r.status_code in (200, 410), r.text


async def test_bad_task_types_and_step_ids_never_make_a_lease(stack: Stack) -> None:
    """A trailing newline used to pass (``re.match`` with ``$``) and make a lease that could
    never finish; now the poll is a 400 naming ``task_type`` and the definition is refused."""
    for bad in ("x\n", "a.b", "a b", "*", ">", "x" * 129):
        path = f"/bridge/tasks/{urllib.parse.quote(bad, safe='')}/poll"
        r = await stack.client.post(path, params={"wait": "0"})
        assert r.status_code == 400, (bad, r.text)
        assert error_code(r) == "invalid_task_type"
        assert r.json()["error"]["message"].startswith("task_type ")
    name = unique("bw-")
    r = await stack.client.post(
        "/workflows", json={"name": name, "steps": [{"id": "x\n", "task": unique("bt_")}]}
    )
    assert r.status_code == 400 and error_code(r) == "invalid_workflow", r.text
    assert [p["field"] for p in r.json()["error"]["problems"]] == ["id"]
    # A good one still leases.
    workflow, task_type = await stack.workflow()
    await stack.start(workflow)
    lease = await stack.poll(task_type)
    assert lease["step_id"] == "agent"
