"""Hypothesis-generated bad bodies and queries never give a 500, and every error is JSON.

Hypothesis drives its examples from a worker thread and sends each request on the test's own Trio
loop (``trio.from_thread``), so one server stack serves every example instead of one per example.
"""

from __future__ import annotations

import json
from typing import Any

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagnats_trio.api._rest_views import PROBLEMS_LISTED_MAX
from dagnats_trio.web.body import UNKNOWN_FIELDS_LISTED_MAX

from ._stack import IDLE_WORKFLOW, Stack

MAX_EXAMPLES = 50

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)

KNOWN_KEYS = (
    "workflow",
    "input",
    "idempotency_key",
    "request_id",
    "mode",
    "content",
    "payload",
    "reason",
    "name",
    "steps",
    "id",
    "task",
)

#: Objects with the routes' own keys and wrong-ish values: the likeliest to get past parsing.
near_misses = st.dictionaries(st.sampled_from(KNOWN_KEYS), json_values, max_size=5)

bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    near_misses.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.text(max_size=40).map(str.encode),
)

query_values = st.one_of(st.text(max_size=12), st.integers(-5, 10**20).map(str))


def post_targets(run_id: str) -> list[str]:
    return [
        "/workflows",
        "/runs",
        f"/runs/{run_id}/cancel",
        f"/runs/{run_id}/signal/go",
        f"/runs/{run_id}/steps/agent/inputs",
        "/runs/no-such-run/steps/agent/inputs",
    ]


def check_answer(status: int, text: str) -> None:
    assert status < 500, (status, text)
    if status >= 400:
        body = json.loads(text)
        assert set(body) == {"error"}
        assert isinstance(body["error"]["code"], str)
        assert "Traceback" not in text


async def test_generated_bad_requests_never_give_500(api: Stack) -> None:
    r = await api.client.post("/runs", json={"workflow": IDLE_WORKFLOW})
    run_id = r.json()["run_id"]
    targets = post_targets(run_id)

    async def post(path: str, body: bytes) -> tuple[int, str]:
        resp = await api.client.post(
            path, content=body, headers={"content-type": "application/json"}
        )
        return resp.status_code, resp.text

    async def get(path: str, params: dict[str, str]) -> tuple[int, str]:
        resp = await api.client.get(path, params=params)
        return resp.status_code, resp.text

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(path=st.sampled_from(targets), body=bodies)
    def bad_bodies(path: str, body: bytes) -> None:
        check_answer(*trio.from_thread.run(post, path, body))

    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None)
    @given(
        path=st.sampled_from(["/runs", f"/runs/{run_id}/steps/agent/journal"]),
        params=st.dictionaries(
            st.sampled_from(["from", "limit", "workflow", "status", "cursor", "x"]),
            query_values,
            max_size=3,
        ),
    )
    def bad_queries(path: str, params: dict[str, Any]) -> None:
        check_answer(*trio.from_thread.run(get, path, params))

    await trio.to_thread.run_sync(bad_bodies)
    await trio.to_thread.run_sync(bad_queries)


async def test_a_body_of_many_unknown_keys_is_answered_in_a_bounded_error(api: Stack) -> None:
    """Found from outside: 60,000 unknown keys (a 1 MB body) drew a 6.5 MB 400 from
    ``POST /workflows``, every key a problem, and ``POST /runs`` quoted every name."""
    keys = {f"k{i}": 0 for i in range(600)}
    r = await api.client.post("/workflows", json={"name": "w", "steps": [], **keys})
    assert r.status_code == 400
    problems = r.json()["error"]["problems"]
    assert len(problems) == PROBLEMS_LISTED_MAX + 1
    more = problems[-1]["message"].removesuffix(" more problems not listed")
    assert int(more) >= 600 - PROBLEMS_LISTED_MAX, problems[-1]
    r = await api.client.post("/runs", json={"workflow": IDLE_WORKFLOW, **keys})
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert f"and {600 - UNKNOWN_FIELDS_LISTED_MAX} more; allowed:" in message
    assert len(message) < 1000
    # A few unknown keys are all named, as before.
    r = await api.client.post("/runs", json={"workflow": IDLE_WORKFLOW, "colour": 1})
    assert r.status_code == 400 and "unknown field(s) colour; allowed:" in r.text
