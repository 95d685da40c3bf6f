"""A run input too large for the run's first snapshot is refused with 413, naming the input.

Found from outside against ``dagnats dev`` (default body limit, 1 MiB): ``POST /runs`` with an
input of a million characters answered 500 ``internal`` (the first snapshot, which holds the
input twice, was over the server's ``max_payload``), after the run's index entry was written.
"""

from __future__ import annotations

import json

import trio

from dagnats_trio.api._rest_config import DEFAULT_MAX_BODY_BYTES, RUN_INPUT_MAX_BYTES
from dagnats_trio.transport import NatsTransport

from ._stack import IDLE_WORKFLOW, error_code, open_stack

#: Bound on the run's first task reaching its step (no worker takes it: the step stays running).
RUN_STARTED_S = 10.0


def body_with_input_of(size: int) -> bytes:
    """A start whose input is a string encoded in exactly ``size`` bytes (quotes included)."""
    return json.dumps(
        {"workflow": IDLE_WORKFLOW, "input": "x" * (size - 2)}, separators=(",", ":")
    ).encode()


async def test_an_input_over_the_bound_is_413_and_one_at_it_runs(
    nats_transport: NatsTransport,
) -> None:
    async with open_stack(nats_transport, None, max_body_bytes=DEFAULT_MAX_BODY_BYTES) as api:
        listed = await api.client.get("/runs", params={"workflow": IDLE_WORKFLOW, "limit": 1000})
        before = len(listed.json()["runs"])
        for size in (RUN_INPUT_MAX_BYTES + 1, 2 * RUN_INPUT_MAX_BYTES):
            body = body_with_input_of(size)
            assert len(body) < DEFAULT_MAX_BODY_BYTES  # within the body limit: the input's bound
            r = await api.client.post("/runs", content=body)
            assert r.status_code == 413, r.text
            assert error_code(r) == "input_too_large"
            assert r.json()["error"]["message"].startswith(f"input is {size} bytes")
        listed = await api.client.get("/runs", params={"workflow": IDLE_WORKFLOW, "limit": 1000})
        assert len(listed.json()["runs"]) == before
        # At the bound the run starts: its first snapshot is stored and reads back, and its
        # step is dispatched (no worker serves it, so it stays running).
        r = await api.client.post("/runs", content=body_with_input_of(RUN_INPUT_MAX_BYTES))
        assert r.status_code == 201, r.text[:300]
        run_id = r.json()["run_id"]
        with trio.fail_after(RUN_STARTED_S):
            while True:
                got = await api.client.get(f"/runs/{run_id}")
                assert got.status_code == 200, got.text[:300]
                if got.json()["steps"][0]["status"] == "running":
                    break
                await trio.sleep(0.1)
        assert got.json()["status"] == "running"
        assert got.json()["input"] == "x" * (RUN_INPUT_MAX_BYTES - 2)
