"""Generated requests to the NATS endpoints ``api.inputs.*``: every one gets a reply below 500
in the documented shape, and values outside the one JSON policy are 400 ``invalid_request``.

Hypothesis runs in a worker thread and sends each request on the test's Trio loop
(``trio.from_thread``), so one endpoint process serves every example.
"""

from __future__ import annotations

import json

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagnats_trio.inputs import GET_SUBJECT, SUBMIT_SUBJECT, WITHDRAW_SUBJECT, ErrorReply
from dagnats_trio.protocol import JsonPolicyError, decode_json
from dagnats_trio.transport import Transport

from ._helpers import new_run_id, write_snapshot
from .test_endpoints import REQUEST_TIMEOUT_S, STEP, call, serving

MAX_EXAMPLES = 300
TEST_DEADLINE_S = 120.0
POISON = ("NaN", "Infinity", "-Infinity", "1e400", "99999999999999999999", '"\\ud800"')
KEYS = ("run_id", "step_id", "request_id", "mode", "content", "wait", "since", "x")


def request_bodies(run_id: str) -> st.SearchStrategy[bytes]:
    scalar = st.one_of(
        st.sampled_from([json.dumps(v) for v in (run_id, STEP, "q1", "steer", "1s", "queued")]),
        st.text(max_size=10).map(json.dumps),
        st.integers(-5, 10**6).map(str),
        st.sampled_from(POISON),
    )
    value = st.recursive(
        scalar,
        lambda c: st.lists(c, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]"),
        max_leaves=5,
    )
    # The ids of a real step first (each kept or not), then drawn keys (which may repeat one).
    ids = [("run_id", json.dumps(run_id)), ("step_id", json.dumps(STEP)), ("request_id", '"q1"')]
    base = st.lists(st.booleans(), min_size=3, max_size=3).map(
        lambda keep: [pair for pair, k in zip(ids, keep, strict=True) if k or pair[0] != "run_id"]
    )
    drawn = st.lists(st.tuples(st.sampled_from(KEYS), value), max_size=4)
    obj = st.tuples(base, drawn).map(
        lambda t: "{" + ",".join(f'"{k}":{v}' for k, v in t[0] + t[1]) + "}"
    )
    return st.one_of(
        obj.map(str.encode),
        obj.map(str.encode),
        obj.map(lambda t: t.encode()[:-1] + b',"content":"\xed\xa0\x80"}'),
        st.binary(max_size=40),
    )


async def test_generated_requests_get_a_reply_in_the_documented_shape(
    transport: Transport,
) -> None:
    run_id = new_run_id()
    await write_snapshot(transport, run_id, {STEP: "running"})
    statuses: dict[int, int] = {}

    async def send(subject: str, body: bytes) -> None:
        with trio.fail_after(REQUEST_TIMEOUT_S * 2):
            reply = await call(transport, subject, body)
        statuses[reply.status] = statuses.get(reply.status, 0) + 1
        assert reply.status < 500, (subject, body, reply)
        try:
            decode_json(body, where="request")
        except JsonPolicyError:
            # Outside the policy: refused as a bad request, whatever else it holds.
            assert isinstance(reply, ErrorReply), (subject, body, reply)
            assert (reply.status, reply.error.code) == (400, "invalid_request"), reply
        if isinstance(reply, ErrorReply):
            assert reply.error.code and reply.error.message, reply

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        subject=st.sampled_from([SUBMIT_SUBJECT, GET_SUBJECT, WITHDRAW_SUBJECT]),
        body=request_bodies(run_id),
    )
    def example(subject: str, body: bytes) -> None:
        trio.from_thread.run(send, subject, body)

    with trio.fail_after(TEST_DEADLINE_S):
        async with serving(transport):
            await trio.to_thread.run_sync(example)
    print(
        f"api.inputs fuzz: {sum(statuses.values())} requests, statuses {sorted(statuses.items())}"
    )
    assert statuses.get(400, 0) > 0
