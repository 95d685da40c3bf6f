"""The inputs that answered 500 or stored invalid JSON are 400s naming the field or parameter.

On a real nats-server: superscript digits in integer query parameters, lone surrogates (escaped
or as raw bytes), and NaN, Infinity and 1e400 in run inputs, signal payloads and input content;
and the same values through the Python service and the NATS ``api.inputs`` endpoint, which share
the one JSON policy (:mod:`dagnats_trio.protocol.json_policy`). A run an older release stored
with a NaN input is not stuck: it can still be cancelled and purged.
"""

from __future__ import annotations

import json
import math

import pytest
import trio

from dagnats_trio.api import InvalidRequest
from dagnats_trio.inputs import SUBMIT_SUBJECT, ErrorReply, InputsEndpoints, decode_reply
from dagnats_trio.protocol import RunStatus, layout
from dagnats_trio.transport import RevisionMismatch

from ._stack import IDLE_WORKFLOW, Stack, error_code, idle_run

REQUEST_TIMEOUT_S = 5.0

#: Query parameters whose value ``str.isdigit()`` accepts but ``int()`` refuses or misreads.
ODD_DIGITS = ("%C2%B2", "%D9%A3", "%EF%BC%95", "+5", "%205", "1_0", "-1", "0x10")

#: Bodies of POST /runs that the stdlib parser takes, with the field each error must name.
NOT_JSON_RUN_BODIES = (
    (b'{"workflow": "%s", "input": NaN}', "body.input"),
    (b'{"workflow": "%s", "input": {"x": [1, Infinity]}}', "body.input.x[1]"),
    (b'{"workflow": "%s", "input": -Infinity}', "body.input"),
    (b'{"workflow": "%s", "input": {"big": 1e400}}', "body.input.big"),
    (b'{"workflow": "%s", "input": 123456789012345678901234567890}', "body.input"),
    (b'{"workflow": "%s", "input": "\\ud800"}', "body.input"),
    (b'{"workflow": "%s", "input": {"\\udfff": 1}}', "body.input"),
)


def run_body(template: bytes) -> bytes:
    return template.replace(b"%s", IDLE_WORKFLOW.encode())


async def test_integer_parameters_take_ascii_digits_only(api: Stack) -> None:
    run_id = await idle_run(api)
    for odd in ODD_DIGITS:
        r = await api.client.get(f"/runs?limit={odd}")
        assert r.status_code == 400, (odd, r.text)
        assert error_code(r) == "invalid_query"
        assert r.json()["error"]["message"].startswith("limit must be an integer from 1 to")
        for param in ("from", "limit"):
            r = await api.client.get(f"/runs/{run_id}/steps/agent/journal?{param}={odd}")
            assert r.status_code == 400, (param, odd, r.text)
            assert error_code(r) == "invalid_query"
            assert r.json()["error"]["message"].startswith(f"{param} must be an integer")
        if odd not in ("+5", "%205"):  # a duration may have spaces around it: " 5" is 5 ms
            r = await api.client.get(f"/runs/{run_id}/steps/agent/inputs/q1?wait={odd}")
            assert r.status_code == 400, (odd, r.text)
            assert error_code(r) == "invalid_wait"
        r = await api.client.get(
            f"/runs/{run_id}/steps/agent/journal", headers={"Last-Event-ID": "²".encode()}
        )
        assert r.status_code == 400
        assert error_code(r) == "invalid_last_event_id"
    # The good spellings still work.
    assert (await api.client.get("/runs?limit=5")).status_code == 200
    assert (await api.client.get(f"/runs/{run_id}/steps/agent/journal?from=1")).status_code == 200


async def test_run_inputs_that_are_not_json_are_400_naming_the_field(api: Stack) -> None:
    for template, where in NOT_JSON_RUN_BODIES:
        r = await api.client.post("/runs", content=run_body(template))
        assert r.status_code == 400, (template, r.text)
        assert error_code(r) == "invalid_json"
        assert r.json()["error"]["message"].startswith(f"{where}: "), r.text
    # A lone surrogate as raw bytes (CESU-style UTF-8 of U+D800) is not UTF-8.
    raw = b'{"workflow": "' + IDLE_WORKFLOW.encode() + b'", "input": "\xed\xa0\x80"}'
    r = await api.client.post("/runs", content=raw)
    assert r.status_code == 400
    assert error_code(r) == "invalid_json"
    assert "not valid UTF-8" in r.json()["error"]["message"]
    # A valid body with a surrogate pair and a large finite number is accepted and served back.
    good = b'{"workflow": "%s", "input": {"emoji": "\\ud83d\\ude00", "n": 1e300}}'
    r = await api.client.post("/runs", content=run_body(good))
    assert r.status_code == 201, r.text
    view = await api.client.get(f"/runs/{r.json()['run_id']}")
    assert view.status_code == 200
    assert json.loads(view.content)["input"] == {"emoji": "\U0001f600", "n": 1e300}


async def test_signal_payload_and_input_content_follow_the_same_policy(api: Stack) -> None:
    run_id = await idle_run(api)
    cases = (
        (f"/runs/{run_id}/signal/go", b'{"payload": NaN}', "body.payload"),
        (f"/runs/{run_id}/signal/go", b'{"payload": ["\\udc00"]}', "body.payload[0]"),
        (
            f"/runs/{run_id}/steps/agent/inputs",
            b'{"request_id": "q1", "mode": "steer", "content": {"t": Infinity}}',
            "body.content.t",
        ),
    )
    for path, body, where in cases:
        r = await api.client.post(path, content=body)
        assert r.status_code == 400, (path, body, r.text)
        assert error_code(r) == "invalid_json"
        assert r.json()["error"]["message"].startswith(f"{where}: ")
    # Nothing was stored: the input was never queued.
    r = await api.client.get(f"/runs/{run_id}/steps/agent/inputs/q1")
    assert r.status_code == 404


async def test_the_service_and_the_nats_endpoint_refuse_the_same_values(api: Stack) -> None:
    with pytest.raises(InvalidRequest, match=r"^input\.x: nan is not a JSON number"):
        await api.service.start_run(IDLE_WORKFLOW, {"x": float("nan")})
    with pytest.raises(InvalidRequest, match=r"^payload: a string holds a lone surrogate"):
        await api.service.send_signal(await idle_run(api), "go", "\ud800")
    run_id = await idle_run(api)
    endpoints = InputsEndpoints(api.transport, api.inputs)
    async with trio.open_nursery() as nursery:
        await nursery.start(endpoints.run)
        body = (
            b'{"run_id": "%s", "step_id": "agent", "request_id": "q2", "mode": "steer", '
            b'"content": [1e400]}' % run_id.encode()
        )
        reply = decode_reply(
            await api.transport.request(SUBMIT_SUBJECT, body, timeout_s=REQUEST_TIMEOUT_S)
        )
        nursery.cancel_scope.cancel()
    assert isinstance(reply, ErrorReply)
    assert reply.status == 400
    assert reply.error.code == "invalid_request"
    assert reply.error.message.startswith("request.content[0]: 1e400 is not a JSON number")


#: Bound on waiting for the engine to cancel a run.
CANCEL_WAIT_S = 10.0


async def store_legacy_nan_input(api: Stack, run_id: str) -> None:
    """Rewrite the run's snapshot the way an older release stored a NaN input (compare-and-set,
    retried while the engine writes it too)."""
    key = layout.run_key(run_id)
    while True:
        entry = await api.transport.kv_get(layout.RUNS_BUCKET, key)
        assert entry is not None and entry.value is not None
        # The input is left out while at its default (None): set, spelled as Python's json
        # (and the older release) spells a NaN.
        body = json.loads(entry.value)
        assert body.get("input") is None
        body["input"] = math.nan
        data = json.dumps(body, separators=(",", ":")).encode()
        assert b'"input":NaN' in data
        try:
            await api.transport.kv_update(layout.RUNS_BUCKET, key, data, entry.revision)
            return
        except RevisionMismatch:
            continue


async def test_a_run_stored_with_nan_by_an_older_release_can_be_cancelled_and_purged(
    api: Stack,
) -> None:
    run_id = await idle_run(api)
    await store_legacy_nan_input(api, run_id)
    r = await api.client.post(f"/runs/{run_id}/cancel")
    assert r.status_code == 202, r.text
    snap = await api.service.wait_for_run(run_id, CANCEL_WAIT_S)
    assert snap.status is RunStatus.CANCELLED
    assert math.isnan(snap.input)
    r = await api.client.delete(f"/runs/{run_id}")
    assert r.status_code == 204
    assert (await api.client.get(f"/runs/{run_id}")).status_code == 404
